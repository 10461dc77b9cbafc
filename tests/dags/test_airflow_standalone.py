"""Airflow for real, on the embedded default: start standalone once, then

1. trigger the load DAG through the REST API and read the report task's return value;
2. ``airflow backfill create`` over the next interval, and check the warehouse equals what the
   same intervals loaded one after the other by the job itself give (the scheduled runs' work);
3. rerun a completed interval (clear it through the REST API): every table stays the same;
4. let the always-on loader (``etl stream``) load the next interval, then trigger its DAG run:
   it only validates and reports;
5. trigger the data-quality report DAG: suites pass, the plot and windows are written;

and finally stop every process that was started. The cron scheduler is off
(``use_job_schedule=False``) so that only the runs made here run."""

import contextlib
import json
import os
import socket
import stat
import subprocess
import time
import urllib.request
from datetime import datetime

import pytest

from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from tests.helpers import ROOT, deterministic_tables

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]
DAY = "2026-11-20"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, token=None, method="GET", body=None):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def wait_for(what, probe, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = probe()
            if value:
                return value
        except Exception:  # not up yet
            pass
        time.sleep(3)
    raise AssertionError(f"timed out waiting for {what}")


class Airflow:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ)
        self.env.update(
            AIRFLOW_HOME=str(tmp_path / "airflow"),
            AIRFLOW__API__PORT=str(self.port),
            AIRFLOW__API__BASE_URL=self.base,
            AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE="False",
            ETL_WAREHOUSE_ROOT=str(tmp_path / "warehouse"),
            ETL_LANDING_ROOT=str(tmp_path / "landing"),
            ETL_GX_ROOT=str(tmp_path / "gx"),
            ETL_RUNS_ROOT=str(tmp_path / "runs"),
            ETL_REPORTS_ROOT=str(tmp_path / "reports"),
            ETL_SCHEDULE="*/10 * * * *",
            ETL_MICRO_BATCH_SECONDS="600",
            ETL_REPORT_SCHEDULE="*/30 * * * *",
            ETL_REPORT_WINDOW_SECONDS="600",
            ETL_REPORT_SLIDE_SECONDS="300",
        )
        self.script = str(ROOT / "scripts" / "airflow.sh")
        self.pid_file = tmp_path / "airflow" / "standalone.pid"
        self.token = None

    def etl_config(self) -> EtlConfig:
        return EtlConfig(
            warehouse_root=self.env["ETL_WAREHOUSE_ROOT"], landing_root=self.env["ETL_LANDING_ROOT"],
            gx_root=self.env["ETL_GX_ROOT"], runs_root=self.env["ETL_RUNS_ROOT"], micro_batch_seconds=600,
            spark_master="local[2]", spark_shuffle_partitions=2,
        )

    def api(self, path, method="GET", body=None):
        return call(f"{self.base}/api/v2{path}", self.token, method, body)

    def backfill(self, *args, timeout=300):
        """``airflow backfill create``; a DAG takes one active backfill at a time, and the scheduler
        marks a finished one complete a little after its last run, so wait for that. The CLI writes
        to the SQLite metadata database beside the scheduler and can find it locked: retry."""
        deadline = time.time() + timeout
        while True:
            done = subprocess.run(
                ["airflow", "backfill", "create", *args], env=self.env, capture_output=True, text=True, timeout=300
            )
            if done.returncode == 0:
                return done.stdout
            out = (done.stdout + done.stderr).lower()
            # Retried: the previous backfill not yet marked complete, or SQLite busy with the scheduler.
            transient = ("another backfill is running", "alreadyrunningbackfill", "database is locked")
            if not any(t in out for t in transient) or time.time() > deadline:
                raise AssertionError(done.stdout + done.stderr)
            time.sleep(5)

    def trigger(self, dag_id, start, end):
        """A run for the data interval [start, end) through the REST API; logical date = start, as
        the timetable and backfills number runs."""
        return self.api(
            f"/dags/{dag_id}/dagRuns",
            "POST",
            {"logical_date": start, "data_interval_start": start, "data_interval_end": end, "conf": {}},
        )

    def runs(self, dag_id):
        return self.api(f"/dags/{dag_id}/dagRuns?order_by=logical_date&limit=100")["dag_runs"]

    def wait_until_finished(self, dag_id, n_runs, timeout=900):
        def done():
            runs = self.runs(dag_id)
            if len(runs) >= n_runs and all(r["state"] in ("success", "failed") for r in runs):
                return runs
            return None

        runs = wait_for(f"{n_runs} runs of {dag_id} to finish", done, timeout)
        assert [r["state"] for r in runs] == ["success"] * len(runs), runs
        return runs


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("standalone")
    af = Airflow(tmp)
    af.generated = generate_stream(
        StreamSpec(start=datetime.fromisoformat(f"{DAY}T10:00:00+00:00"), duration_s=1800, rate=2, seed=5),
        tmp / "landing",
    )
    with running(af, ("etl_load", "etl_quality_report")):
        yield af


