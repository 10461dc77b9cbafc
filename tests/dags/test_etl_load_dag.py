import subprocess
import sys

import pytest

pytestmark = pytest.mark.airflow

EXPECTED_GRAPH = {
    "ingest": {"join_and_load"},
    "join_and_load": {"validate"},
    "validate": {"report"},
    "report": set(),
}


def test_no_import_errors(dag_bag):
    assert dag_bag.import_errors == {}
    assert "etl_load" in dag_bag.dags


def test_task_graph(dag_bag):
    dag = dag_bag.dags["etl_load"]
    assert {t.task_id: set(t.downstream_task_ids) for t in dag.tasks} == EXPECTED_GRAPH


def test_policy(dag_bag):
    dag = dag_bag.dags["etl_load"]
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert "etl" in dag.tags
    for task in dag.tasks:
        assert task.owner == "data-engineering"
        assert task.retries >= 1


def test_spark_tasks_use_the_connection_and_delta(dag_bag):
    dag = dag_bag.dags["etl_load"]
    for task_id in ("ingest", "join_and_load", "validate"):
        task = dag.get_task(task_id)
        assert task._conn_id == "etl_spark"
        assert task.application.endswith("etl/spark_entry.py")
        assert "io.delta:delta-spark" in task.conf["spark.jars.packages"]
        assert task.application_args[0] == {"ingest": "ingest", "join_and_load": "load", "validate": "validate"}[task_id]
    assert "{{ params.join_strategy }}" in dag.get_task("join_and_load").application_args


def test_join_strategy_parameter_offers_every_strategy(dag_bag):
    from etl.config import JOIN_STRATEGIES

    param = dag_bag.dags["etl_load"].params.get_param("join_strategy")
    assert param.value == "native"
    assert param.schema["enum"] == list(JOIN_STRATEGIES)


def test_runs_cover_cron_data_intervals(dag_bag):
    """A run's data interval is the cron interval it closes (not a point in time)."""
    from airflow.sdk import CronDataIntervalTimetable

    timetable = dag_bag.dags["etl_load"].timetable
    assert isinstance(timetable, CronDataIntervalTimetable)
    assert timetable.expression == "0 * * * *"  # @hourly


def test_parsing_imports_no_spark_or_gx():
    from tests.dags.conftest import ROOT

    code = (
        f"import sys, runpy; runpy.run_path({str(ROOT / 'dags' / 'etl_load.py')!r});"
        "heavy = [m for m in ('pyspark.sql', 'great_expectations', 'delta') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_parse_time_is_bounded(dag_bag):
    """The scheduler parses DAG files continuously: keep it well under a second."""
    stats = {s.file: s.duration.total_seconds() for s in dag_bag.dagbag_stats}
    assert stats["etl_load.py"] < 2.0, stats
