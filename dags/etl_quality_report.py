"""Data-quality report DAGs, one per entity of the warehouse model: every expectation suite over the warehouse, Data Docs, and windowed
metrics per source (panes, papers/003) with PNG plots, once per report interval.

Only wiring; the work is ``etl quality-report`` (spark-submit) and ``etl.entrypoints.airflow_support``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, task

from etl.core.config import load_config
from etl.entrypoints.airflow_support import (
    INTERVAL_ARGS,
    entity_args,
    entity_configs,
    publish_quality_report,
    spark_job,
)


def quality_report_dag(suffix: str, cfg) -> DAG:
    entity = cfg.entity_model.name
    with DAG(
        dag_id=f"etl_quality_report{suffix}",
        description=f"Expectation suites over {entity}'s warehouse, Data Docs, windowed quality metrics per source",
        schedule=CronDataIntervalTimetable(cfg.report_schedule, timezone="UTC"),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args={"owner": "data-engineering", "retries": 2, "retry_delay": timedelta(minutes=1)},
        tags=["etl", "quality", f"entity:{entity}"],
    ) as dag:
        quality_report = SparkSubmitOperator(
            task_id="quality_report",
            application_args=["quality-report", *INTERVAL_ARGS, *entity_args(cfg)],
            **spark_job(cfg, f"etl-quality-report-{entity}"),
        )

        @task(task_id="publish")
        def publish(data_interval_start=None, data_interval_end=None) -> dict:
            return publish_quality_report(data_interval_start, data_interval_end, entity=entity)

        quality_report >> publish()
    return dag


for _suffix, _cfg in entity_configs(load_config()):
    globals()[f"etl_quality_report{_suffix}"] = quality_report_dag(_suffix, _cfg)
