"""Production delay and clock skew (etl.core.delays): an arrival after its batch's commit (a
replayed or mis-clocked producer) has no delay, is counted apart and is in no average or p99."""

from datetime import datetime, timezone

import pytest

from etl.core.delays import Arrivals, Delays, batch_delays, describe, production_delay_s, run_delays

COMMIT = datetime(2026, 11, 22, 1, 5, tzinfo=timezone.utc).timestamp()
# A producer whose clock ran 108 days ahead: the run summary used to say -9,365,301 s.
FUTURE = datetime(2027, 3, 10, 10, 20, tzinfo=timezone.utc).timestamp()


def test_an_arrival_after_the_commit_has_no_delay():
    assert production_delay_s(COMMIT, COMMIT - 12.5) == 12.5
    assert production_delay_s(COMMIT, COMMIT) == 0.0
    assert production_delay_s(COMMIT, COMMIT + 0.001) is None
    assert production_delay_s(COMMIT, FUTURE) is None


def test_a_batch_leaves_its_clock_skew_out_of_its_delays():
    arrivals = Arrivals(cut_s=COMMIT - 3, by_cut=97, avg_s=COMMIT - 20, p01_s=COMMIT - 40, after_cut=3, first_after_cut_s=FUTURE)
    assert arrivals.split_as_at(COMMIT)
    assert batch_delays(COMMIT, arrivals) == Delays(avg_s=20.0, p99_s=40.0, measured=97, clock_skew=3)
    all_skewed = Arrivals(COMMIT - 3, 0, None, None, 5, FUTURE)
    assert batch_delays(COMMIT, all_skewed) == Delays(None, None, 0, 5)
    assert batch_delays(COMMIT, Arrivals(COMMIT - 0.5, 10, COMMIT - 1, COMMIT - 2, 0, None)) == Delays(1.0, 2.0, 10, 0)


def test_an_arrival_between_the_cut_and_the_commit_asks_for_the_split_at_the_commit():
    """The batch's pass splits the arrivals at its start, before the commit: an arrival between the
    two is not clock skew by the definition, so the split is taken again at the commit."""
    between = Arrivals(COMMIT - 3, by_cut=10, avg_s=COMMIT - 5, p01_s=COMMIT - 9, after_cut=1, first_after_cut_s=COMMIT - 0.5)
    assert not between.split_as_at(COMMIT)
    with pytest.raises(AssertionError):
        batch_delays(COMMIT, between)
    assert not Arrivals(COMMIT + 1, 10, COMMIT - 5, COMMIT - 9, 0, None).split_as_at(COMMIT)  # the wall clock set back


def test_a_run_weighs_its_batches_by_the_updates_measured():
    batches = [Delays(10.0, 30.0, 90, 10), Delays(40.0, 50.0, 10, 0), Delays(None, None, 0, 4), Delays(None, None, 0, 0)]
    assert run_delays(batches) == Delays(avg_s=13.0, p99_s=50.0, measured=100, clock_skew=14)
    assert run_delays([]) == Delays(None, None, 0, 0)


def test_the_run_report_says_how_many_updates_were_left_out():
    assert describe(12.34, 40.06, 3) == "avg 12.3 s, p99 40.1 s (3 updates with arrival after commit: clock skew, left out)"
    assert describe(12.34, 40.06, 1) == "avg 12.3 s, p99 40.1 s (1 update with arrival after commit: clock skew, left out)"
    assert describe(12.34, 40.06) == "avg 12.3 s, p99 40.1 s"
    assert describe(None, None, 2) == "none measured (2 updates with arrival after commit: clock skew, left out)"
    assert describe(None, None, 0) is None
