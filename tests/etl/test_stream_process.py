"""`etl stream` as a real process on the wall clock: it loads the closed runs, SIGTERM stops it
after the piece it is loading (exit 0, no lock left, its heartbeat says stopped), and a restart
finishes what it left, giving the warehouse the scheduled runs give."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from etl import jobs
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.lock import LOCK_NAME
from etl.io.stream_status import read_heartbeat
from etl.stream import Stream
from tests.helpers import deterministic_tables, reference_in_memory

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

SETTINGS = dict(schedule="* * * * *", micro_batch_seconds=60, stream_grace_seconds=1, key_domain=300)


def test_sigterm_stops_the_stream_cleanly_and_a_restart_finishes_the_runs(spark, cfg, tmp_path, etl_process):
    cfg = cfg.replace(**SETTINGS)
    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    runs = [Interval(now - timedelta(minutes=m), now - timedelta(minutes=m - 1)) for m in (2, 1)]
    generate_stream(StreamSpec(start=runs[0].start, duration_s=120, rate=4, key_domain=300, seed=3), cfg.landing_path)

    settings = {k: str(getattr(cfg, k)) for k in ("warehouse_root", "landing_root", "gx_root", "runs_root", "n_part",
                                            "spark_master", "spark_shuffle_partitions", *SETTINGS)}
    stream = etl_process.start(["stream", "--start", runs[0].start.isoformat()], json.dumps(settings), log="stream.log",
                               stdout_apart=True)
    first = cfg.runs_path / runs[0].run_key / "load.json"
    etl_process.wait_for(stream, first.exists, f"{first}")
    code = stream.stop(grace=300)
    assert code == 0, stream.tail()
    out = stream.stdout
    said = json.loads(out)
    assert said["stopped_by_signal"] is True and runs[0].run_key in said["runs_finished"]
    assert not (cfg.meta_path / LOCK_NAME).exists()
    assert read_heartbeat(cfg)["stopped"] is True

    # Started again (here in-process, on the wall clock): it resumes and finishes the runs.
    Stream(spark, cfg).run(until=runs[-1].end)
    scheduled = reference_in_memory(cfg, tmp_path / "scheduled")
    for run in runs:
        assert jobs.read_summary(cfg, run, "load")["loaded_by"] == "stream"
        jobs.ingest(spark, scheduled, run)
        jobs.load(spark, scheduled, run)
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, scheduled)
