"""The always-on loader's plan, pure: which minutes are ready, which windows they close, which
load batches are final. The property that matters is that a plan made piece by piece is the plan
made at once (the stream and a scheduled run load the same batches)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.policy import load_batches, load_plan
from etl.core.stream_plan import (
    dag_route,
    fresh_attempt,
    misaligned,
    n_windows,
    piece_start,
    piece_windows,
    next_wake,
    ready_through,
    schedule_interval,
    settled_groups,
    windows_before,
)

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
RUN = Interval(T0, T0 + timedelta(minutes=5))


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.mark.parametrize("schedule, now, expected", [
    ("*/5 * * * *", at(7.5), Interval(at(5), at(10))),
    ("*/5 * * * *", at(5), Interval(at(5), at(10))),  # a boundary belongs to the interval it starts
    ("@hourly", at(59.9), Interval(at(0), at(60))),
    ("0 * * * *", at(60), Interval(at(60), at(120))),
])
def test_the_stream_s_runs_are_the_schedule_s_data_intervals(schedule, now, expected):
    assert schedule_interval(schedule, now) == expected


def test_a_minute_is_ready_after_its_grace_and_only_at_a_window_boundary():
    assert ready_through(RUN, 20, at(0), at(1), 5) is None  # minute 0 closed, its last write may be on the way
    assert ready_through(RUN, 20, at(0), at(1) + timedelta(seconds=5), 5) == at(1)
    assert ready_through(RUN, 20, at(0), at(3.2), 5) == at(3)  # three minutes at once after a pause
    assert ready_through(RUN, 20, at(0), at(99), 5) == RUN.end
    # 90-second windows: minute boundaries 1 and 2 split a window; the first boundary both share is 3
    assert ready_through(RUN, 90, at(0), at(2.5), 0) is None
    assert ready_through(RUN, 90, at(0), at(3), 0) == at(3)
    assert ready_through(RUN, 90, at(3), at(4.9), 0) is None
    assert ready_through(RUN, 90, at(3), at(5), 0) == RUN.end  # the run's end is a boundary, the window short
    assert next_wake(RUN, 90, at(0), 5) == at(3) + timedelta(seconds=5)


def test_pieces_shorter_than_a_minute_are_ready_one_by_one_after_their_grace():
    """piece_seconds = 5 with 10-second windows: every other piece ends a window."""
    s = lambda seconds: T0 + timedelta(seconds=seconds)  # noqa: E731
    assert ready_through(RUN, 10, s(0), s(6), 1, piece_seconds=5) is None  # the piece of 00:05 is not a window's end
    assert ready_through(RUN, 10, s(0), s(11), 1, piece_seconds=5) == s(10)
    assert ready_through(RUN, 10, s(10), s(47.5), 1, piece_seconds=5) == s(40)  # behind: several pieces at once
    assert next_wake(RUN, 10, s(10), 1, piece_seconds=5) == s(21)
    assert ready_through(RUN, 10, s(280), s(400), 1, piece_seconds=5) == RUN.end
    assert piece_windows(RUN, 10, s(35), 5) == (3, 3) and piece_windows(RUN, 2, s(35), 5) == (17, 19)
    assert piece_start(s(37.25), 5) == s(35) and piece_start(s(37.25), 60) == s(0)
    assert not misaligned(s(35), 5) and misaligned(s(35), 10) and not misaligned(s(60), 60)


def test_windows_of_a_minute_and_windows_closed():
    assert n_windows(RUN, 20) == 15 and n_windows(RUN, 90) == 4
    assert piece_windows(RUN, 20, at(2)) == (6, 8)
    assert piece_windows(RUN, 90, at(1)) == (0, 1)
    assert piece_windows(RUN, 90, at(4)) == (2, 3)
    assert windows_before(RUN, 20, at(2)) == 6
    assert windows_before(RUN, 90, at(3)) == 2
    assert windows_before(RUN, 90, RUN.end) == 4


@given(
    counts=st.dictionaries(st.integers(0, 29), st.integers(1, 400), min_size=1),
    strategy=st.sampled_from(["native", "partitioned-range"]),
    block_factor=st.integers(1, 5),
    pieces=st.lists(st.integers(1, 30), min_size=1, max_size=8),
)
def test_a_plan_made_piece_by_piece_is_the_plan_made_at_once(counts, strategy, block_factor, pieces):
    """Whatever the pieces the windows arrive in, the batches settled along the way are exactly a
    prefix of the whole run's plan, and at the end they are the whole plan."""
    cfg = EtlConfig(micro_batch_seconds=10, h_mark=300, l_mark=50, block_factor=block_factor)
    total = 30
    whole = load_batches(strategy, counts, cfg)
    loaded: list[list[int]] = []
    closed = 0
    for step in pieces + [total]:
        closed = min(total, closed + step)
        known = {w: n for w, n in counts.items() if w < closed}
        settled = settled_groups(load_plan(strategy, known, cfg), closed, total)
        assert settled[: len(loaded)] == loaded  # nothing loaded is ever planned otherwise
        loaded = settled
        assert whole[: len(loaded)] == loaded
    assert loaded == whole


