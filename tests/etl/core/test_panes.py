"""Windows built from panes equal windows computed update by update (papers/003)."""

import random

import pytest

from etl.core.panes import (
    Pane,
    bucket_upper_s,
    delay_bucket,
    fitted_windows,
    interval_totals,
    iso_utc,
    pane_of,
    pane_seconds,
    percentile_from_histogram,
    window_metrics,
    windows,
)


def test_windows_are_half_open_aligned_and_cover_the_interval():
    assert windows(3600, 7200, 1800, 900) == [(2700, 4500), (3600, 5400), (4500, 6300), (5400, 7200), (6300, 8100)]
    assert windows(0, 60, 60, 60) == [(0, 60)]  # a window ending at start is left out: half-open


def test_pane_is_the_gcd():
    assert pane_seconds(3600, 900) == 900
    assert pane_seconds(600, 240) == 120
    assert pane_of(119.9, 60) == 60 and pane_of(120, 60) == 120


@pytest.mark.parametrize("range_s, slide_s", [(600, 600), (600, 240), (900, 300), (300, 120)])
def test_pane_combined_windows_equal_brute_force(range_s, slide_s):
    rng = random.Random(range_s * 7 + slide_s)
    start, end = 10_000 * 60, 10_000 * 60 + 3600
    events = [
        (rng.choice("ab"), rng.uniform(start - 700, end), rng.choice(["matched", "new", "duplicate", "stale", "rejected"]), rng.expovariate(0.2))
        for _ in range(3000)
    ]
    p = pane_seconds(range_s, slide_s)
    panes: dict = {}
    for source, ts, outcome, delay in events:
        pane = panes.setdefault((source, pane_of(ts, p)), Pane())
        pane.add(Pane(counts={"updates": 1, outcome: 1}))
        if outcome != "rejected":
            pane.add(Pane(delay_sum_s=delay, delay_n=1, delay_max_s=delay, histogram={delay_bucket(delay): 1}))
    rows = window_metrics(panes, start, end, range_s, slide_s)
    assert len(rows) == 2 * len(windows(start, end, range_s, slide_s))
    for row in rows:
        inside = [e for e in events if e[0] == row["source_id"] and row["window_start"] <= e[1] < row["window_end"]]
        assert row["updates"] == len(inside)
        assert row["duplicate"] == sum(e[2] == "duplicate" for e in inside)
        assert row["rejected_rate"] == pytest.approx(sum(e[2] == "rejected" for e in inside) / len(inside))
        delays = sorted(e[3] for e in inside if e[2] != "rejected")
        assert row["delay_avg_s"] == pytest.approx(sum(delays) / len(delays))
        assert row["delay_max_s"] == pytest.approx(max(delays))
        exact_p99 = delays[max(0, int(0.99 * len(delays) + 0.999999) - 1)]
        assert exact_p99 <= row["delay_p99_s"] <= exact_p99 * 2 ** (1 / 8) + 1e-3  # within one bucket


def test_histogram_percentile_and_buckets():
    assert percentile_from_histogram({}, 0.99) is None
    assert delay_bucket(0.0) == 0  # under a millisecond
    for delay in (0.002, 0.5, 3.0, 70.0, 4000.0):
        assert delay <= bucket_upper_s(delay_bucket(delay)) <= delay * 2 ** (1 / 8) + 1e-9


def test_clock_skew_is_counted_per_window_and_in_no_delay():
    """Updates that arrived after their batch's commit come as a pane's clock_skew, with no delay:
    a window's average, p99 and maximum are the other updates'; a window of only those has none."""
    panes = {
        ("crm", 0): Pane(counts={"updates": 3, "new": 3}, delay_sum_s=30.0, delay_n=2, delay_max_s=20.0,
                         histogram={delay_bucket(10.0): 1, delay_bucket(20.0): 1}, clock_skew=1),
        ("crm", 60): Pane(counts={"updates": 2, "matched": 2}, clock_skew=2),
    }
    rows = {r["window_start"]: r for r in window_metrics(panes, 0, 120, 60, 60)}
    assert (rows[0]["updates"], rows[0]["clock_skew"], rows[0]["delay_avg_s"], rows[0]["delay_max_s"]) == (3, 1, 15.0, 20.0)
    assert 20.0 <= rows[0]["delay_p99_s"] <= 20.0 * 2 ** (1 / 8)
    assert (rows[60]["updates"], rows[60]["clock_skew"], rows[60]["delay_avg_s"], rows[60]["delay_p99_s"],
            rows[60]["delay_max_s"]) == (2, 2, None, None, None)
    assert interval_totals(panes) == {"updates": 5, "matched": 2, "new": 3, "duplicate": 0, "stale": 0,
                                      "rejected": 0, "clock_skew": 3}
    assert interval_totals({k: p for k, p in panes.items() if k[1] >= 60})["clock_skew"] == 2


def test_a_p99_read_from_a_bucket_is_never_above_the_window_s_maximum():
    """The bucket's upper bound of one delay of 1534.6 s is ~1617 s: the report showed a p99 above
    the maximum (issue 45)."""
    pane = Pane(counts={"updates": 1}, delay_sum_s=1534.6, delay_n=1, delay_max_s=1534.6, histogram={delay_bucket(1534.6): 1})
    assert percentile_from_histogram(pane.histogram, 0.99) > 1534.6
    (row,) = window_metrics({("crm", 0): pane}, 0, 60, 60, 60)
    assert row["delay_p99_s"] == row["delay_max_s"] == 1534.6


@pytest.mark.parametrize("start_min, minutes, width_min", [
    (14 * 60 + 25, 5, 1),  # the demo's 5 minutes: one point a minute
    (10 * 60, 20, 4),  # 10:00-10:20: five windows of 4 minutes
    (14 * 60 + 10, 20, 2),  # 14:10-14:30: 4-minute windows would start at 14:08; ten of 2 minutes
    (14 * 60 + 3, 7, 1),  # 7 minutes: seven of one
    (0, 2, 1),  # never under a minute
])
def test_a_report_over_an_interval_shorter_than_a_window_tiles_it_with_tumbling_windows(start_min, minutes, width_min):
    start, end = 1795305600 + start_min * 60, 1795305600 + (start_min + minutes) * 60  # 2026-11-22 00:00 UTC + ...
    assert fitted_windows(start, end, 3600, 900) == (width_min * 60, width_min * 60)
    spans = windows(start, end, *fitted_windows(start, end, 3600, 900))
    assert spans[0][0] == start and spans[-1][1] == end and len(spans) >= min(5, minutes)  # no window past the interval


def test_the_daily_report_keeps_its_configured_windows():
    assert fitted_windows(0, 86400, 3600, 900) == (3600, 900)
    assert iso_utc(1795000000) == "2026-11-18T11:06:40Z"
