"""What the DAG files need from the package, kept light: nothing here imports Spark or GX."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from etl.core.config import EtlConfig
from etl.core.spark_conf import spark_conf

SPARK_CONN_ID = "etl_spark"
APPLICATION = str(Path(__file__).with_name("spark_entry.py"))
INTERVAL_ARGS = ["--start", "{{ data_interval_start.isoformat() }}", "--end", "{{ data_interval_end.isoformat() }}"]


def submit_conf(cfg: EtlConfig) -> dict[str, str]:
    """spark-submit settings: the job's Spark settings plus the Python that has the ``etl`` package."""
    conf = spark_conf(cfg)
    conf["spark.pyspark.python"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    conf["spark.pyspark.driver.python"] = os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable)
    return conf


def run_report(data_interval_start, data_interval_end) -> dict:
    """The report task's body: print the run summary and return it (the task's XCom)."""
    from etl import jobs
    from etl.core.config import load_config
    from etl.core.interval import Interval

    cfg = load_config()
    rep = jobs.report(cfg, Interval(data_interval_start, data_interval_end))
    print(jobs.format_report(rep))
    return rep


def publish_quality_report(data_interval_start, data_interval_end) -> dict:
    """The report DAG's last task: print where the report and plots are, return its summary."""
    from etl.core.config import load_config
    from etl.core.interval import Interval
    from etl.quality.report import read_report, summarize

    cfg = load_config()
    rep = summarize(read_report(cfg, Interval(data_interval_start, data_interval_end)))
    print(f"quality report {rep['interval']}: suites {'passed' if rep['suites_passed'] else 'FAILED'}")
    print(f"  plot        {rep['plot']}")
    print(f"  windows     {rep['windows_csv']}")
    print(f"  Data Docs   {rep['data_docs']}")
    return rep
