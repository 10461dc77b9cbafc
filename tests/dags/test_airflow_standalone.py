"""Airflow for real, started once for the whole test session (one standalone, its metadata
database on PostgreSQL and its LocalExecutor running two tasks at once, as deployed: the worked example
of docs/model.md, ``ETL_MODEL_FILE=examples/shop/model.toml``, one load DAG per entity), then

1. trigger the customer's load DAG through the REST API, the orders fact's run and ``airflow
   backfill create`` of the product's interval, all three at once, and read the customer's report
   task's return value;
2. check the product's warehouse equals what the job itself loads for it (the scheduled run's work);
3. the fact's sensors held its run until both dimensions' runs of the interval reported; then it
   loaded every order with their keys;
4. rerun a completed interval (clear it through the REST API): every table stays the same;
5. let the always-on loader (``etl stream``) load the next interval, then trigger its DAG run:
   it only validates and reports;
6. trigger the data-quality report DAG: suites pass, the plot and windows are written;

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

from etl import jobs
from etl.core.config import EtlConfig, load_config
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.tables import read
from tests.helpers import (
    ROOT,
    assert_entity_equals_oracle,
    assert_equals_oracle,
    deterministic_tables,
    reference_in_memory,
)

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]
DAY = "2026-11-20"
MODEL = ROOT / "examples" / "shop" / "model.toml"
LOAD, REPORT = "etl_load_customer", "etl_quality_report_customer"


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


def when(timestamp: str) -> datetime:
    """A timestamp of Airflow's REST API (ISO 8601, with or without fractions and a ``Z``)."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


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
            ETL_SPARK_SHUFFLE_PARTITIONS="2",
            ETL_REPORT_SCHEDULE="*/30 * * * *",
            ETL_REPORT_WINDOW_SECONDS="600",
            ETL_REPORT_SLIDE_SECONDS="300",
            # The fact's sensors: every poke starts a task process (reschedule mode); at 5 s about
            # forty of them ran beside the product's driver (143 s, the customer's first run 78).
            ETL_DIMENSION_POKE_SECONDS="30",
        )
        self.script = str(ROOT / "scripts" / "airflow.sh")
        self.pid_file = tmp_path / "airflow" / "standalone.pid"
        self.token = None

    def etl_config(self, entity: str = "customer") -> EtlConfig:
        """What the DAGs' tasks run with (this Airflow's environment), for ``entity``."""
        return load_config(env=self.env, overrides={"entity": entity, "spark_master": "local[2]"})

    def api(self, path, method="GET", body=None):
        return call(f"{self.base}/api/v2{path}", self.token, method, body)

    def backfill(self, *args, timeout=300):
        """``airflow backfill create``; a DAG takes one active backfill at a time, and the scheduler
        marks a finished one complete a little after its last run, so wait for that (and, on SQLite,
        a metadata database locked by the scheduler)."""
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
def metadata_db():
    """Airflow's metadata database as a deployment keeps it: PostgreSQL, a cluster of its own on
    127.0.0.1 (``etl.devtools.postgres``), removed afterwards."""
    from etl.devtools import postgres

    server = postgres.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, metadata_db):
    tmp = tmp_path_factory.mktemp("standalone")
    af = Airflow(tmp)
    af.env["ETL_MODEL_FILE"] = str(MODEL)
    af.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = metadata_db.url
    af.metadata_db = metadata_db
    # The customer's stream for two intervals (the load DAG's run, the stream's), the product's
    # and the orders' for the first (the backfill, the fact's run).
    for entity, seconds in (("customer", 1200), ("product", 600), ("orders", 600)):
        cfg = af.etl_config(entity)
        generate_stream(StreamSpec(start=datetime.fromisoformat(f"{DAY}T10:00:00+00:00"), duration_s=seconds, rate=2,
                                   seed=9, sources=cfg.sources, key_domain=300),
                        cfg.landing_path, entity=cfg.entity_model, model=cfg.model)
    with running(af, (LOAD, REPORT, "etl_load_product", "etl_load_orders")):
        # The first three runs at once, as a site's scheduler starts its entities' runs of one
        # interval (AIRFLOW__CORE__PARALLELISM 2, each entity its own lock): the customer's through
        # the REST API, the orders' (its sensors hold it until both dimensions reported), the
        # product's through `airflow backfill create`. The tests below check each.
        af.customer_run = af.trigger(LOAD, f"{DAY}T10:00:00Z", f"{DAY}T10:10:00Z")
        af.trigger("etl_load_orders", f"{DAY}T10:00:00Z", f"{DAY}T10:10:00Z")
        af.backfill("--dag-id", "etl_load_product", "--from-date", f"{DAY}T10:00:00+00:00",
                    "--to-date", f"{DAY}T10:00:00+00:00", "--max-active-runs", "1")
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


