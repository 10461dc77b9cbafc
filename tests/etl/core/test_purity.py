"""The pure core stays pure: each of these modules, imported alone in a fresh interpreter, loads
no pyspark, delta or great_expectations. The policies, the simulator and the DAG files' parse rely
on it; the layers show it in the tree (etl/core) and this test keeps it so."""

import pkgutil
import subprocess
import sys

import pytest

import etl.core
import etl.simulator

HEAVY = ("pyspark", "py4j", "delta", "great_expectations")
PURE = sorted(
    [f"etl.core.{m.name}" for m in pkgutil.iter_modules(etl.core.__path__)]
    + [f"etl.simulator.{m.name}" for m in pkgutil.iter_modules(etl.simulator.__path__)]
    + [
        "etl.core", "etl.generator", "etl.io.landing", "etl.io.lock",
        "etl.entrypoints.airflow_support",  # what the DAG files import at parse time
        "etl.entrypoints.cli",  # `etl --help` and `etl simulate` without a JVM
        "etl.quality.offline_docs",  # set-up's fetch of the Data Docs' scripts and styles
    ]
)


def test_the_core_package_lists_its_modules():
    assert {"etl.core.config", "etl.core.registry", "etl.core.policy", "etl.core.layout", "etl.core.interval"} <= set(PURE)


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_loads_no_spark_delta_or_great_expectations(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r});"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r});"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{module} loads {done.stdout.strip()} {done.stderr[-2000:]}"
