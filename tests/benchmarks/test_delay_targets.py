"""Issue 46's targets table (benchmarks.report.delay_targets): read from results in the shapes the
three benchmarks write, pure."""

import pytest

from benchmarks.report import delay_targets, delay_targets_markdown

KAFKA = {"command": "python -m benchmarks.stream_live --kafka ...", "stream": {"rate": 10.0}, "runs": [
    {"mode": "baseline:kafka", "delay_avg_s": 20.0, "visible_delay_avg_s": 20.0},
    {"mode": "stream:native:piece_seconds=2:micro_batch_seconds=10:stream_grace_seconds=1", "delay_avg_s": 9.0,
     "visible_delay_avg_s": 30.0, "stopped_at_deadline": False},
    {"mode": "stream:native:piece_seconds=2:micro_batch_seconds=20", "delay_avg_s": 15.0, "visible_delay_avg_s": 40.0},
    {"mode": "stream:partitioned-range:micro_batch_seconds=10:sizes=derived", "delay_avg_s": 8.0,
     "visible_delay_avg_s": 9.0, "stopped_at_deadline": True},  # behind: its delays cover only what it loaded
]}
MINUTES = {"command": "python -m benchmarks.stream_live ...", "stream": {"rate": 10.0}, "runs": [
    {"mode": "stream:native:apply_interval_seconds=30", "delay_avg_s": 48.7, "visible_delay_avg_s": 86.4},
    {"mode": "stream:partitioned-range:apply_interval_seconds=30", "delay_avg_s": 78.0, "visible_delay_avg_s": 105.2},
]}


def piece(updates=0, step=(0.3, 0, 0), merge=None):
    p = {"ingest_pieces": [2.5, 7, 3, 1], "Loader.load_ready": [*step, 1]}
    if updates:
        p["released"] = [float(updates), 0, 0, 1]
    if merge:
        p["CommitProtocol.apply"] = [*merge, 1]
    return p


FULL = {"command": "python -m benchmarks.stream_piece --keys 20000000 ...", "stream": {"rate": 1000.0, "skew": "thesis"},
        "runs": [{"strategy": "partitioned-range", "pieces_raw": [
            piece(), piece(10_000, (3.5, 8, 1)), piece(),
            piece(20_000, (30.0, 32, 3), merge=(25.0, 24, 2)),  # a step the MERGE pair fell in: 5 s, 8 jobs, 1 commit of its own
            piece(30_000, (6.0, 12, 1)),
            piece(90_000, (190.0, 60, 5)),  # the run's last piece: its flush and last apply, not a step
        ], "coalesced_applies": [{"batches": 3, "updates": 75_000, "seconds": 25.0, "jobs": 24, "commits": 2},
                                 {"batches": 3, "updates": 100_000, "seconds": 100.0, "jobs": 24, "commits": 2}]}]}


def test_each_target_is_read_from_its_benchmark_s_result_and_judged_against_its_bound():
    kafka, minutes, full = delay_targets({"kafka": KAFKA, "minute_files": MINUTES, "full_size": FULL})
    assert kafka["baseline_delay_avg_s"] == 20.0
    by_mode = {m["mode"]: m for m in kafka["measured"]}
    ten = by_mode["native, 10-s windows of 2-s pieces"]
    assert (ten["ratio_to_baseline"], ten["met_ratio"], ten["met_bound"]) == (0.45, True, True)
    assert (by_mode["native, 20-s windows of 2-s pieces"]["met_ratio"], by_mode["native, 20-s windows of 2-s pieces"]["met_bound"]) == (True, False)
    # a mode stopped at its deadline meets nothing, however short the delays of what it loaded
    assert (by_mode["partitioned-range, 10-s windows, derived sizes"]["met_ratio"],
            by_mode["partitioned-range, 10-s windows, derived sizes"]["met_bound"]) == (False, False)
    assert [m["met"] for m in minutes["measured"]] == [True, False]
    (m,) = full["measured"]
    # the flush piece is left out; the MERGE pair is taken out of the step it fell in
    assert (m["released_steps"], m["step_updates_median"], m["step_seconds_median"], m["step_jobs_median"],
            m["step_commits_median"]) == (3, 20_000, 5.0, 8, 1)
    assert not m["met_step"]  # 5 s: above the 4-s bound
    # the run's last apply is its end's; 75,000 updates at 1,000/s are 75 s of arrivals: 25 s -> 20 s per 60 s
    assert m["merge_pair_per_60_s_median"] == pytest.approx(20.0) and m["met_merge_pair"]
    table = delay_targets_markdown([kafka, minutes, full])
    assert table.count("\n") == 4 and "native, 20-s windows of 2-s pieces: ratio yes, 10 s no" in table
    assert "3 releasing steps, median 20000 updates, 5.0 s, 8 jobs, 1 commits" in table


