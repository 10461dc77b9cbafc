"""Every module of the product imports: a module no test reaches still fails the quick gate
(`make test-gate`) on a broken import, a renamed name or a syntax error, before any JVM starts.
The DAG files are parsed by tests/dags/test_etl_load_dag.py (a DagBag)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import benchmarks
import etl
import expectations
import warehouse

PACKAGES = (etl, warehouse, expectations, benchmarks)
MODULES = sorted(
    m.name for package in PACKAGES for m in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    if not m.name.endswith(".__main__")  # `python -m etl` itself: importing it runs the command
)


def test_the_walk_finds_the_modules_of_each_layer():
    assert {"etl.core.policy", "etl.load.loader", "etl.strategies.partitioned.join", "etl.entrypoints.cli",
            "warehouse.schemas", "expectations.warehouse_suite", "benchmarks.strategies"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_imports(module):
    importlib.import_module(module)
