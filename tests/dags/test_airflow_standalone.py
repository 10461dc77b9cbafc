"""Airflow for real: start standalone, trigger the load DAG through the REST API, wait for success,
read the report task's return value, and stop every process that was started."""

import json
import os
import socket
import subprocess
import time
import urllib.request
from datetime import datetime, timezone

import pytest

from etl.generator import StreamSpec, generate_stream
from tests.dags.conftest import ROOT

pytestmark = pytest.mark.airflow


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
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


def test_standalone_runs_the_dag_triggered_through_the_rest_api(tmp_path):
    port = free_port()
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
        ETL_WAREHOUSE_ROOT=str(tmp_path / "warehouse"),
        ETL_LANDING_ROOT=str(tmp_path / "landing"),
        ETL_GX_ROOT=str(tmp_path / "gx"),
        ETL_RUNS_ROOT=str(tmp_path / "runs"),
    )
    generated = generate_stream(
        StreamSpec(start=datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc), duration_s=90, rate=8, seed=5),
        tmp_path / "landing",
    )
    script = str(ROOT / "scripts" / "airflow.sh")
    pid_file = tmp_path / "airflow" / "standalone.pid"
    base = f"http://127.0.0.1:{port}"
    try:
        started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=300)
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"http://127.0.0.1:{port}" in started.stdout and "password" in started.stdout
        pgid = int(pid_file.read_text())
        password = json.loads((tmp_path / "airflow" / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        token = call(f"{base}/auth/token", method="POST", body={"username": "admin", "password": password})["access_token"]
        wait_for("the DAG to be parsed", lambda: call(f"{base}/api/v2/dags/etl_load", token), 180)

        # The hourly interval [10:00, 11:00) that holds the stream.
        run = call(
            f"{base}/api/v2/dags/etl_load/dagRuns",
            token,
            "POST",
            {"logical_date": "2026-11-20T11:00:00Z", "conf": {}},
        )
        assert run["data_interval_start"].startswith("2026-11-20T10:00")
        call(f"{base}/api/v2/dags/etl_load", token, "PATCH", {"is_paused": False})

        def finished():
            state = call(f"{base}/api/v2/dags/etl_load/dagRuns/{run['dag_run_id']}", token)["state"]
            return state if state in ("success", "failed") else None

        assert wait_for("the run to finish", finished, 900) == "success"
        xcom = call(
            f"{base}/api/v2/dags/etl_load/dagRuns/{run['dag_run_id']}/taskInstances/report/xcomEntries/return_value",
            token,
        )
        summary = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
        assert summary["updates_in"] == summary["outcomes_total"] == generated.lines
        assert summary["validation"] == "passed"
    finally:
        stopped = subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert not pid_file.exists()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