def test_a_partitioned_batch_in_tuple_granularity_is_loaded_once_its_window_closes():
    """Block granularity looks ahead only when the backlog asks for it: a quiet window is its own
    batch as soon as it closes (the always-on partitioned join waited ``block_factor`` windows
    for every batch, 15 s more at 5-s windows, 30 s at 10-s), a burst over ``h_mark`` waits for
    the windows its block spans, and a block stays one until its backlog has closed."""
    cfg = EtlConfig(micro_batch_seconds=5, h_mark=300, l_mark=50, block_factor=4)
    quiet = {0: 40, 1: 55, 2: 30}
    assert settled_groups(load_plan("partitioned-range", quiet, cfg), 3, 24) == [[0], [1], [2]]
    burst = {0: 40, 1: 400, 2: 90, 3: 80}  # window 1 over h_mark: a block of windows 1-4
    assert settled_groups(load_plan("partitioned-range", burst, cfg), 4, 24) == [[0]]
    assert settled_groups(load_plan("partitioned-range", {**burst, 4: 70}, cfg), 5, 24) == [[0], [1, 2, 3, 4]]
    # In block mode the next batch's backlog spans four windows: once 5-8 have closed, under
    # l_mark, back to one window a batch.
    calm = {**burst, 4: 70, 5: 10, 6: 10}
    assert settled_groups(load_plan("partitioned-range", calm, cfg), 7, 24) == [[0], [1, 2, 3, 4]]
    assert settled_groups(load_plan("partitioned-range", {**calm, 7: 5, 8: 1}, cfg), 9, 24)[2:] == [[5], [6], [7], [8]]


@pytest.mark.parametrize("summary, heartbeat, live, waited, expected", [
    ({"loaded_by": "stream"}, None, False, 0, "validate"),
    ({"loaded_by": "stream"}, {"run_key": "20261122T0105-20261122T0110"}, True, 0, "validate"),
    (None, None, False, 0, "load"),  # no stream: the DAG loads, as always
    ({"strategy": "native"}, None, False, 0, "load"),  # loaded by a DAG run: rerun (idempotent)
    (None, {"run_key": "20261122T0100-20261122T0105"}, True, 10, "wait"),  # the stream is on it
    (None, {"run_key": "20261122T0050-20261122T0055"}, True, 10, "wait"),  # catching up
    (None, {"run_key": None}, True, 10, "wait"),
    (None, {"run_key": "20261122T0105-20261122T0110"}, True, 10, "load"),  # a backfill: the stream is past it
    (None, {"run_key": "20261122T0100-20261122T0105"}, True, 400, "late"),
])
def test_the_dag_run_beside_a_stream_validates_waits_or_loads(summary, heartbeat, live, waited, expected):
    interval = Interval(T0, at(5))
    assert dag_route(interval, summary, heartbeat, live, waited, max_wait_s=300) == expected


