"""Maintenance DAGs, one per entity of the warehouse model: rebalance key_map's segments (split above 2*theta, merge below theta), then
Delta OPTIMIZE and VACUUM (retention ``vacuum_retention_hours``, never under 7 days).

Each step takes the warehouse's load lock, so it never runs under a load; a step that finds the
lock taken fails fast and its retry runs later. Only wiring; the work is ``etl maintain``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from etl.core.config import load_config
from etl.entrypoints.airflow_support import entity_args, entity_configs, spark_job


def maintenance_dag(suffix: str, cfg) -> DAG:
    entity = cfg.entity_model.name
    with DAG(
        dag_id=f"etl_maintenance{suffix}",
        description=f"Rebalance {entity}'s key_map segments, OPTIMIZE and VACUUM its Delta tables",
        schedule=cfg.maintenance_schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args={"owner": "data-engineering", "retries": 3, "retry_delay": timedelta(minutes=5)},
        tags=["etl", "maintenance", f"entity:{entity}"],
    ) as dag:
        steps = {
            name: SparkSubmitOperator(
                task_id=name,
                application_args=["maintain", "--steps", name, *entity_args(cfg)],
                **spark_job(cfg, f"etl-{name}-{entity}"),
            )
            for name in ("rebalance", "optimize", "vacuum")
        }
        steps["rebalance"] >> steps["optimize"] >> steps["vacuum"]
    return dag


for _suffix, _cfg in entity_configs(load_config()):
    globals()[f"etl_maintenance{_suffix}"] = maintenance_dag(_suffix, _cfg)
