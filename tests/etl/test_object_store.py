"""The warehouse on an S3 API, for real: its Delta tables at ``s3a://warehouse/...`` on the session's
S3-API server (``s3_store``: S3Proxy on 127.0.0.1, through Hadoop's S3A connector, as against AWS
S3 or MinIO), its small POSIX files under ``meta_root``. Every way a warehouse is loaded and kept
runs on it: a scheduled run, the always-on loader, a backfill's `etl run` in a driver of its own
(killed mid-run at a commit point, then run again) and maintenance; the tables equal those of the
same loads of a reference warehouse in this process's memory (``reference_in_memory``: the store
is not what the reference claims), row for row. The run again is in the test's session: recovery
in a driver of its own, and `etl run`'s exit code, are test_crash.py's, on the local filesystem."""

from __future__ import annotations

import signal
import uuid
from datetime import timedelta

import pytest

from etl import jobs
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.maintenance import maintain
from etl.stream import Stream
from tests.helpers import T0, FakeClock, deterministic_tables, reference_in_memory
from tests.processes import settings_json

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

RUNS = [Interval(T0 + timedelta(minutes=2 * i), T0 + timedelta(minutes=2 * (i + 1))) for i in range(3)]
SETTINGS = dict(schedule="*/2 * * * *", micro_batch_seconds=60, block_factor=1, key_domain=300, n_part=8,
                memory_budget=3000, n_invoke=15, wait_buffer_tuples=60, tau=50, join_strategy="partitioned-range",
                apply_interval_seconds=3600)
ROOTS = ("warehouse_root", "meta_root", "landing_root", "gx_root", "runs_root", "reports_root", "spark_properties_file")


def load_the_three_ways(spark, cfg, etl_process=None, maintenance=("rebalance", "optimize", "vacuum")) -> None:
    """Run 1 scheduled (ingest, load, validate), run 2 by the always-on loader, run 3 by a
    backfill's `etl run` (with ``etl_process``: in a driver of its own, killed at its first
    write-ahead commit, then run again in this process, which recovers what the killed driver
    logged; without: in this process), then ``maintenance``."""
    jobs.ingest(spark, cfg, RUNS[0])
    jobs.load(spark, cfg, RUNS[0])
    jobs.validate(spark, cfg, RUNS[0])
    clock = FakeClock(RUNS[1].start)
    finished = Stream(spark, cfg, clock=clock, sleep=clock.sleep).run(start=RUNS[1].start, until=RUNS[1].end)
    assert [f["run_key"] for f in finished] == [RUNS[1].run_key]
    interval = ["--start", RUNS[2].start.isoformat(), "--end", RUNS[2].end.isoformat()]
    if etl_process is not None:
        settings = settings_json(cfg, ROOTS + tuple(SETTINGS))
        killed = etl_process.run(["run", *interval], settings, crash_at="load.logged:1", log="killed.log")
        assert killed.code == -signal.SIGKILL, killed.tail()
    jobs.ingest(spark, cfg, RUNS[2])
    load = jobs.load(spark, cfg, RUNS[2])
    if etl_process is not None:
        assert load["batches_recovered"] >= 1, "the run again recovers the batch the killed driver logged"
    maintain(spark, cfg, list(maintenance))


def test_a_warehouse_on_s3_is_loaded_and_kept_as_a_reference_warehouse_is(spark, cfg, tmp_path, s3_store, etl_process):
    generate_stream(StreamSpec(start=T0, duration_s=360, rate=5, key_domain=300, new_key_share=0.1, duplicate_share=0.05,
                               malformed_share=0.02, seed=9), cfg.landing_path)
    local = cfg.replace(**SETTINGS)
    on_s3 = local.replace(warehouse_root=f"s3a://warehouse/{uuid.uuid4().hex}", meta_root=str(tmp_path / "meta"),
                          runs_root=str(tmp_path / "s3-runs"), gx_root=str(tmp_path / "s3-gx"),
                          reports_root=str(tmp_path / "s3-reports"), spark_properties_file=str(s3_store.properties_file))
    load_the_three_ways(spark, on_s3, etl_process)
    # OPTIMIZE and VACUUM are Delta's and change no row; the reference rebalances as the S3 side does.
    local = reference_in_memory(local, tmp_path / "reference")
    load_the_three_ways(spark, local, maintenance=("rebalance",))

    assert (tmp_path / "meta" / "segment_layout.json").exists()  # the POSIX side of the S3 warehouse
    bucket = s3_store.data_dir / "buckets" / "warehouse" / on_s3.warehouse_root.rsplit("/", 1)[-1]
    assert (bucket / "key_map" / "_delta_log").is_dir()  # the tables went through the S3 API to the server's store
    got, want = deterministic_tables(spark, on_s3), deterministic_tables(spark, local)
    assert set(got) == set(want)
    for name in want:
        assert got[name] == want[name], name
    assert sum(len(rows) for rows in want.values()) > 1000
