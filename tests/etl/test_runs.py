"""Runs refused before they write, runs pinned to their strategy, and late lines (etl.io.runs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from etl import jobs
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.landing import landing_file
from etl.io.runs import LandingChanged, OverlappingRunError, RunOwnedByAnotherStrategy, snapshot_runs
from etl.io.tables import read
from etl.load.loader import Loader
from etl.quality.gate import run_suites
from tests.helpers import deterministic_tables, die_after, good, land
from tests.processes import settings_json
from warehouse.schemas import TABLES

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
RUN = Interval(T0, T0 + timedelta(minutes=2))
TINY = dict(memory_budget=3000, n_invoke=15, wait_buffer_tuples=60, r_wb=0.4, tau=50)


def rows_of(spark, cfg, run_key: str) -> dict[str, int]:
    out = {}
    for name, table in TABLES.items():
        if "run_key" in table.schema.fieldNames():
            out[name] = read(spark, cfg, name).where(f"run_key = '{run_key}'").count()
    return out


@pytest.mark.memory_tables
@pytest.mark.slow  # in make test-slow while CI cannot afford it (issue 44); its claim: docs/guarantees.md
def test_a_run_is_pinned_to_the_strategy_that_started_it(spark, cfg):
    """A partitioned-range run cut short after its 2nd batch and resumed with native lost 29 of
    950 updates (its wait buffer was never released). Now native is refused, naming the owner,
    and the owner finishes the run with an outcome for every update."""
    cfg = cfg.replace(micro_batch_seconds=30, **TINY)
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=5, seed=3, key_domain=200), cfg.landing_path)
    jobs.ingest(spark, cfg, RUN)
    loader = Loader(spark, cfg, "partitioned-range")
    die_after(loader, 2)
    with pytest.raises(RuntimeError, match="killed"):
        loader.load(RUN)
    assert snapshot_runs(cfg) == {RUN.run_key: "partitioned-range"}  # begun, its pending updates in memory only
    assert max(r.wait_buffer_tuples for r in read(spark, cfg, "join_metrics").collect()) > 0  # updates did wait
    ledger_before = read(spark, cfg, "batch_ledger").count()

    for other in ("native", "meshjoin"):
        with pytest.raises(RunOwnedByAnotherStrategy, match="started with join strategy 'partitioned-range'"):
            jobs.load(spark, cfg, RUN, strategy=other)
    assert read(spark, cfg, "batch_ledger").count() == ledger_before  # the refusal wrote nothing
    assert snapshot_runs(cfg) == {RUN.run_key: "partitioned-range"}  # and the run stays begun

    jobs.load(spark, cfg, RUN, strategy="partitioned-range")
    ingested = {r[0] for r in read(spark, cfg, "ingested_updates").select("update_id").collect()}
    logged = [r[0] for r in read(spark, cfg, "outcome_log").select("update_id").collect()]
    assert sorted(logged) == sorted(ingested)  # every update exactly one outcome
    assert snapshot_runs(cfg) == {}
    assert jobs.validate(spark, cfg, RUN)["success"]
    # A finished run may be rerun with any strategy: nothing is left to do.
    assert jobs.load(spark, cfg, RUN, strategy="native")["batches_committed"] == 0


@pytest.mark.memory_tables
def test_overlapping_runs_are_refused_before_they_write_and_a_mistaken_ingest_can_be_discarded(spark, cfg):
    """An overlap used to be noticed by the load, after its ingest had written rows that then
    failed the warehouse-wide suites for good."""
    for m in (0, 2, 3):
        land(cfg, [good(str(m), seq=1)], minute=T0 + timedelta(minutes=m))
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN)
    overlapping = Interval(T0 + timedelta(minutes=1), T0 + timedelta(minutes=3))
    with pytest.raises(OverlappingRunError, match="rerun that exact interval"):
        jobs.ingest(spark, cfg, overlapping)
    assert set(rows_of(spark, cfg, overlapping.run_key).values()) == {0}
    assert run_suites(spark, cfg, "warehouse", None)["success"]  # the warehouse-wide suites still pass

    mistaken = Interval(T0 + timedelta(minutes=2), T0 + timedelta(minutes=3))
    jobs.ingest(spark, cfg, mistaken)  # ingested, never loaded
    wider = Interval(T0 + timedelta(minutes=2), T0 + timedelta(minutes=5))
    with pytest.raises(OverlappingRunError, match="etl discard --start 2026-11-22T01:02 --end 2026-11-22T01:03"):
        jobs.ingest(spark, cfg, wider)
    dropped = jobs.discard(spark, cfg, mistaken)["rows_dropped"]
    assert dropped == {"ingested_updates": 1, "rejected_updates": 0, "landed_files": 1}
    jobs.ingest(spark, cfg, wider)
    jobs.load(spark, cfg, wider)
    assert sorted(r[0] for r in read(spark, cfg, "key_map").select("natural_key").collect()) == ["0", "2", "3"]
    assert run_suites(spark, cfg, "warehouse", None)["success"]
    with pytest.raises(jobs.RunAlreadyLoaded):
        jobs.discard(spark, cfg, wider)


def test_the_cli_refuses_overlaps_with_exit_2(spark, cfg, etl_process):
    land(cfg, [good("1", seq=1)], minute=T0)
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN)
    settings = settings_json(cfg, ("warehouse_root", "landing_root", "gx_root", "runs_root", "reports_root"))
    env = dict(os.environ)

    def etl(*args):
        return etl_process.run(list(args), settings, env=env, stdout_apart=True)

    span = ["--start", "2026-11-22T01:01", "--end", "2026-11-22T01:03"]
    done = etl("run", *span)
    assert done.code == 2, done.tail()
    assert "overlaps the interval 20261122T0100-20261122T0102" in done.output and "Traceback" not in done.output
    assert rows_of(spark, cfg, Interval.parse(*span[1::2]).run_key)["ingested_updates"] == 0
    # Foreign settings in --strategy-settings: the same exit 2, from main() in-process
    # (tests/etl/entrypoints/test_cli.py::test_strategy_settings_accept_only_the_strategys_own).

    # The JSON summary is the whole stdout, whatever the driver's JVM prints (PrintFlagsFinal: ~560
    # lines of its own output, as "CodeCache is full" once was).
    env["ETL_SPARK_DRIVER_JAVA_OPTIONS"] = f"{env.get('ETL_SPARK_DRIVER_JAVA_OPTIONS', '')} -XX:+PrintFlagsFinal"
    done = etl("load", "--start", "2026-11-22T01:00", "--end", "2026-11-22T01:02", "--json")
    assert done.code == 0, done.tail()
    assert json.loads(done.stdout)["batches_committed"] == 0  # loaded above: nothing to do
    assert "PrintFlagsFinal" in done.output
    # Quiet by default (issue 45): none of Spark's start-up notes, the command's lines stamped.
    for noise in ("Using Spark's default log4j profile", "Setting default log level", "NativeCodeLoader", " INFO "):
        assert noise not in done.output, done.tail()
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[etl\] ", ln) for ln in done.output.splitlines() if "[etl]" in ln)


@pytest.mark.memory_tables
def test_late_lines_are_refused_by_a_rerun_flagged_by_the_gate_and_movable(spark, cfg):
    """A line appended to a loaded minute's file used to be read by a rerun's ingest and never
    loaded, failing the gate forever. Now: the rerun refuses before writing, the gate names the
    changed file, and `etl late-lines --move-to` hands the late lines to a later run."""
    path = land(cfg, [good("1", seq=1), good("2", seq=1)], minute=T0)
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN)
    assert jobs.validate(spark, cfg, RUN)["success"]
    before = read(spark, cfg, "ingested_updates").collect()
    with path.open("a") as f:
        f.write(good("3", seq=1) + "\n")

    with pytest.raises(LandingChanged, match=r"updates-20261122T0100.jsonl: appended \(\d+ -> \d+ bytes\)"):
        jobs.ingest(spark, cfg, RUN)
    assert sorted(read(spark, cfg, "ingested_updates").collect()) == sorted(before)
    gate = jobs.validate(spark, cfg, RUN, raise_on_failure=False)
    assert not gate["success"]
    assert [r["actual"] for r in gate["conservation"] if r["check"].startswith("landing files changed")] == [1]

    listed = jobs.late_lines(spark, cfg, RUN)
    assert [c["kind"] for c in listed["changes"]] == ["appended"]
    later = T0 + timedelta(minutes=10)
    with pytest.raises(Exception, match="own interval"):
        jobs.late_lines(spark, cfg, RUN, T0 + timedelta(minutes=1))
    moved = jobs.late_lines(spark, cfg, RUN, later)
    assert len(moved["moved"]) == 1
    assert jobs.late_lines(spark, cfg, RUN, later)["changes"] == []  # idempotent: nothing left to move
    assert jobs.validate(spark, cfg, RUN)["success"]  # the run's files are what it loaded again

    after = Interval(later, later + timedelta(minutes=1))
    jobs.ingest(spark, cfg, after)
    jobs.load(spark, cfg, after)
    assert jobs.validate(spark, cfg, after)["success"]
    assert sorted(r[0] for r in read(spark, cfg, "key_map").select("natural_key").collect()) == ["1", "2", "3"]
    assert landing_file(cfg.landing_path, "crm", later).read_text() == good("3", seq=1) + "\n"


@pytest.mark.memory_tables
def test_changed_or_removed_files_are_not_moved_but_named(spark, cfg):
    path = land(cfg, [good("1", seq=1)], minute=T0)
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN)
    path.write_text(good("9", seq=1) + "\n")
    with pytest.raises(LandingChanged, match="changed or removed"):
        jobs.late_lines(spark, cfg, RUN, T0 + timedelta(minutes=10))
    path.unlink()
    assert [c["kind"] for c in jobs.late_lines(spark, cfg, RUN)["changes"]] == ["removed"]


@pytest.mark.slow
def test_a_full_disk_exits_5_and_the_rerun_after_freeing_space_equals_an_uninterrupted_run(spark, cfg, tmp_path, etl_process):
    """The warehouse on a 600 KB tmpfs fills up during the load: `etl run` exits 5 with a message
    (no trace); after the filesystem is grown, the rerun finishes and every table equals a run
    that never met a full disk."""
    import time


    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(full)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root): the exit code mapping is tested in test_cli.py")
    try:
        cfg = cfg.replace(micro_batch_seconds=40)
        generate_stream(StreamSpec(start=T0, duration_s=120, rate=6, seed=31, key_domain=300), cfg.landing_path)
        small = cfg.replace(warehouse_root=str(full / "warehouse"))
        settings = small.as_dict()
        cmd = ["run", "--start", RUN.start.isoformat(), "--end", RUN.end.isoformat()]
        done = etl_process.run(cmd, json.dumps(settings), stdout_apart=True)
        assert done.code == 5, done.tail()
        assert "no space left on device" in done.output and "Traceback" not in done.output
        subprocess.run(["mount", "-o", "remount,size=64m", str(full)], check=True)
        done = etl_process.run(cmd, json.dumps(settings), stdout_apart=True)
        assert done.code == 0, done.tail()
        jobs.ingest(spark, cfg, RUN)
        jobs.load(spark, cfg, RUN)
        assert deterministic_tables(spark, small) == deterministic_tables(spark, cfg)
    finally:
        for _ in range(30):
            if subprocess.run(["umount", str(full)], capture_output=True).returncode == 0:
                break
            time.sleep(1)
