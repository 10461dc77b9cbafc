"""Production delay, defined once (pure Python; the DataFrame side is ``etl.transforms.delays``).

An update's production delay is the time from its arrival (``arrival_ts``) to the write-ahead
commit of the batch that decided it (the ledger's ``committed_at``: decided and durable). An
arrival after that commit cannot be real: the update was ingested before its batch was decided.
Its source's clock is ahead of the warehouse's, or a replay stamped it late. Such an update has no
delay. It is **clock skew**: counted apart, and left out of every average, percentile and maximum,
where one such update made a run's average -9,365,301 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


def production_delay_s(committed_s: float, arrival_s: float) -> float | None:
    """Seconds from arrival to commit; ``None`` when the arrival is after the commit (clock skew)."""
    delay = committed_s - arrival_s
    return None if delay < 0 else delay


@dataclass(frozen=True)
class Arrivals:
    """A batch's arrival times as one pass over it gathers them, split at ``cut_s``: a moment
    before its commit, since the commit's own time is known only once that pass is done."""

    cut_s: float
    by_cut: int  # arrivals at or before the cut
    avg_s: float | None  # their average (epoch seconds)
    p01_s: float | None  # their 1st percentile: the oldest 1%, which give the p99 delay
    after_cut: int  # arrivals after the cut
    first_after_cut_s: float | None  # the earliest of those

    def split_as_at(self, committed_s: float) -> bool:
        """Whether the split at the cut is the split at the commit: the cut is not later and no
        arrival lies between the two (else the batch is looked at again with the commit as the
        cut; only a source clock ahead by less than the commit took, or a wall clock set back,
        does that)."""
        return self.cut_s <= committed_s and (self.after_cut == 0 or self.first_after_cut_s > committed_s)


@dataclass(frozen=True)
class Delays:
    """The production delays of some updates (a batch's, a run's): over the ``measured`` ones,
    the ``clock_skew`` ones left out."""

    avg_s: float | None
    p99_s: float | None
    measured: int
    clock_skew: int = 0


def batch_delays(committed_s: float, arrivals: Arrivals) -> Delays:
    """A batch's delays from its arrivals split at its commit (``Arrivals.split_as_at``)."""
    assert arrivals.split_as_at(committed_s), "split the arrivals at the commit first"

    def delay(arrival_s: float | None) -> float | None:
        return None if arrival_s is None else production_delay_s(committed_s, arrival_s)

    return Delays(delay(arrivals.avg_s), delay(arrivals.p01_s), arrivals.by_cut, arrivals.after_cut)


def visible_delays(logged: Delays, visible_after_s: float | None) -> Delays:
    """A batch's *visible* delays (arrival to the entity table's MERGE commit, when readers of the
    table see it) from its *logged* ones (arrival to its write-ahead commit) and the time between
    the two commits: every update of the batch waits that much longer (``None``: not applied yet)."""
    if visible_after_s is None:
        return Delays(None, None, 0, logged.clock_skew)
    shift = (lambda d: None if d is None else d + visible_after_s)  # noqa: E731
    return Delays(shift(logged.avg_s), shift(logged.p99_s), logged.measured, logged.clock_skew)


def run_delays(batches: Iterable[Delays]) -> Delays:
    """A run's delays from its batches': the average weighted by the updates measured, the worst
    batch's p99, the clock skew summed."""
    batches = list(batches)
    timed = [b for b in batches if b.avg_s is not None and b.measured]
    measured = sum(b.measured for b in timed)
    return Delays(
        sum(b.avg_s * b.measured for b in timed) / measured if measured else None,
        max((b.p99_s for b in batches if b.p99_s is not None), default=None),
        measured,
        sum(b.clock_skew for b in batches),
    )


def describe(avg_s: float | None, p99_s: float | None, clock_skew: int = 0) -> str | None:
    """The run report's words for its delays (``None``: nothing to say)."""
    skew = (f"{clock_skew} update{'s' if clock_skew != 1 else ''} with arrival after commit: clock skew, left out"
            if clock_skew else "")
    if avg_s is None:
        return f"none measured ({skew})" if skew else None
    p99 = f", p99 {p99_s:.1f} s" if p99_s is not None else ""
    return f"avg {avg_s:.1f} s{p99}" + (f" ({skew})" if skew else "")
