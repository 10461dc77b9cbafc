"""Load DAGs, one per entity of the warehouse model (``etl_load``, and ``etl_load_<entity>`` for
an entity outside the roots): ingest_load_validate -> report, once per data interval. The three
stages run in one Spark driver (``etl run``; a retry runs it again: the load resumes from its
ledger): three tasks started three cold drivers per interval (docs/decisions/one-driver-per-run.md).
A fact's DAG first waits for its dimensions' DAGs to have reported the same interval.

``route`` goes first: an interval the always-on loader (``etl stream``) has loaded skips ingest
and load (``loaded_by_stream``) and is only validated and reported; while a live stream has yet
to load it, ``route`` waits for it; without a stream it goes on to ``ingest_load_validate``.

Only wiring lives here; the tasks run ``etl`` through spark-submit (master from the Airflow
connection ``etl_spark``) and ``etl.entrypoints.airflow_support``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.sensors.external_task import ExternalTaskSensor
from airflow.sdk import DAG, CronDataIntervalTimetable, Param, task

from etl.core.config import load_config, strategy_settings_schema
from etl.core.registry import NAMES as JOIN_STRATEGIES
from etl.entrypoints.airflow_support import (
    INTERVAL_ARGS,
    LOAD_TASK,
    REPORT_TASK,
    STREAM_LOADED,
    dimension_loads,
    entity_args,
    entity_configs,
    run_report,
    spark_job,
    stream_route,
)


def load_dag(suffix: str, cfg) -> DAG:
    entity = cfg.entity_model.name
    with DAG(
        dag_id=f"etl_load{suffix}",
        description=f"Join the landed update stream of {entity} against its key_map, load it, gate it with GX",
        schedule=CronDataIntervalTimetable(cfg.schedule, timezone="UTC"),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # surrogate keys are allocated in sequence
        params={
            "join_strategy": Param(cfg.join_strategy, enum=list(JOIN_STRATEGIES), description="join strategy"),
            # Only the join strategies' own knobs: whoever may trigger a run must not be able to move
            # the warehouse, the landing zone or the quality limits (checked again by `etl run`).
            "strategy_settings": Param(
                {},
                **strategy_settings_schema(),
                description='the join strategy\'s settings for this run only, e.g. {"n_invoke": 500, "memory_budget": 8388608} or {"k": 4}',
            ),
        },
        default_args={"owner": "data-engineering", "retries": 2, "retry_delay": timedelta(minutes=1)},
        tags=["etl", "warehouse", f"entity:{entity}"],
    ) as dag:
        job = spark_job(cfg, f"etl-{entity}")
        on_entity = entity_args(cfg)

        # ingest, join and load, validate: one driver; each stage's summary in the task log.
        ingest_load_validate = SparkSubmitOperator(
            task_id=LOAD_TASK,
            application_args=[
                "run",
                *INTERVAL_ARGS,
                "--join-strategy",
                "{{ params.join_strategy }}",
                "--strategy-settings",
                "{{ params.strategy_settings | tojson }}",
                *on_entity,
            ],
            **job,
        )
        validate = SparkSubmitOperator(  # an interval the always-on loader loaded
            task_id="validate", application_args=["validate", *INTERVAL_ARGS, *on_entity], **job,
        )

        @task.branch(task_id="route", trigger_rule="none_failed")  # a fact's dimension wait may time out (skipped)
        def route(data_interval_start=None, data_interval_end=None) -> str:
            return stream_route(data_interval_start, data_interval_end, entity=entity)

        loaded_by_stream = EmptyOperator(task_id=STREAM_LOADED)

        # after the run, or after the stream's interval was validated
        @task(task_id=REPORT_TASK, trigger_rule="none_failed_min_one_success")
        def report(data_interval_start=None, data_interval_end=None) -> dict:
            return run_report(data_interval_start, data_interval_end, entity=entity)

        routed = route()
        # A fact waits for its dimensions' loads of the same interval, so the keys it names are
        # there already; after dimension_wait_seconds it loads anyway (keys a dimension has not loaded
        # yet become inferred members, filled when it does).
        for dimension in dimension_loads(cfg):
            ExternalTaskSensor(
                task_id=f"wait_for_{dimension.entity}", external_dag_id=dimension.dag_id, external_task_id=REPORT_TASK,
                mode="reschedule", poke_interval=cfg.dimension_poke_seconds, timeout=cfg.dimension_wait_seconds, soft_fail=True,
            ) >> routed
        routed >> [ingest_load_validate, loaded_by_stream]
        loaded_by_stream >> validate
        [ingest_load_validate, validate] >> report()
    return dag


# One DAG per entity of the warehouse model, from the model file alone (no Spark, no table read).
for _suffix, _cfg in entity_configs(load_config()):
    globals()[f"etl_load{_suffix}"] = load_dag(_suffix, _cfg)
