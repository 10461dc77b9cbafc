"""The Spark benchmark's arithmetic, without Spark: the replay that turns measured batch times into
production delays and "sustained", the cross-strategy ratios of issue 6's targets, and the run
specifications. A wrong number here would be a wrong published result."""

import json
import math
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from benchmarks import report as bench
from etl.core.interval import Interval

T = 60
START = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
FOUR_WINDOWS = Interval(START, START + timedelta(seconds=4 * T))


def metric(index, duration, seq=None):
    return SimpleNamespace(batch_index=index, batch_seq=seq if seq is not None else index + 10, duration_s=duration)


def outcome(index, arrival_s):
    return SimpleNamespace(batch_index=index, arrival_ts=START + timedelta(seconds=arrival_s))


def test_a_batch_starts_when_its_window_closes_and_an_update_waits_for_its_finish():
    got = bench.replay([metric(0, 10), metric(1, 10), metric(2, 10), metric(3, 10)],
                       [outcome(0, 15), outcome(3, 200)], FOUR_WINDOWS, T)
    # Window 0 closes at 60 s, its batch finishes at 70: 55 s for an update of second 15;
    # window 3 closes at 240, finishes at 250: 50 s for one of second 200.
    assert got["avg_delay_s"] == pytest.approx((55 + 50) / 2)
    assert got["batch_seconds"] == 40
    assert got["final_lag_s"] == 10
    assert got["sustained"] is True


def test_a_slow_batch_delays_the_next_one_and_a_run_longer_than_the_stream_is_not_sustained():
    got = bench.replay([metric(0, 100), metric(1, 100), metric(2, 100)],
                       [outcome(1, 70)], Interval(START, START + timedelta(seconds=3 * T)), T)
    # Batch 0: 60 -> 160; batch 1 ready at 120 but starts at 160 -> 260; batch 2: 260 -> 360.
    assert got["avg_delay_s"] == pytest.approx(260 - 70)
    assert got["final_lag_s"] == pytest.approx(360 - 180)
    assert got["sustained"] is False  # 300 s of batches for 180 s of stream


def test_a_block_batch_waits_for_its_last_window_and_the_flush_for_the_end_of_the_run():
    metrics = [metric(0, 30), metric(-1, 20, seq=99)]
    got = bench.replay(metrics, [outcome(0, 10), outcome(-1, 10)], FOUR_WINDOWS, T, last_window={0: 2})
    # The block of windows 0-2 is complete at 180 s (not 60), done at 210; the flush starts at
    # the run's end (240) and is done at 260.
    assert got["avg_delay_s"] == pytest.approx(((210 - 10) + (260 - 10)) / 2)


def test_no_outcomes_give_no_delay_rather_than_an_error():
    got = bench.replay([metric(0, 5)], [], FOUR_WINDOWS, T)
    assert math.isnan(got["avg_delay_s"]) and math.isnan(got["p99_delay_s"])


def row(delay, mb, capacity, sustained=True, **extra):
    return {"avg_delay_s": delay, "p99_delay_s": 2 * delay, "keymap_bytes_per_1000_updates": mb * 1e6, "capacity_updates_per_s": capacity,
            "sustained": sustained, **extra}


def test_the_targets_are_the_ratios_of_each_range_run_to_meshjoin_native_and_belady():
    report = {"results": {"200": {
        "native": row(300.0, 130.0, 150.0, sustained=False),
        "meshjoin": row(900.0, 12.0, 380.0),
        "partitioned-range": row(225.0, 6.5, 600.0, fetches_over_belady=0.125),
        "partitioned-range:h_mark=48000": row(90.0, 13.0, 300.0, fetches_over_belady=0.5),
        "identical_outcomes": True,
    }}}
    bench.summarise(report)
    assert report["targets"] == {"200": {
        "partitioned-range": {"delay_over_meshjoin": 0.25, "bytes_over_native": 0.05,
                              "fetches_over_belady": 0.125, "capacity_over_native": 4.0,
                              "batch_seconds_over_handwritten": None},
        "partitioned-range:h_mark=48000": {"delay_over_meshjoin": 0.1, "bytes_over_native": 0.1,
                                           "fetches_over_belady": 0.5, "capacity_over_native": 2.0,
                                           "batch_seconds_over_handwritten": None},
    }}
    assert report["highest_sustained_rate"] == {"native": 0.0, "meshjoin": 200.0, "partitioned-range": 200.0,
                                                "partitioned-range:h_mark=48000": 200.0}
    assert report["capacity_range_over_native"] == 4.0


def test_the_hand_written_baseline_is_timed_beside_the_strategies_and_not_compared_by_outcomes(tmp_path):
    """Its whole batch time on the same stream is the denominator of issue 26's targets; it keeps
    no outcome per update, so it has no digest and no key_map bytes, and neither is asked of it."""
    digest = {"rows": 3, "sum_xxhash64": "1"}
    report = {"command": "x", "keys": 10, "key_map_bytes": {"range": 100}, "memory_budget": 10,
              "micro_batch_seconds": T, "minutes": 4, "wall_seconds": 60.0, "results": {"200": {
                  "handwritten": {"avg_delay_s": 40.0, "p99_delay_s": 80.0, "capacity_updates_per_s": 400.0,
                                  "sustained": True, "batch_seconds": 60.0},
                  "native": row(300.0, 130.0, 150.0, batch_seconds=120.0, outcome_digest=digest),
                  "partitioned-range": row(225.0, 6.5, 600.0, batch_seconds=30.0, outcome_digest=dict(digest)),
              }}}
    assert bench.run_labels(report["results"]["200"]) == ["native", "partitioned-range", "handwritten"]
    assert bench.identical_outcomes(report["results"]["200"])
    bench.summarise(report)
    assert report["batch_seconds_over_handwritten"] == {"200": {"native": 2.0, "partitioned-range": 0.5}}
    assert report["targets"]["200"]["partitioned-range"]["batch_seconds_over_handwritten"] == 0.5
    bench.write_report(report, tmp_path / "r.json")
    assert "| 200 | handwritten | 40.0 | 80.0 | 400 | yes |  |  |" in (tmp_path / "r.md").read_text()


