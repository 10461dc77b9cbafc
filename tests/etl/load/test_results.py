"""A load's run summary (etl.load.results): the delays over the updates that have one, the clock
skew counted apart."""

from dataclasses import asdict

from etl.load.results import BatchResult, LoadResult, Step


def batch(index: int, updates: int, avg: float | None, p99: float | None, clock_skew: int = 0) -> BatchResult:
    return BatchResult("run", index, index, updates, {"new": updates}, updates, avg, p99, 1.0, clock_skew=clock_skew)


def test_the_run_summary_weighs_batches_by_their_measured_updates_and_sums_the_clock_skew():
    """A replayed source's batch: 3 of its 100 updates stamped after the commit."""
    result = LoadResult("run", "native", [batch(1, 100, 20.0, 40.0, clock_skew=3), batch(2, 3, 30.0, 35.0),
                                          batch(3, 2, None, None, clock_skew=2)])
    summary = result.summary()
    assert summary["delay_avg_s"] == (20.0 * 97 + 30.0 * 3) / 100
    assert (summary["delay_p99_s"], summary["clock_skew"], summary["updates_in"]) == (40.0, 5, 105)


def test_a_step_carries_its_clock_skew_into_its_result_and_an_older_state_reads_as_none():
    step = Step("run", 1, 7, "native", 100.0, 104.0, 1, updates_in=10, delay_avg_s=3.0, delay_p99_s=5.0, clock_skew=2)
    assert step.result().clock_skew == 2
    saved = asdict(batch(1, 10, 3.0, 5.0))
    del saved["clock_skew"]  # a stream's state saved before the field existed
    assert BatchResult(**saved).clock_skew == 0


def test_the_visible_delay_is_the_logged_one_plus_the_wait_for_the_entity_table_s_merge():
    """Issue 46: a batch's visible delays are its logged ones shifted by the time from its
    write-ahead commit to the entity table's MERGE; a batch not applied yet is in no visible
    delay and is counted, and a step that released nothing is no batch to wait for."""
    first, second, waiting = batch(1, 100, 2.0, 4.0), batch(2, 100, 6.0, 9.0), batch(3, 50, 1.0, 1.5)
    first.visible_s, second.visible_s = 30.0, 10.0
    nothing = BatchResult("run", 4, 0, 0, {}, 0, None, None, 0.5)
    summary = LoadResult("run", "native", [first, second, waiting, nothing]).summary()
    assert summary["delay_avg_s"] == (2.0 * 100 + 6.0 * 100 + 1.0 * 50) / 250
    assert summary["visible_delay_avg_s"] == (32.0 * 100 + 16.0 * 100) / 200
    assert (summary["visible_delay_p99_s"], summary["batches_visible_unknown"]) == (34.0, 1)
