"""The Spark session factory: Delta configured, master/memory/warehouse root from the configuration.

``spark_conf`` is pure Python so that the Airflow DAG can hand the very same settings to
``spark-submit`` without importing pyspark at parse time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import metadata

from etl.config import EtlConfig

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def delta_package(cfg: EtlConfig | None = None) -> str:
    """Maven coordinates of the Delta jar matching the installed pyspark and delta-spark."""
    if cfg is not None and cfg.delta_package:
        return cfg.delta_package
    spark_version = metadata.version("pyspark")
    delta_version = metadata.version("delta-spark")
    major_minor = ".".join(spark_version.split(".")[:2])
    return f"io.delta:delta-spark_{major_minor}_2.13:{delta_version}"


def spark_conf(cfg: EtlConfig) -> dict[str, str]:
    """Every Spark setting the jobs need, except the master (a connection's business under Airflow)."""
    conf = {
        "spark.jars.packages": delta_package(cfg),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.driver.memory": cfg.spark_driver_memory,
        "spark.sql.shuffle.partitions": str(cfg.spark_shuffle_partitions),
        "spark.default.parallelism": str(max(2, cfg.spark_shuffle_partitions)),
        # Keep spark-warehouse/ and friends out of the working directory.
        "spark.sql.warehouse.dir": f"{cfg.warehouse_uri}/_spark_sql",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "true" if cfg.spark_ui else "false",
        "spark.ui.showConsoleProgress": "false",
        # Landing partitions (arrival_hour=07) stay strings; "07" is not the number 7.
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        # The Delta log of small tables does not need 50 tasks to replay.
        "spark.databricks.delta.snapshotPartitions": "2",
        # VACUUM lists files with this many tasks (10000 by default): far too many for small tables.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(2, cfg.spark_shuffle_partitions)),
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        "spark.sql.adaptive.enabled": "true",
    }
    java_options = cfg.spark_driver_java_options.strip()
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
    return conf


def check_java() -> str:
    """Fail with a clear message when there is no Java 17+ to run Spark on."""
    java = shutil.which("java", path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin")) or shutil.which("java")
    if not java:
        raise RuntimeError("Java was not found: Spark needs Java 17 or newer on PATH (or JAVA_HOME set).")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    return out.splitlines()[0] if out else java


def in_spark_submit() -> bool:
    """True when spark-submit launched this Python (master and jars were set on the command line)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_spark_session(cfg: EtlConfig, app_name: str = "active-dw-etl", master: str | None = None):
    """A SparkSession with Delta. Under spark-submit the submitted master and jars are kept."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    conf = spark_conf(cfg)
    if in_spark_submit():
        conf.pop("spark.jars.packages")
        conf.pop("spark.driver.memory")
        conf.pop("spark.driver.extraJavaOptions", None)  # the driver JVM is already running
    else:
        check_java()
        builder = builder.master(master or cfg.spark_master)
        # Ingestion runs Python on the executors (etl.records): the interpreter that has this
        # package (PySpark hands PYSPARK_PYTHON to the executors; spark-submit sets it itself).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    # Numbering a micro-batch's tuples in arrival order (new surrogate keys, epochs) is a global
    # sort of one bounded batch by design; Spark warns about it on every batch. Planning happens
    # on the driver, so quieting the driver's logger is enough.
    try:
        jvm = session.sparkContext._jvm
        for noisy in (
            "org.apache.spark.sql.execution.window.WindowExec",  # single-partition numbering, by design
            "org.apache.spark.rdd.MapPartitionsRDD",  # "locally checkpointed" notes on every step
        ):
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(noisy, jvm.org.apache.logging.log4j.Level.ERROR)
    except Exception:  # pragma: no cover - a different logging backend: keep the warning
        pass
    return session


def _prefetch() -> None:
    """Start and stop a session once so Spark downloads the Delta jars into its Ivy cache."""
    from etl.config import load_config

    print(f"java: {check_java()}")
    cfg = load_config()
    print(f"fetching {delta_package(cfg)} (cached after the first time)...", flush=True)
    spark = build_spark_session(cfg.replace(spark_master="local[1]"), app_name="etl-prefetch")
    spark.range(1).count()
    spark.stop()
    print("Spark with Delta is ready.")


if __name__ == "__main__":
    _prefetch()