def test_a_ratio_against_a_strategy_that_did_not_run_is_none_not_a_huge_number():
    report = {"results": {"200": {"partitioned-range": row(225.0, 6.5, 600.0), "identical_outcomes": True}}}
    bench.summarise(report)
    assert report["targets"]["200"]["partitioned-range"]["bytes_over_native"] is None
    assert report["targets"]["200"]["partitioned-range"]["delay_over_meshjoin"] is None
    assert report["capacity_range_over_native"] is None


def test_the_highest_sustained_rate_is_over_every_rate_of_the_report():
    report = {"results": {
        "66": {"native": row(100.0, 130.0, 70.0, sustained=True), "partitioned-range": row(60.0, 5.0, 300.0)},
        "200": {"native": row(300.0, 130.0, 150.0, sustained=False), "partitioned-range": row(225.0, 6.5, 600.0)},
    }}
    bench.summarise(report)
    assert report["highest_sustained_rate"] == {"native": 66.0, "partitioned-range": 200.0}


@pytest.mark.parametrize("spec, want", [
    ("native", ("native", {})),
    ("handwritten", ("handwritten", {})),
    ("partitioned-range:max_wait_s=180", ("partitioned-range", {"max_wait_s": 180.0})),
    (" partitioned-hash:h_mark=48000", ("partitioned-hash", {"h_mark": 48000})),
    ("native:deletion_vectors=off", ("native", {"deletion_vectors": "off"})),
    ("partitioned-range:n_invoke=1:apply_interval_seconds=60",
     ("partitioned-range", {"n_invoke": 1, "apply_interval_seconds": 60.0})),
])
def test_a_run_is_a_strategy_with_its_settings_changed(spec, want):
    assert bench.parse_run(spec) == want


@pytest.mark.parametrize("spec, says", [
    ("nativ", "unknown strategy"),
    ("handwritten:h_mark=3", "takes no settings"),
    ("partitioned-range:tau=3", "name one of"),
    ("partitioned-range:h_mark", "name one of"),
    ("partitioned-range:h_mark=lots", "not a valid int"),
    ("native:deletion_vectors=false", "not a valid deletion_vectors"),
])
def test_a_bad_run_is_refused_with_what_is_wrong(spec, says):
    with pytest.raises(SystemExit, match=says):
        bench.parse_run(spec)


def test_runs_are_reported_plain_strategies_first_in_the_products_order():
    per_rate = {"partitioned-range:max_wait_s=180.0": {}, "partitioned-range": {}, "identical_outcomes": True,
                "native": {}, "meshjoin": {}}
    assert bench.run_labels(per_rate) == ["native", "meshjoin", "partitioned-range", "partitioned-range:max_wait_s=180.0"]


def test_a_report_is_written_where_it_was_asked_for_with_its_table_and_plot_beside_it(tmp_path):
    report = {"command": "x", "keys": 10, "key_map_bytes": {"range": 100}, "memory_budget": 10,
              "micro_batch_seconds": T, "minutes": 4, "wall_seconds": 60.0,
              "results": {"10": {"native": row(30.0, 1.0, 20.0, updates=100, probes=0),
                                 "identical_outcomes": True}}}
    bench.summarise(report)
    bench.write_report(report, tmp_path / "strategies-full-32min.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "strategies-full-32min.json", "strategies-full-32min.md", "strategies-full-32min.png"]
    assert json.loads((tmp_path / "strategies-full-32min.json").read_text())["results"]["10"]["native"]["avg_delay_s"] == 30.0


def test_identical_outcomes_compares_the_canonical_digests_not_the_counts():
    same = {"rows": 3, "sum_xxhash64": "123"}
    counts = {"matched": 1, "new": 2, "duplicate": 0, "stale": 0}
    agree = {"native": {"outcomes": counts, "outcome_digest": same},
             "meshjoin": {"outcomes": counts, "outcome_digest": dict(same)}, "identical_outcomes": None}
    assert bench.identical_outcomes(agree)
    # The same counts, other decisions (one update matched to another key): not identical.
    agree["meshjoin"]["outcome_digest"] = {"rows": 3, "sum_xxhash64": "124"}
    assert not bench.identical_outcomes(agree)
    # A run without a digest (a report older than digests) proves nothing.
    assert not bench.identical_outcomes({"native": {"outcomes": counts}, "meshjoin": {"outcomes": counts}})


def test_the_partitioned_settings_scale_with_one_window_of_arrivals_and_keep_their_floors():
    assert bench.partitioned_settings(1000, 20) == {"wait_buffer_tuples": 20_000, "n_invoke": 2_500, "tau": 10_000}
    assert bench.partitioned_settings(200, 60) == {"wait_buffer_tuples": 12_000, "n_invoke": 1_500, "tau": 6_000}
    assert bench.partitioned_settings(1, 30) == {"wait_buffer_tuples": 100, "n_invoke": 12, "tau": 50}