def test_a_benchmark_not_run_leaves_its_row_out():
    assert [r["target"] for r in delay_targets({"minute_files": MINUTES})] == ["minute_files"]


def test_a_step_with_the_merge_pair_beside_it_is_not_charged_the_time_it_waited_for_that_apply():
    """apply_concurrently: the apply's calls, made in its own thread, are recorded apart
    (``CommitProtocol.apply (beside)``); the step is not charged the time it waited for them at its
    end, but keeps the jobs and commits the session counted meanwhile (its own and the apply's:
    they cannot be told apart)."""
    step = piece(20_000, (9.0, 30, 3))
    step["CommitProtocol.apply (beside)"] = [12.0, 20, 2, 1]
    step["CommitProtocol.finish_apply"] = [4.0, 0, 0, 1]
    run = {"strategy": "partitioned-range", "pieces_raw": [piece(), step, piece(30_000, (190.0, 60, 5))],
           "coalesced_applies": [{"batches": 3, "updates": 60_000, "seconds": 12.0, "jobs": 20, "commits": 2,
                                  "beside": True}, {"batches": 1, "updates": 30_000, "seconds": 50.0}]}
    (_, _, full) = delay_targets({"kafka": KAFKA, "minute_files": MINUTES, "full_size": {**FULL, "runs": [run]}})
    (m,) = full["measured"]
    assert (m["step_seconds_median"], m["step_jobs_median"], m["step_commits_median"]) == (5.0, 30, 3)
    assert m["merge_pair_per_60_s_median"] == pytest.approx(12.0) and m["met_merge_pair"]


def test_a_mode_s_label_names_its_window_sizes_and_wait_bound():
    from benchmarks.report import _mode_label

    assert _mode_label("stream:partitioned-range:piece_seconds=2:micro_batch_seconds=5:sizes=derived:max_wait_s=5") == (
        "partitioned-range, 5-s windows of 2-s pieces, derived sizes, a 5-s wait bound")
    assert _mode_label("stream:native:micro_batch_seconds=10:max_wait_s=0") == "native, 10-s windows"
    assert _mode_label("baseline:kafka") == "hand-written baseline"
    assert _mode_label("stream:partitioned-range:micro_batch_seconds=5:memory_budget=41943040") == (
        "partitioned-range, 5-s windows, 40 MB of join memory")


def test_writing_the_table_again_keeps_the_minutes_of_the_benchmarks_not_run_now(tmp_path):
    import json

    from benchmarks.delay_targets import write_table

    (tmp_path / "targets.json").write_text(json.dumps({"minutes": {"full_size": 7.7, "kafka": 23.0}}))
    write_table(tmp_path, {"kafka": 28.0 * 60})
    assert json.loads((tmp_path / "targets.json").read_text())["minutes"] == {"full_size": 7.7, "kafka": 28.0}
    write_table(tmp_path)  # --table-only
    assert json.loads((tmp_path / "targets.json").read_text())["minutes"] == {"full_size": 7.7, "kafka": 28.0}
