"""What the always-on loader may read and load, and when (pure Python: tested without Spark).

The stream loads the same runs a scheduled DAG would (the schedule's data intervals), but a run's
arrival windows as soon as their input pieces have closed instead of after the whole interval.
The input comes in pieces of ``piece_seconds`` (a landing file, or a Kafka offset range the
stream decides), so a window is complete when every piece it overlaps has ended (plus
``stream_grace_seconds`` for the landing agent's last write). A line's window is kept inside its
piece (``piece_windows``), so a later piece can never add to a window already loaded: that is
what makes a run loaded by the stream equal, row for row, the same run loaded at once.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from croniter import croniter

from etl.core.interval import Interval

MINUTE = 60


def schedule_interval(schedule: str, at: datetime) -> Interval:
    """The schedule's data interval holding ``at``: the one Airflow's ``CronDataIntervalTimetable``
    gives the DAG run that loads ``at`` (cron expressions and presets such as ``@hourly``)."""
    at = at.astimezone(timezone.utc)
    it = croniter(schedule, at + timedelta(microseconds=1))
    start = it.get_prev(datetime)
    end = it.get_next(datetime)
    return Interval(start.astimezone(timezone.utc), end.astimezone(timezone.utc))


def n_windows(interval: Interval, micro_batch_seconds: int) -> int:
    """Arrival windows of the run (the last may be shorter)."""
    span = int((interval.end - interval.start).total_seconds())
    return max(1, -(-span // micro_batch_seconds))


def window_of(interval: Interval, micro_batch_seconds: int, seconds: float) -> int:
    """The window of an arrival ``seconds`` after the run's start, clamped into the run."""
    w = int(seconds // micro_batch_seconds)
    return min(max(w, 0), n_windows(interval, micro_batch_seconds) - 1)


def piece_windows(interval: Interval, micro_batch_seconds: int, start: datetime, piece_seconds: int = MINUTE) -> tuple[int, int]:
    """The first and last window a line of the piece starting at ``start`` may take: its arrival
    time decides, kept inside the piece (a landing file is the arrivals of its piece)."""
    offset = (start - interval.start).total_seconds()
    return (window_of(interval, micro_batch_seconds, offset),
            window_of(interval, micro_batch_seconds, offset + piece_seconds - 1e-6))


def piece_start(ts: datetime, piece_seconds: int) -> datetime:
    """The start of the piece holding ``ts`` (pieces tile each minute)."""
    return ts.replace(second=ts.second - ts.second % piece_seconds, microsecond=0)


def windows_before(interval: Interval, micro_batch_seconds: int, t: datetime) -> int:
    """How many of the run's windows end at or before ``t`` (``t`` a piece boundary)."""
    if t >= interval.end:
        return n_windows(interval, micro_batch_seconds)
    return int((t - interval.start).total_seconds()) // micro_batch_seconds


def is_window_boundary(interval: Interval, micro_batch_seconds: int, t: datetime) -> bool:
    """Whether no window of the run straddles ``t``, so pieces before it can be ingested alone."""
    if t in (interval.start, interval.end):
        return True
    return int((t - interval.start).total_seconds()) % micro_batch_seconds == 0


def granularity_problem(piece_seconds: int, micro_batch_seconds: int) -> str | None:
    """Why the stream could not load a window as soon as it closes, or ``None``. A window is read
    when a piece ends on its boundary, so unless one of the two divides the other the stream reads
    and loads their least common multiple at a time (2-s pieces and 5-s windows: 10 s), a delay
    nobody asked for; said before the stream starts, with the settings that would avoid it."""
    span = math.lcm(piece_seconds, micro_batch_seconds)
    if span == max(piece_seconds, micro_batch_seconds):
        return None
    return (f"micro_batch_seconds = {micro_batch_seconds} and piece_seconds = {piece_seconds}: a window ends on a "
            f"piece's end only every {span} s (their least common multiple), so the stream would read and load "
            f"{span} s at a time; choose windows that are a multiple of the pieces or pieces that divide the "
            f"windows (e.g. micro_batch_seconds = {max(piece_seconds, micro_batch_seconds // piece_seconds * piece_seconds)}, "
            f"or piece_seconds = {math.gcd(piece_seconds, micro_batch_seconds)})")


def ready_through(interval: Interval, micro_batch_seconds: int, ingested_through: datetime, now: datetime,
                  grace_seconds: float, piece_seconds: int = MINUTE) -> datetime | None:
    """The latest piece boundary ``t`` in ``(ingested_through, interval.end]`` that has closed
    (``t`` plus the grace is past) and is a window boundary: the pieces of ``[ingested_through, t)``
    can be ingested and their windows loaded now. ``None`` when nothing new is ready."""
    best = None
    step = timedelta(seconds=piece_seconds)
    t = ingested_through + step
    while t <= interval.end and t + timedelta(seconds=grace_seconds) <= now:
        if is_window_boundary(interval, micro_batch_seconds, t):
            best = t
        t += step
    return best


def next_wake(interval: Interval, micro_batch_seconds: int, ingested_through: datetime, grace_seconds: float,
              piece_seconds: int = MINUTE) -> datetime:
    """When the next chunk of the run will be ready."""
    step = timedelta(seconds=piece_seconds)
    t = ingested_through + step
    while t < interval.end and not is_window_boundary(interval, micro_batch_seconds, t):
        t += step
    return min(t, interval.end) + timedelta(seconds=grace_seconds)


def fresh_attempt(attempted_through: str | None, start: datetime, end: datetime, run_end: datetime) -> tuple[bool, str]:
    """Whether an attempt at ingesting ``[start, end)`` of a run is the first to touch those pieces
    (its rows may be appended instead of written over), and the run's ``attempted_through`` to save
    before it writes: the furthest end any attempt reached. Without one (a run state an older
    version wrote) no piece of the run is fresh: it is set to the run's end."""
    if attempted_through is None:
        return False, run_end.isoformat()
    reached = datetime.fromisoformat(attempted_through)
    return start >= reached, max(end, reached).isoformat()


def misaligned(ingested_through: datetime, piece_seconds: int) -> bool:
    """Whether a run's progress is not at a piece boundary: ingested with another ``piece_seconds``
    (changed while the stream was stopped in the middle of the run)."""
    return ingested_through.microsecond != 0 or ingested_through.second % piece_seconds != 0


def settled_groups(planned: list[tuple[list[int], int]], closed_windows: int, total_windows: int) -> list[list[int]]:
    """The load batches a plan over the first ``closed_windows`` windows has fixed for good: the
    longest prefix of ``planned`` (each batch with its reach, ``policy.load_plan``) whose batches'
    windows, and the windows their grouping read, have all closed. A batch's grouping depends on
    the batches before it (block granularity's mode), hence a prefix. Every batch is final once
    the run's last window has closed."""
    if closed_windows >= total_windows:
        return [group for group, _ in planned]
    settled = []
    for group, reach in planned:
        if reach > closed_windows or group[-1] >= closed_windows:
            break
        settled.append(group)
    return settled


def dag_route(interval: Interval, load_summary: dict | None, heartbeat: dict | None, live: bool,
              waited_s: float, max_wait_s: float) -> str:
    """What the scheduled DAG run of ``interval`` does beside an always-on loader: ``validate`` (the
    stream loaded it: only validate and report), ``load`` (no live stream, or one already past this
    interval, as for a backfill: load it as without a stream; a finished run is not loaded twice),
    ``wait`` (a live stream will load it) or ``late`` (it has not, within ``max_wait_s``)."""
    if load_summary is not None and load_summary.get("loaded_by") == "stream":
        return "validate"
    if not live:
        return "load"
    open_run = (heartbeat or {}).get("run_key")
    if open_run and Interval.from_run_key(open_run).start >= interval.end:
        return "load"
    return "wait" if waited_s < max_wait_s else "late"


def first_run(schedule: str, start: datetime | None, runs: list[Interval], clock) -> Interval:
    """The run a stream without an open run starts with: the schedule's interval holding
    ``start``, else the one holding the last run's end, else the one holding ``clock()`` (asked
    only then: a test's clock is a script of readings)."""
    if start is not None:
        return schedule_interval(schedule, start)
    return schedule_interval(schedule, max(r.end for r in runs) if runs else clock())


def schedule_of(runs: list[Interval]) -> str | None:
    """A cron schedule whose data intervals are these runs' length (all the same), when there is one."""
    lengths = {int((r.end - r.start).total_seconds()) // MINUTE for r in runs}
    if len(lengths) != 1:
        return None
    minutes = lengths.pop()
    if minutes == 60:
        return "@hourly"
    if minutes == 24 * 60:
        return "@daily"
    if 0 < minutes < 60 and 60 % minutes == 0:
        return f"*/{minutes} * * * *"
    return None


def first_start_after(schedule: str, runs: list[Interval]) -> datetime:
    """The start of the schedule's first data interval that begins at or after every run's end."""
    last_end = max(r.end for r in runs)
    interval = schedule_interval(schedule, last_end)
    while interval.start < last_end:
        interval = schedule_interval(schedule, interval.end)
    return interval.start


def stream_overlap_advice(schedule: str, planned: Interval, overlapping: list[Interval], runs: list[Interval]) -> str:
    """Why the stream cannot load ``planned`` and what to do: start after the runs loaded so far,
    or take the schedule that loaded them ("rerun that exact interval" is a scheduled run's advice)."""
    minutes = sorted({int((o.end - o.start).total_seconds()) // MINUTE for o in overlapping})
    named = ", ".join(o.run_key for o in overlapping[:3]) + (f" and {len(overlapping) - 3} more" if len(overlapping) > 3 else "")
    used = schedule_of(runs)
    start = first_start_after(schedule, runs)
    text = (f"the stream's run {planned.run_key} (schedule {schedule!r}) overlaps {len(overlapping)} run(s) loaded before "
            f"({named}; {'/'.join(map(str, minutes))} minutes long): runs must not share landing minutes. Either start "
            f"after the runs loaded so far: etl stream --start {start:%Y-%m-%dT%H:%M}")
    if used and used != schedule:
        text += f"; or use the schedule that loaded them: --set schedule='{used}' (or ETL_SCHEDULE='{used}')"
    return text