@contextlib.contextmanager
def running(af: Airflow, dag_ids):
    """``airflow standalone`` started with ``af``'s environment, signed in, ``dag_ids`` parsed and
    unpaused; every process it started stopped afterwards."""
    af.env["PATH"] = f"{ROOT / '.venv' / 'bin'}:{af.env.get('PATH', '')}"
    try:
        started = subprocess.run([af.script, "start"], env=af.env, capture_output=True, text=True, timeout=300)
        assert started.returncode == 0, started.stdout + started.stderr
        assert af.base in started.stdout and "password" in started.stdout
        af.start_output = started.stdout + started.stderr
        af.pgid = int(af.pid_file.read_text())
        password = json.loads((af.tmp / "airflow" / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        af.token = call(f"{af.base}/auth/token", method="POST", body={"username": "admin", "password": password})["access_token"]
        for dag_id in dag_ids:
            wait_for(f"{dag_id} to be parsed", lambda d=dag_id: af.api(f"/dags/{d}"), 180)
            af.api(f"/dags/{dag_id}", "PATCH", {"is_paused": False})
        yield af
    finally:
        stopped = subprocess.run([af.script, "stop"], env=af.env, capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        assert not af.pid_file.exists()
        if hasattr(af, "pgid"):
            with pytest.raises(ProcessLookupError):
                os.killpg(af.pgid, 0)


def test_the_admin_password_is_private_and_not_in_the_log(airflow):
    passwords = airflow.tmp / "airflow" / "simple_auth_manager_passwords.json.generated"
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600
    password = json.loads(passwords.read_text())["admin"]
    assert len(password) >= 16
    assert password not in (airflow.tmp / "airflow" / "standalone.log").read_text()
    assert password not in airflow.start_output


def test_a_run_triggered_through_the_rest_api_succeeds_and_returns_its_summary(airflow):
    run = airflow.trigger("etl_load", f"{DAY}T10:00:00Z", f"{DAY}T10:10:00Z")
    assert run["data_interval_start"].startswith(f"{DAY}T10:00")
    airflow.wait_until_finished("etl_load", 1)
    xcom = airflow.api(f"/dags/etl_load/dagRuns/{run['dag_run_id']}/taskInstances/report/xcomEntries/return_value")
    summary = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert summary["updates_in"] == summary["outcomes_total"] > 0
    assert summary["validation"] == "passed"


def test_a_backfill_gives_the_warehouse_the_scheduled_runs_would(airflow, spark, tmp_path):
    from etl import jobs

    airflow.backfill(
        "--dag-id", "etl_load", "--from-date", f"{DAY}T10:10:00+00:00",
        "--to-date", f"{DAY}T10:10:00+00:00", "--max-active-runs", "1",
    )
    runs = airflow.wait_until_finished("etl_load", 2)
    intervals = [Interval.parse(r["data_interval_start"], r["data_interval_end"]) for r in runs]
    assert [i.run_key for i in intervals] == ["20261120T1000-20261120T1010", "20261120T1010-20261120T1020"]
    # The same intervals, loaded in order by the job itself into a second warehouse.
    reference = airflow.etl_config().replace(warehouse_root=str(tmp_path / "wh"), runs_root=str(tmp_path / "runs"))
    for interval in intervals:
        jobs.ingest(spark, reference, interval)
        jobs.load(spark, reference, interval)
    assert deterministic_tables(spark, airflow.etl_config()) == deterministic_tables(spark, reference)


def test_rerunning_a_completed_run_changes_nothing(airflow, spark):
    """Airflow's rerun (clear a successful run through the REST API): every task runs again,
    every table stays the same."""
    before = deterministic_tables(spark, airflow.etl_config())

    def the_10_10_run():
        return next(r for r in airflow.runs("etl_load") if r["data_interval_start"].startswith(f"{DAY}T10:10"))

    done = the_10_10_run()
    airflow.api(f"/dags/etl_load/dagRuns/{done['dag_run_id']}/clear", "POST", {"dry_run": False})
    rerun = wait_for(
        "the completed run to run again",
        lambda: (r := the_10_10_run())["state"] in ("success", "failed") and r["end_date"] != done["end_date"] and r,
        900,
    )
    assert rerun["state"] == "success"
    assert deterministic_tables(spark, airflow.etl_config()) == before


def test_an_interval_the_stream_loaded_is_only_validated_and_reported(airflow, spark):
    from etl.stream import Stream
    from tests.helpers import FakeClock

    cfg = airflow.etl_config().replace(schedule=airflow.env["ETL_SCHEDULE"])
    clock = FakeClock(datetime.fromisoformat(f"{DAY}T10:20:00+00:00"))
    loaded = Stream(spark, cfg, clock=clock, sleep=clock.sleep).run(until=datetime.fromisoformat(f"{DAY}T10:30:00+00:00"))
    assert [s["run_key"] for s in loaded] == ["20261120T1020-20261120T1030"]

    run = airflow.trigger("etl_load", f"{DAY}T10:20:00Z", f"{DAY}T10:30:00Z")
    airflow.wait_until_finished("etl_load", 3)
    tasks = airflow.api(f"/dags/etl_load/dagRuns/{run['dag_run_id']}/taskInstances")["task_instances"]
    assert {t["task_id"]: t["state"] for t in tasks} == {
        "route": "success", "loaded_by_stream": "success", "ingest": "skipped", "join_and_load": "skipped",
        "validate": "success", "report": "success"}
    xcom = airflow.api(f"/dags/etl_load/dagRuns/{run['dag_run_id']}/taskInstances/report/xcomEntries/return_value")
    summary = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert summary["updates_in"] == summary["outcomes_total"] == loaded[0]["updates_in"] + loaded[0]["rejected"] > 0
    assert summary["validation"] == "passed"


def test_the_quality_report_dag_writes_suites_plots_and_windows(airflow):
    run = airflow.trigger("etl_quality_report", f"{DAY}T10:00:00Z", f"{DAY}T10:20:00Z")
    assert run["data_interval_start"].startswith(f"{DAY}T10:00")
    airflow.wait_until_finished("etl_quality_report", 1)
    xcom = airflow.api(f"/dags/etl_quality_report/dagRuns/{run['dag_run_id']}/taskInstances/publish/xcomEntries/return_value")
    rep = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert rep["suites_passed"] is True
    with open(rep["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    totals = rep["interval_totals"]
    assert totals["updates"] > 0 and totals["rejected"] > 0