def test_the_dimensions_runs_ran_at_once_with_their_state_in_postgres(airflow):
    """The deployed shape (docs/deployment.md, "Airflow"): the metadata database is PostgreSQL
    (the runs are rows there), and the LocalExecutor ran the customer's and the product's loads
    of one interval side by side (parallelism 2), each entity under its own lock."""
    windows = {}
    for dag_id in ("etl_load_customer", "etl_load_product"):
        run = airflow.wait_until_finished(dag_id, 1)[0]
        task = airflow.api(f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances/ingest_load_validate")
        windows[dag_id] = (when(task["start_date"]), when(task["end_date"]))
    (a0, a1), (b0, b1) = windows.values()
    assert a0 < b1 and b0 < a1, windows  # the two loads overlapped
    import sqlalchemy

    with sqlalchemy.create_engine(airflow.metadata_db.url).connect() as db:
        runs = dict(db.execute(sqlalchemy.text("SELECT dag_id, count(*) FROM dag_run GROUP BY dag_id")).all())
    assert runs.get("etl_load_customer", 0) >= 1 and runs.get("etl_load_product", 0) >= 1, runs


def test_the_admin_password_is_private_and_not_in_the_log(airflow):
    passwords = airflow.tmp / "airflow" / "simple_auth_manager_passwords.json.generated"
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600
    password = json.loads(passwords.read_text())["admin"]
    assert len(password) >= 16
    assert password not in (airflow.tmp / "airflow" / "standalone.log").read_text()
    assert password not in airflow.start_output


def test_a_run_triggered_through_the_rest_api_succeeds_and_returns_its_summary(airflow):
    run = airflow.customer_run  # triggered with the module's other first runs
    assert run["data_interval_start"].startswith(f"{DAY}T10:00")
    airflow.wait_until_finished(LOAD, 1)
    xcom = airflow.api(f"/dags/{LOAD}/dagRuns/{run['dag_run_id']}/taskInstances/report/xcomEntries/return_value")
    summary = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert summary["updates_in"] == summary["outcomes_total"] > 0
    assert summary["validation"] == "passed"


def test_a_backfill_gives_the_warehouse_the_scheduled_runs_would(airflow, spark, tmp_path):
    """The product's interval of 10:00 through ``airflow backfill create`` (made by the module's
    fixture, beside the customer's run and the orders' run, whose sensors hold it: the fact's test).
    The product's warehouse equals the job's own run of the interval in a second warehouse, less
    the inferred members the orders' load may have allocated in the dimension since."""
    runs = airflow.wait_until_finished("etl_load_product", 1)
    intervals = [Interval.parse(r["data_interval_start"], r["data_interval_end"]) for r in runs]
    assert [i.run_key for i in intervals] == ["20261120T1000-20261120T1010"]
    assert runs[0]["run_type"] == "backfill", runs[0]
    product = airflow.etl_config("product")
    assert jobs.report(product, intervals[0])["validation"] == "passed"
    # The same interval loaded by the job itself into a second warehouse (in memory: only a
    # reference; the backfill's warehouse is Delta's).
    reference = reference_in_memory(product, tmp_path / "reference")
    for interval in intervals:
        jobs.ingest(spark, reference, interval)
        jobs.load(spark, reference, interval)
    # Compared once the orders' run is over: its load writes inferred members into the product's
    # tables, and a comparison during it would read them half written.
    the_orders_run(airflow)
    assert deterministic_tables(spark, product, without_inferred=True) == deterministic_tables(spark, reference)


def the_orders_run(airflow):
    """The orders' run of 10:00 (triggered by the module's fixture, its sensors holding it until
    both dimensions' runs of 10:00 reported), finished."""
    return airflow.wait_until_finished("etl_load_orders", 1, timeout=1500)[0]


def test_a_fact_s_run_waits_for_its_dimensions_and_loads_every_order_with_their_keys(airflow, spark):
    """The orders' run of 10:00, triggered with the module's first runs: its sensors held it until both dimensions' runs of 10:00 reported; then it loaded every order with
    the keys of both dimensions, allocating inferred members for those they had not loaded."""
    interval = Interval.parse(f"{DAY}T10:00:00+00:00", f"{DAY}T10:10:00+00:00")
    orders_run = the_orders_run(airflow)
    states = {t["task_id"]: t["state"] for t in
              airflow.api(f"/dags/etl_load_orders/dagRuns/{orders_run['dag_run_id']}/taskInstances")["task_instances"]}
    assert states["wait_for_customer"] == states["wait_for_product"] == states["ingest_load_validate"] == "success", states
    load = airflow.api(f"/dags/etl_load_orders/dagRuns/{orders_run['dag_run_id']}/taskInstances/ingest_load_validate")
    for d in ("customer", "product"):  # their runs of 10:00 had reported before the fact's load began
        run = next(r for r in airflow.runs(f"etl_load_{d}") if r["data_interval_start"].startswith(f"{DAY}T10:00"))
        report = airflow.api(f"/dags/etl_load_{d}/dagRuns/{run['dag_run_id']}/taskInstances/report")
        assert when(report["end_date"]) <= when(load["start_date"]), (d, report, load)
    for entity in ("customer", "product"):
        cfg = airflow.etl_config(entity)
        assert jobs.report(cfg, interval)["validation"] == "passed"
        assert_equals_oracle(spark, cfg)
        assert_entity_equals_oracle(spark, cfg)
    orders = airflow.etl_config("orders")
    assert jobs.report(orders, interval)["validation"] == "passed"
    assert_equals_oracle(spark, orders)
    names = {d: {r.surrogate_key: (r.source_id, r.natural_key) for r in read(spark, orders.for_entity(d), "key_map").collect()}
             for d in ("customer", "product")}
    rows = read(spark, orders, "orders_fact").collect()
    assert rows and all(names["customer"][r.customer_sk] == ("shop", str(r.customer_id)) for r in rows)
    assert all(names["product"][r.product_sk] == ("erp", f'["{r.sku}","{r.region}"]') for r in rows)


def test_rerunning_a_completed_run_changes_nothing(airflow, spark):
    """Airflow's rerun (clear the customer's successful run of 10:00 through the REST API, after
    the orders' load allocated inferred members in it): every task runs again, every table stays
    the same."""
    the_orders_run(airflow)  # over: the inferred members it allocates are in the tables compared
    before = deterministic_tables(spark, airflow.etl_config())

    def the_10_00_run():
        return next(r for r in airflow.runs(LOAD) if r["data_interval_start"].startswith(f"{DAY}T10:00"))

    done = the_10_00_run()
    airflow.api(f"/dags/{LOAD}/dagRuns/{done['dag_run_id']}/clear", "POST", {"dry_run": False})
    rerun = wait_for(
        "the completed run to run again",
        lambda: (r := the_10_00_run())["state"] in ("success", "failed") and r["end_date"] != done["end_date"] and r,
        900,
    )
    assert rerun["state"] == "success"
    assert deterministic_tables(spark, airflow.etl_config()) == before


def test_an_interval_the_stream_loaded_is_only_validated_and_reported(airflow, spark):
    from etl.stream import Stream
    from tests.helpers import FakeClock

    cfg = airflow.etl_config().replace(schedule=airflow.env["ETL_SCHEDULE"])
    clock = FakeClock(datetime.fromisoformat(f"{DAY}T10:10:00+00:00"))
    loaded = Stream(spark, cfg, clock=clock, sleep=clock.sleep).run(until=datetime.fromisoformat(f"{DAY}T10:20:00+00:00"))
    assert [s["run_key"] for s in loaded] == ["20261120T1010-20261120T1020"]

    run = airflow.trigger(LOAD, f"{DAY}T10:10:00Z", f"{DAY}T10:20:00Z")
    airflow.wait_until_finished(LOAD, 2)
    tasks = airflow.api(f"/dags/{LOAD}/dagRuns/{run['dag_run_id']}/taskInstances")["task_instances"]
    assert {t["task_id"]: t["state"] for t in tasks} == {
        "route": "success", "loaded_by_stream": "success", "ingest_load_validate": "skipped",
        "validate": "success", "report": "success"}
    xcom = airflow.api(f"/dags/{LOAD}/dagRuns/{run['dag_run_id']}/taskInstances/report/xcomEntries/return_value")
    summary = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert summary["updates_in"] == summary["outcomes_total"] == loaded[0]["updates_in"] + loaded[0]["rejected"] > 0
    assert summary["validation"] == "passed"


def test_the_quality_report_dag_writes_suites_plots_and_windows(airflow):
    airflow.wait_until_finished(LOAD, 1)  # the customer's run of 10:00 (the fixture's): its totals are reported
    run = airflow.trigger(REPORT, f"{DAY}T10:00:00Z", f"{DAY}T10:20:00Z")
    assert run["data_interval_start"].startswith(f"{DAY}T10:00")
    airflow.wait_until_finished(REPORT, 1)
    xcom = airflow.api(f"/dags/{REPORT}/dagRuns/{run['dag_run_id']}/taskInstances/publish/xcomEntries/return_value")
    rep = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert rep["suites_passed"] is True
    with open(rep["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    totals = rep["interval_totals"]
    assert totals["updates"] > 0 and totals["rejected"] > 0