def test_the_route_task_reads_the_stream_s_files(tmp_path, monkeypatch):
    """The DAG's ``route`` task with no Spark: the stream's heartbeat and the run's load summary."""
    import json
    import time

    from etl.entrypoints.airflow_support import STREAM_LOADED, stream_route
    from etl.io.files import write_json
    from etl.io.stream_status import HEARTBEAT, stream_dir

    monkeypatch.setenv("ETL_WAREHOUSE_ROOT", str(tmp_path / "wh"))
    monkeypatch.setenv("ETL_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("ETL_STREAM_STALE_SECONDS", "20")
    cfg = EtlConfig(warehouse_root=str(tmp_path / "wh"), runs_root=str(tmp_path / "runs"))
    assert stream_route(T0, at(5)) == "ingest_load_validate"  # no stream
    write_json(stream_dir(cfg) / HEARTBEAT, {"at_epoch": time.time(), "run_key": "20261122T0105-20261122T0110", "stopped": False})
    assert stream_route(T0, at(5)) == "ingest_load_validate"  # a live stream past the interval
    summary = tmp_path / "runs" / "20261122T0100-20261122T0105" / "load.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"loaded_by": "stream"}))
    assert stream_route(T0, at(5)) == STREAM_LOADED


def test_a_stream_overlapping_the_runs_loaded_before_says_to_start_after_them_or_take_their_schedule():
    """After `make demo` (runs of 5 minutes under ``*/5 * * * *``), a stream on the default
    ``@hourly`` plans 14:00-15:00 over the demo's 14:25-14:30: the refusal said "rerun that exact
    interval instead", advice for a scheduled run (issue 45)."""
    from etl.core.stream_plan import first_start_after, schedule_of, stream_overlap_advice

    demo = [Interval(datetime(2026, 11, 22, 14, 20, tzinfo=timezone.utc), datetime(2026, 11, 22, 14, 25, tzinfo=timezone.utc)),
            Interval(datetime(2026, 11, 22, 14, 25, tzinfo=timezone.utc), datetime(2026, 11, 22, 14, 30, tzinfo=timezone.utc))]
    assert schedule_of(demo) == "*/5 * * * *"
    assert schedule_of([Interval(datetime(2026, 11, 22, 14, tzinfo=timezone.utc), datetime(2026, 11, 22, 15, tzinfo=timezone.utc))]) == "@hourly"
    assert schedule_of([*demo, Interval(datetime(2026, 11, 22, 15, tzinfo=timezone.utc), datetime(2026, 11, 22, 16, tzinfo=timezone.utc))]) is None
    assert first_start_after("@hourly", demo) == datetime(2026, 11, 22, 15, tzinfo=timezone.utc)
    assert first_start_after("*/5 * * * *", demo) == datetime(2026, 11, 22, 14, 30, tzinfo=timezone.utc)
    planned = schedule_interval("@hourly", demo[-1].end)
    text = stream_overlap_advice("@hourly", planned, demo[1:], demo)
    assert "overlaps 1 run(s) loaded before (20261122T1425-20261122T1430; 5 minutes long)" in text
    assert "etl stream --start 2026-11-22T15:00" in text and "--set schedule='*/5 * * * *'" in text
    assert "rerun that exact interval" not in text
    assert "--set schedule" not in stream_overlap_advice("*/5 * * * *", demo[1], demo[1:], demo)  # already theirs


def test_a_piece_is_fresh_only_when_no_attempt_reached_past_its_start():
    """Appending a piece's rows is safe only where no earlier attempt wrote: after a crash in the
    middle of [0 s, 30 s), a restart reading [0 s, 10 s) writes over, and so does the next
    attempt, [10 s, 20 s), which the crashed one covered too; [30 s, 40 s) is fresh again. A run
    state an older version wrote (no mark) is never fresh, however far it goes."""
    at = lambda s: T0 + timedelta(seconds=s)  # noqa: E731
    assert fresh_attempt(T0.isoformat(), at(0), at(30), RUN.end) == (True, at(30).isoformat())
    assert fresh_attempt(at(30).isoformat(), at(0), at(10), RUN.end) == (False, at(30).isoformat())  # restarted, shorter
    assert fresh_attempt(at(30).isoformat(), at(10), at(20), RUN.end) == (False, at(30).isoformat())
    assert fresh_attempt(at(30).isoformat(), at(20), at(40), RUN.end) == (False, at(40).isoformat())
    assert fresh_attempt(at(40).isoformat(), at(40), at(50), RUN.end) == (True, at(50).isoformat())
    mark = None  # an older version's state
    for a in range(0, 300, 10):
        fresh, mark = fresh_attempt(mark, at(a), at(a + 10), RUN.end)
        assert not fresh and mark == RUN.end.isoformat()


@pytest.mark.parametrize("piece, window, span", [(2, 5, 10), (60, 40, 120), (4, 6, 12)])
def test_windows_that_do_not_fall_on_piece_ends_are_named_with_the_span_they_would_give(piece, window, span):
    from etl.core.stream_plan import granularity_problem

    problem = granularity_problem(piece, window)
    assert problem is not None and f"only every {span} s" in problem
    assert f"piece_seconds = {piece}" in problem and f"micro_batch_seconds = {window}" in problem


@pytest.mark.parametrize("piece, window", [(2, 10), (5, 5), (60, 20), (20, 40), (60, 60), (10, 30)])
def test_windows_and_pieces_where_one_divides_the_other_are_accepted(piece, window):
    from etl.core.stream_plan import granularity_problem

    assert granularity_problem(piece, window) is None
