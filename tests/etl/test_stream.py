"""The always-on loader against scheduled runs: the same landed input gives the same warehouse, row
for row (batch numbers included), whether the stream loads it piece by piece (minute files, or
20-second ones) or the DAG (or a backfill) loads it run by run; a stream stopped mid-run and
started again ends the same."""

from __future__ import annotations

from datetime import timedelta

import pytest

import etl.load.loader as loader_module
from etl import jobs
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.layout_store import split_after, stored_layout
from etl.io.lock import LOCK_NAME
from etl.io.stream_status import HEARTBEAT, STREAM_LOCK, read_heartbeat, stream_dir
from etl.stream import Stream
from tests.helpers import T0, FakeClock, deterministic_tables

pytestmark = pytest.mark.spark


class Killed(RuntimeError):
    """A process's death at a crash point, in the test's process."""

RUNS = [Interval(T0, T0 + timedelta(minutes=2)), Interval(T0 + timedelta(minutes=2), T0 + timedelta(minutes=4))]
# One window a minute (so a run is two pieces of one batch each: a batch costs seconds here);
# block granularity's look-ahead is tested piece by piece in tests/etl/core/test_stream_plan.py.
SETTINGS = dict(schedule="*/2 * * * *", micro_batch_seconds=60, block_factor=1, key_domain=300, n_part=8,
                memory_budget=3000, n_invoke=15, wait_buffer_tuples=60, tau=50, k=3, d=1)


MINUTE_PIECES = ["minutes 01:00-01:01", "minutes 01:01-01:02", "minutes 01:02-01:03", "minutes 01:03-01:04"]
# 20-second landing files, 40-second windows: a piece is ready every 40 s; the MERGEs off the delay
# path, applied at each run's end, the logged tail kept from piece to piece (issue 46).
SHORT = dict(piece_seconds=20, micro_batch_seconds=40, apply_interval_seconds=3600)
SHORT_PIECES = [f"01:{m:02d}:{s:02d}-01:{(m * 60 + s + 40) // 60:02d}:{(s + 40) % 60:02d}"
                for m, s in [(0, 0), (0, 40), (1, 20), (2, 0), (2, 40), (3, 20)]]


@pytest.mark.memory_tables
@pytest.mark.parametrize("strategy, stop_after_piece, settings, spans", [
    ("meshjoin", None, {}, MINUTE_PIECES),
    # stopped in the middle of the second run; theta 10: each run's end splits grown segments
    ("partitioned-range", 4, {**SHORT, "theta": 10, "split_segments_per_run": 16}, SHORT_PIECES),
])
def test_the_stream_loads_what_scheduled_runs_load(spark, cfg, tmp_path, monkeypatch, strategy, stop_after_piece, settings,
                                                   spans):
    cfg = cfg.replace(join_strategy=strategy, **{**SETTINGS, **settings})
    generate_stream(StreamSpec(start=T0, duration_s=240, rate=6, key_domain=300, new_key_share=0.1, duplicate_share=0.05,
                               malformed_share=0.02, b=0.7, seed=5), cfg.landing_path, piece_seconds=cfg.piece_seconds)
    made = []
    real_get_strategy = loader_module.get_strategy
    monkeypatch.setattr(loader_module, "get_strategy", lambda *a: made.append(a[0]) or real_get_strategy(*a))

    clock, messages = FakeClock(T0), []
    stream = Stream(spark, cfg, clock=clock, sleep=clock.sleep, progress=messages.append)
    if stop_after_piece:  # SIGTERM's effect: stop after the piece being loaded
        def progress(message: str) -> None:
            messages.append(message)
            if sum("ingested" in m for m in messages) == stop_after_piece:
                stream.stop()
        stream.progress = progress
    finished = [f["run_key"] for f in stream.run(until=RUNS[-1].end)]
    if stop_after_piece:
        assert finished == [RUNS[0].run_key] and (stream_dir(cfg) / f"{RUNS[1].run_key}.json").exists()
        # Started again, it dies in its first piece's ingest after appending the piece's rows to
        # ingested_updates (a fresh piece's rows are appended); started once more, it writes that
        # piece over them instead of appending them twice.
        def killed_once(point: str) -> None:
            if point == "ingest.ingested_written":
                monkeypatch.setattr(jobs, "crash_point", lambda point: None)
                raise Killed(point)
        monkeypatch.setattr(jobs, "crash_point", killed_once)
        with pytest.raises(Killed):
            Stream(spark, cfg, clock=clock, sleep=clock.sleep, progress=messages.append).run(until=RUNS[-1].end)
        again = Stream(spark, cfg, clock=clock, sleep=clock.sleep, progress=messages.append)
        finished += [f["run_key"] for f in again.run(until=RUNS[-1].end)]  # resumes the open run
    assert finished == [r.run_key for r in RUNS]

    # Piece by piece: each piece ingested alone, as it closed; the strategy kept within a run
    # (made once per run, and once more for the run taken up again after the stop).
    pieces = [m for m in messages if "ingested" in m]
    assert [p.split(": ", 1)[1].split(" ingested")[0] for p in pieces] == spans
    assert len(made) == len(RUNS) + (1 if stop_after_piece else 0)
    assert not (cfg.meta_path / LOCK_NAME).exists()
    assert read_heartbeat(cfg)["stopped"] and sorted(p.name for p in stream_dir(cfg).iterdir()) == [HEARTBEAT, STREAM_LOCK]

    scheduled = cfg.replace(warehouse_root=str(tmp_path / "scheduled"), runs_root=str(tmp_path / "scheduled-runs"))
    for run in RUNS:
        jobs.ingest(spark, scheduled, run)
        jobs.load(spark, scheduled, run)
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, scheduled)
    assert stored_layout(cfg) == stored_layout(scheduled)  # the same splits at the same runs' ends
    if strategy == "partitioned-range":
        assert split_after(cfg) == split_after(scheduled) is not None
    for run in RUNS:  # the summaries the DAG's report reads
        assert jobs.read_summary(cfg, run, "ingest") == jobs.read_summary(scheduled, run, "ingest")
        streamed, loaded = jobs.read_summary(cfg, run, "load"), jobs.read_summary(scheduled, run, "load")
        assert streamed["loaded_by"] == "stream"
        for key in ("outcomes", "keys_allocated", "rejected", "updates_in"):
            assert streamed[key] == loaded[key], key


def test_a_stream_whose_windows_do_not_end_on_piece_ends_is_refused_before_it_starts(tmp_path):
    """2-s pieces and 5-s windows would be read and loaded 10 s at a time (found by the Kafka
    benchmark's 5-s mode, which was no quicker than 10-s windows): refused, naming the settings,
    before the stream takes its lock or any table."""
    from etl.core.config import ConfigError, EtlConfig

    cfg = EtlConfig(warehouse_root=str(tmp_path / "warehouse"), landing_root=str(tmp_path / "landing"),
                    piece_seconds=2, micro_batch_seconds=5)
    with pytest.raises(ConfigError, match=r"only every 10 s .*micro_batch_seconds = 4, or piece_seconds = 1"):
        Stream(None, cfg)
    assert not (tmp_path / "warehouse").exists()
