"""Sliding windows from panes (papers/003, "No pane, no gain"), as pure Python.

A window of ``range_s`` seconds every ``slide_s`` seconds is the union of consecutive panes of
``gcd(range_s, slide_s)`` seconds, so each update is aggregated once, into its pane (in Spark),
and each window sums its panes (here, on a few hundred small rows). Windows and panes are
half-open, ``[start, end)``, aligned to the Unix epoch, so a report over any interval uses the same
windows as any other report that covers them.

Aggregates are counts and sums (distributive) plus a delay histogram with 8 buckets per doubling
(also distributive), from which a window's p99 is read to within 9% (and never above the
window's maximum). Updates that arrived after their batch's commit have no delay
(``etl.core.delays``): counted as ``clock_skew``, in no delay.

The interval's own totals are not read from panes: a pane may straddle the interval's bounds (a
5-minute run inside a 15-minute pane), so the report aggregates the part of each pane inside
the interval apart (``interval_totals``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone

BUCKETS_PER_DOUBLING = 8
COUNTS = ("updates", "matched", "new", "duplicate", "stale", "rejected")


def pane_seconds(range_s: int, slide_s: int) -> int:
    return math.gcd(range_s, slide_s)


def fitted_windows(start_s: int, end_s: int, range_s: int, slide_s: int) -> tuple[int, int]:
    """The windows a report over ``[start_s, end_s)`` uses: the configured ones, unless the
    interval is shorter than a window; then tumbling windows of whole minutes that tile the
    interval exactly (windows are aligned to the epoch), the widest giving at least five (a
    5-minute run: one a minute, not four identical hour-long windows)."""
    if end_s - start_s >= range_s:
        return range_s, slide_s
    minutes = (end_s - start_s) // 60
    for width in range(minutes // 5, 1, -1):
        if minutes % width == 0 and start_s % (width * 60) == 0:
            return width * 60, width * 60
    return 60, 60


def iso_utc(ts_s: int) -> str:
    return datetime.fromtimestamp(ts_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pane_of(ts_s: float, pane_s: int) -> int:
    """Start (epoch seconds) of the pane holding ``ts_s``."""
    return int(math.floor(ts_s / pane_s)) * pane_s


def windows(start_s: int, end_s: int, range_s: int, slide_s: int) -> list[tuple[int, int]]:
    """Every window ``[ws, ws+range_s)`` with ``ws`` a multiple of ``slide_s`` that overlaps ``[start_s, end_s)``."""
    first = (math.floor((start_s - range_s) / slide_s) + 1) * slide_s
    return [(ws, ws + range_s) for ws in range(first, end_s, slide_s) if ws + range_s > start_s]


def delay_bucket(delay_s: float) -> int:
    """Histogram bucket of a delay: 8 per doubling of milliseconds (bucket 0: under 1 ms)."""
    ms = max(delay_s * 1000.0, 1.0)
    return int(math.floor(BUCKETS_PER_DOUBLING * math.log2(ms)))


def bucket_upper_s(bucket: int) -> float:
    return 2 ** ((bucket + 1) / BUCKETS_PER_DOUBLING) / 1000.0


@dataclass
class Pane:
    counts: dict[str, int] = field(default_factory=dict)
    delay_sum_s: float = 0.0
    delay_n: int = 0
    delay_max_s: float | None = None
    histogram: dict[int, int] = field(default_factory=dict)
    clock_skew: int = 0  # updates without a delay: arrived after their batch's commit

    def add(self, other: "Pane") -> None:
        for k, v in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        self.delay_sum_s += other.delay_sum_s
        self.delay_n += other.delay_n
        if other.delay_max_s is not None:
            self.delay_max_s = max(self.delay_max_s or 0.0, other.delay_max_s)
        for b, n in other.histogram.items():
            self.histogram[b] = self.histogram.get(b, 0) + n
        self.clock_skew += other.clock_skew


def percentile_from_histogram(histogram: dict[int, int], q: float) -> float | None:
    total = sum(histogram.values())
    if not total:
        return None
    need = q * total
    seen = 0
    for b in sorted(histogram):
        seen += histogram[b]
        if seen >= need:
            return bucket_upper_s(b)
    return bucket_upper_s(max(histogram))


def window_metrics(panes: dict[tuple[str, int], Pane], start_s: int, end_s: int, range_s: int, slide_s: int) -> list[dict]:
    """One row per (source, window): counts, rates over all updates, delay average, p99 and max
    (over the updates that have a delay), and the clock skew left out of them."""
    sources = sorted({s for s, _ in panes})
    rows = []
    for ws, we in windows(start_s, end_s, range_s, slide_s):
        for source in sources:
            acc = Pane()
            for (s, p), pane in panes.items():
                if s == source and ws <= p < we:
                    acc.add(pane)
            n = acc.counts.get("updates", 0)
            p99 = percentile_from_histogram(acc.histogram, 0.99)
            rows.append(
                {
                    "source_id": source,
                    "window_start": ws,
                    "window_end": we,
                    "complete": start_s <= ws and we <= end_s,
                    **{k: acc.counts.get(k, 0) for k in COUNTS},
                    "duplicate_rate": acc.counts.get("duplicate", 0) / n if n else None,
                    "new_key_rate": acc.counts.get("new", 0) / n if n else None,
                    "rejected_rate": acc.counts.get("rejected", 0) / n if n else None,
                    "delay_avg_s": acc.delay_sum_s / acc.delay_n if acc.delay_n else None,
                    # The bucket's upper bound may lie above every delay of the window.
                    "delay_p99_s": min(p99, acc.delay_max_s) if p99 is not None and acc.delay_max_s is not None else p99,
                    "delay_max_s": acc.delay_max_s,
                    "clock_skew": acc.clock_skew,
                }
            )
    return rows


def interval_totals(inside: dict[tuple[str, int], Pane]) -> dict[str, int]:
    """The interval's counts (``COUNTS``, and the updates with clock skew), each update once: the
    sums of the panes' parts inside the interval."""
    totals = {k: 0 for k in (*COUNTS, "clock_skew")}
    for pane in inside.values():
        for k in COUNTS:
            totals[k] += pane.counts.get(k, 0)
        totals["clock_skew"] += pane.clock_skew
    return totals
