"""What the DAG files need from the package, kept light: nothing here imports Spark or GX."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from etl.core.config import EtlConfig, load_config
from etl.core.spark_conf import spark_conf

SPARK_CONN_ID = "etl_spark"
APPLICATION = str(Path(__file__).with_name("spark_entry.py"))
STREAM_LOADED = "loaded_by_stream"
LOAD_TASK = "ingest_load_validate"  # the interval's one Spark driver (etl run)
REPORT_TASK = "report"  # what a fact's sensors wait for: the dimension's interval loaded and validated
INTERVAL_ARGS = ["--start", "{{ data_interval_start.isoformat() }}", "--end", "{{ data_interval_end.isoformat() }}"]


def entity_configs(cfg: EtlConfig) -> list[tuple[str, EtlConfig]]:
    """One (DAG id suffix, configuration) per entity of the model, read at parse time (a TOML file,
    no Spark, no table): the entity at the roots (the default customer) keeps the DAG ids it always
    had; any other entity's DAGs end in ``_<entity>``."""
    return [(dag_suffix(cfg, e.name), cfg.for_entity(e.name)) for e in cfg.model.entities]


@dataclass(frozen=True)
class DimensionLoad:
    entity: str
    dag_id: str


def dag_suffix(cfg: EtlConfig, entity: str) -> str:
    return "" if cfg.model.entity(entity).directory == "" else f"_{entity}"


def dimension_loads(cfg: EtlConfig) -> list[DimensionLoad]:
    """The load DAGs a fact's load DAG waits for: its referenced dimensions' (none for a dimension)."""
    return [DimensionLoad(n, f"etl_load{dag_suffix(cfg, n)}") for n in cfg.entity_model.dimensions]


def entity_args(cfg: EtlConfig) -> list[str]:
    """What a task passes to ``etl`` so it works on this DAG's entity."""
    return ["--entity", cfg.entity_model.name]


def _config(entity: str = "") -> EtlConfig:
    return load_config(overrides={"entity": entity or None})


def spark_job(cfg: EtlConfig, name: str) -> dict:
    """A SparkSubmitOperator's arguments for a job of this configuration: the connection, the
    application, its Spark settings and the site's ``spark_properties_file`` (read by spark-submit
    itself, so its values, secrets among them, never enter the DAG or the rendered command)."""
    return dict(conn_id=SPARK_CONN_ID, application=APPLICATION, conf=submit_conf(cfg), name=name,
                properties_file=str(Path(cfg.spark_properties_file).expanduser()) if cfg.spark_properties_file else None)


def submit_conf(cfg: EtlConfig) -> dict[str, str]:
    """spark-submit settings: the job's Spark settings plus the Python that has the ``etl`` package."""
    conf = spark_conf(cfg)
    conf["spark.pyspark.python"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    conf["spark.pyspark.driver.python"] = os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable)
    return conf


def stream_route(data_interval_start, data_interval_end, poll_seconds: float = 10.0, entity: str = "") -> str:
    """The load DAG's first task: the task to go on with. An interval the always-on loader has
    loaded is only validated and reported; while a live stream has yet to load it, wait for it
    (loading it here too would race it); otherwise ingest and load as usual."""
    import json
    import time

    from etl.core.interval import Interval
    from etl.core.stream_plan import dag_route
    from etl.io.stream_status import read_heartbeat, stream_is_live

    cfg = _config(entity)
    interval = Interval(data_interval_start, data_interval_end)
    summary_path = cfg.runs_path / interval.run_key / "load.json"
    max_wait_s = (interval.end - interval.start).total_seconds() + cfg.stream_stale_seconds
    started = time.monotonic()
    while True:
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
        beat = read_heartbeat(cfg)
        route = dag_route(interval, summary, beat, stream_is_live(cfg, beat), time.monotonic() - started, max_wait_s)
        if route == "validate":
            print(f"run {interval.run_key} was loaded by the always-on loader (etl stream): validating and reporting it")
            return STREAM_LOADED
        if route == "load":
            return LOAD_TASK
        if route == "late":
            raise RuntimeError(
                f"the always-on loader is live but has not loaded run {interval.run_key} within {max_wait_s:.0f} s; "
                f"see its log (heartbeat: {beat}); this task retries")
        time.sleep(poll_seconds)


def run_report(data_interval_start, data_interval_end, entity: str = "") -> dict:
    """The report task's body: print the run summary and return it (the task's XCom)."""
    from etl import jobs
    from etl.core.interval import Interval

    cfg = _config(entity)
    rep = jobs.report(cfg, Interval(data_interval_start, data_interval_end))
    print(jobs.format_report(rep, cfg))
    return rep


def publish_quality_report(data_interval_start, data_interval_end, entity: str = "") -> dict:
    """The report DAG's last task: print where the report and plots are, return its summary."""
    from etl.core.interval import Interval
    from etl.quality.report import read_report, summarize

    cfg = _config(entity)
    rep = summarize(read_report(cfg, Interval(data_interval_start, data_interval_end)))
    print(f"quality report {rep['interval']}: suites {'passed' if rep['suites_passed'] else 'FAILED'}")
    print(f"  plot        {rep['plot']}")
    print(f"  windows     {rep['windows_csv']}")
    print(f"  Data Docs   {rep['data_docs']}")
    return rep
