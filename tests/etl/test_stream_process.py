"""`etl stream` as a real process on the wall clock: it loads the closed runs, SIGTERM stops it
after the piece it is loading (exit 0, no lock left, its heartbeat says stopped), and a restart
finishes what it left, giving the warehouse the scheduled runs give."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from etl import jobs
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.lock import LOCK_NAME
from etl.io.stream_status import read_heartbeat
from etl.stream import Stream
from tests.helpers import ROOT, deterministic_tables

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SETTINGS = dict(schedule="* * * * *", micro_batch_seconds=60, stream_grace_seconds=1, key_domain=300)


def test_sigterm_stops_the_stream_cleanly_and_a_restart_finishes_the_runs(spark, cfg, tmp_path):
    cfg = cfg.replace(**SETTINGS)
    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    runs = [Interval(now - timedelta(minutes=m), now - timedelta(minutes=m - 1)) for m in (2, 1)]
    generate_stream(StreamSpec(start=runs[0].start, duration_s=120, rate=4, key_domain=300, seed=3), cfg.landing_path)

    settings = {k: str(getattr(cfg, k)) for k in ("warehouse_root", "landing_root", "gx_root", "runs_root", "n_part",
                                            "spark_master", "spark_shuffle_partitions", *SETTINGS)}
    cmd = [sys.executable, "-m", "etl.entrypoints.cli", "stream", "--start", runs[0].start.isoformat(),
           "--settings-json", json.dumps(settings)]
    log = open(tmp_path / "stream.log", "w+")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"), stdout=subprocess.PIPE,
                            stderr=log, text=True, start_new_session=True)
    first = cfg.runs_path / runs[0].run_key / "load.json"
    deadline = time.monotonic() + 300
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert first.exists(), open(tmp_path / "stream.log").read()[-3000:]
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    log.seek(0)
    assert proc.returncode == 0, log.read()[-3000:]
    said = json.loads(out)
    assert said["stopped_by_signal"] is True and runs[0].run_key in said["runs_finished"]
    assert not (cfg.meta_path / LOCK_NAME).exists()
    assert read_heartbeat(cfg)["stopped"] is True

    # Started again (here in-process, on the wall clock): it resumes and finishes the runs.
    Stream(spark, cfg).run(until=runs[-1].end)
    scheduled = cfg.replace(warehouse_root=str(tmp_path / "scheduled"), runs_root=str(tmp_path / "scheduled-runs"))
    for run in runs:
        assert jobs.read_summary(cfg, run, "load")["loaded_by"] == "stream"
        jobs.ingest(spark, scheduled, run)
        jobs.load(spark, scheduled, run)
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, scheduled)
