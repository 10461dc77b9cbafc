"""One session-scoped Spark (local[2], few shuffle partitions, UI off); every test gets its own
warehouse, landing zone and GX root under tmp_path. A Spark test's warehouse starts with its
(empty) tables, copied from a template made once per session: creating eight Delta tables
takes seconds, a copy milliseconds. A test of table creation itself is marked ``no_tables``; a protocol test where Delta is not
the claim is marked ``memory_tables`` and its tables live in this process's memory."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from etl.core.config import EtlConfig

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every job the tests start in a subprocess (crash, concurrency, CLI, cluster, Airflow) is a short
# job on small data in a cold JVM: C1-only JIT took 0.77x the time of the default here
# (docs/decisions/driver-jit-for-tests.md). The session fixture below is long-lived and keeps the default JIT.
# C1 alone gets a 48 MB code cache: `etl stream` filled it once, and the JVM disabled its compiler
# and said so on stdout, in front of the command's JSON. The usual 240 MB.
os.environ.setdefault("ETL_SPARK_DRIVER_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")
# ... and interprets its expressions instead of compiling them: a cold `etl run`
# of two batches, 0.86x (docs/decisions/driver-codegen-for-tests.md). The results do not depend on it.
os.environ.setdefault("ETL_SPARK_CODEGEN", "false")



@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from etl.core.spark_conf import kafka_package, s3a_packages
    from etl.io.spark import build_spark_session, make_class_archive, make_local_fs_jar

    # 4g: one JVM holds the whole suite's several hundred Delta tables (their logs' cached states)
    # and broadcasts; at 2g the suite ran out of heap once the declared entities' tests were added.
    # Spark's Kafka source too: the Kafka tests read a real broker in this session; and Hadoop's S3A
    # connector: the object-store tests keep a warehouse on a real S3-API server (``s3_store``).
    # The classes it loads, and from where, logged for tests/etl/io/test_spark.py (the class-data archive).
    root = tmp_path_factory.mktemp("spark-base")
    base = EtlConfig(warehouse_root=str(root), spark_shuffle_partitions=2, spark_driver_memory="4g",
                     spark_packages=",".join([kafka_package(), *s3a_packages()]), spark_codegen=False,
                     spark_driver_java_options=f"-Xlog:class+load=info:file={root / 'classes.log'}")
    # The local file system's class and the drivers' class-data archive are set-up's, unless the
    # source, the JDK or the venv changed since (seconds, then a minute).
    make_local_fs_jar(base)
    make_class_archive(base.replace(spark_driver_java_options=""))
    session = build_spark_session(base, app_name="etl-tests", master="local[2]")
    # Test data is a few hundred rows: compiling generated code (spark_codegen above, as for the
    # tests' processes) and re-planning stages cost more than they save (test_partitioned.py: 0.77x
    # the time; docs/decisions/test-session-execution.md). The results do not depend on either;
    # the jobs the tests start as processes keep adaptive execution.
    session.conf.set("spark.sql.adaptive.enabled", "false")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_store(spark, tmp_path_factory):
    """One real S3-API server per session on 127.0.0.1 (``etl.devtools.s3_server``: S3Proxy over
    a directory), serving bucket ``warehouse``; the session's S3A connector pointed at it. A test
    keeps its warehouse under ``s3a://warehouse/<its own prefix>``; a driver of its own gets the
    same settings from ``s3_store.properties_file`` (setting ``spark_properties_file``)."""
    from etl.devtools import s3_server

    root = tmp_path_factory.mktemp("s3")
    server = s3_server.start(root / "server", buckets=("warehouse",))
    server.configure(spark)
    server.properties_file = server.write_properties(root / "s3a.properties")
    yield server
    server.stop()


@pytest.fixture
def cfg(request, tmp_path: Path) -> EtlConfig:
    config = EtlConfig(
        warehouse_root=str(tmp_path / "warehouse"),
        landing_root=str(tmp_path / "landing"),
        gx_root=str(tmp_path / "gx"),
        runs_root=str(tmp_path / "runs"),
        reports_root=str(tmp_path / "reports"),
        spark_master="local[2]",
        spark_shuffle_partitions=2,
        micro_batch_seconds=60,
        key_domain=2000,
        n_part=8,
    )
    in_memory = request.node.get_closest_marker("memory_tables") is not None
    if in_memory:
        config = config.replace(table_store="memory")
    if "spark" in request.fixturenames and not request.node.get_closest_marker("no_tables"):
        if in_memory:
            from etl.io.tables import open_tables

            open_tables(request.getfixturevalue("spark"), config).ensure()
        else:
            shutil.copytree(request.getfixturevalue("empty_warehouse"), config.warehouse_path)
    yield config


@pytest.fixture(autouse=True)
def memory_tables_dropped(request):
    """The in-memory tables a test kept under its ``tmp_path`` (its ``cfg`` marked
    ``memory_tables``, a reference warehouse: ``tests.helpers.reference_in_memory``), dropped
    after it."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    memory_tables = sys.modules.get("etl.io.memory_tables")
    if tmp is not None and memory_tables is not None:
        memory_tables.forget_under(str(tmp))


@pytest.fixture
def etl_process(tmp_path):
    """``etl`` commands as real processes (tests/processes.py), logs under the test's directory;
    any still running when the test ends is killed with its JVM."""
    from tests.processes import EtlProcesses

    processes = EtlProcesses(tmp_path)
    yield processes
    processes.stop_all()


@pytest.fixture(scope="session")
def empty_warehouse(spark, tmp_path_factory) -> Path:
    """A warehouse with every table created and no rows: copied into each Spark test's ``cfg``."""
    from etl.io.tables import ensure_tables

    root = tmp_path_factory.mktemp("empty-warehouse") / "warehouse"
    ensure_tables(spark, EtlConfig(warehouse_root=str(root)))
    return root


def pytest_collection_modifyitems(items):
    """Tests that take the ``spark`` fixture are marked ``spark`` (``make test-fast`` skips them);
    the quick gate's are marked ``gate`` (tests/gate.py). Each test's tier goes into the JUnit
    report CI writes (``scripts/test_times.py`` sums it)."""
    from tests.gate import in_gate

    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
        if in_gate(item.nodeid):
            item.add_marker(pytest.mark.gate)
        tier = next((t for t in ("slow", "e2e", "spark") if item.get_closest_marker(t)), "pure")
        item.user_properties.append(("tier", tier))


def pytest_configure(config):
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)  # no "Closing down clientserver" after capture ends
