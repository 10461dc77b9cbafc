"""The demos' progress: from the log `airflow dags test` writes (tests/etl/devtools/airflow_dags_test.log
is an excerpt of a real `make demo` log, Airflow 3.3), each task's start and end and the jobs' [etl] lines."""

from pathlib import Path

from etl.devtools.dag_test_progress import follow

LOG = Path(__file__).with_name("airflow_dags_test.log")


def test_each_task_s_start_end_and_the_jobs_lines_are_shown_and_nothing_else():
    assert list(follow(LOG.read_text().splitlines(keepends=True))) == [
        "    13:41:55 task route started",
        "    13:42:03 task route success, 8 s",
        "    13:42:03 task ingest_load_validate started",
        "      2026-11-27T13:43:01Z [etl] ingested 11871 valid, 129 rejected of 12000 lines",
        "      2026-11-27T13:43:27Z [etl] batch 1/5 (index 0) committed",
        "    13:44:57 task ingest_load_validate success, 173 s",
        "    13:44:57 task report started",
        "    13:44:57 task report success, 1 s",
        # from the first task's start (13:41:55), not Airflow's run_duration (298 s: from the logical date)
        "    DAG run success in 183 s",
    ]


def test_a_failed_task_says_so():
    lines = [
        "2026-11-27T13:42:03.594917Z [info     ] [DAG TEST] starting task_id=ingest_load_validate map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501",
        "2026-11-27T13:43:10.008224Z [info     ] Task instance state updated    [airflow.api_fastapi.execution_api.routes.task_instances] "
        "correlation_id=x loc=task_instances.py:485 new_state=failed rows_affected=1 ti_id=y",
        "2026-11-27T13:43:10.051998Z [info     ] [DAG TEST] end task task_id=ingest_load_validate map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1563",
    ]
    assert list(follow(lines))[-1] == "    13:43:10 task ingest_load_validate failed, 66 s"


def test_a_retried_first_task_keeps_the_run_s_start():
    """The run's time counts from its first task's first start, not from a retry's."""
    start = "[info     ] [DAG TEST] starting task_id=route map_index=-1 [airflow.sdk.definitions.dag] loc=dag.py:1501"
    lines = [f"2026-11-27T13:40:00.000000Z {start}", f"2026-11-27T13:41:30.000000Z {start}",
             "2026-11-27T13:42:00.000000Z [info     ] DagRun Finished: dag_id=etl_load, run_duration=999.0, state=success, "
             "run_type=manual [airflow.models.dagrun.DagRun] loc=dagrun.py:1315"]
    assert list(follow(lines))[-1] == "    DAG run success in 120 s"
