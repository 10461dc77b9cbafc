from datetime import datetime, timedelta, timezone

import pytest

from etl.core.interval import Interval, overlapping, parse_minute

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)


def test_overlapping_runs_share_a_minute():
    run = Interval(T0, T0 + timedelta(minutes=5))
    keys = ["20261122T0055-20261122T0100", "20261122T0104-20261122T0110", run.run_key, "20261122T0100-20261122T0101", "not-a-run"]
    assert overlapping(run, keys) == ["20261122T0100-20261122T0101", "20261122T0104-20261122T0110"]


def test_a_minute_must_be_whole():
    assert parse_minute("2026-11-22T01:05") == T0 + timedelta(minutes=5)
    with pytest.raises(ValueError, match="whole minute"):
        parse_minute("2026-11-22T01:05:30")
