"""The offset ranges runs read from a Kafka partition: chained to recorded neighbours, so runs in
any order read every offset exactly once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from etl.core.offsets import OffsetRange, Recorded, is_range, plan

T = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
M = timedelta(minutes=1)


def rec(minute: int, start: int, end: int, topic="t", partition=0) -> Recorded:
    return Recorded(T + minute * M, OffsetRange(topic, partition, start, end))


def test_a_range_names_itself_and_parses_back():
    r = OffsetRange("crm.public.customers", 3, 10, 25)
    assert r.name == "kafka:crm.public.customers:3:10-25" and is_range(r.name)
    assert OffsetRange.parse(r.name) == r and r.records == 15
    assert OffsetRange.parse("source_id=crm/arrival_date=2026-11-22/arrival_hour=10/updates-20261122T1000.jsonl") is None


def test_without_neighbours_the_range_is_the_records_timestamped_in_the_interval():
    assert plan("t", 0, T, [], 5, 9, 12) == OffsetRange("t", 0, 5, 9)
    assert plan("t", 0, T, [], 5, None, 12) == OffsetRange("t", 0, 5, 12)  # nothing that late yet: up to the end
    assert plan("t", 0, T, [], None, None, 12) == OffsetRange("t", 0, 12, 12)  # nothing in it yet


def test_a_range_starts_where_the_recorded_one_before_it_ended():
    # The run before took everything up to 9 (the end of the log then); records 9..11 came later
    # with timestamps of that run: they are this run's, not lost.
    assert plan("t", 0, T + M, [rec(0, 0, 9)], 12, 15, 20) == OffsetRange("t", 0, 9, 15)


def test_a_range_ends_where_the_recorded_one_after_it_starts():
    # A backfill of an earlier interval after the later one ran.
    assert plan("t", 0, T, [rec(1, 7, 15)], 3, 9, 20) == OffsetRange("t", 0, 3, 7)
    # Between two recorded ranges: exactly the gap, whatever the timestamps say.
    assert plan("t", 0, T + M, [rec(0, 0, 5), rec(2, 8, 12)], 2, 10, 20) == OffsetRange("t", 0, 5, 8)
    # The later run took this interval's records already (it chained from the earlier one): nothing left.
    assert plan("t", 0, T + M, [rec(0, 0, 5), rec(2, 5, 12)], 6, 9, 20) == OffsetRange("t", 0, 5, 5)


def test_other_partitions_and_topics_are_not_neighbours():
    assert plan("t", 0, T + M, [rec(0, 0, 50, partition=1), rec(0, 0, 60, topic="u")], 4, 8, 9) == OffsetRange("t", 0, 4, 8)


def test_runs_in_any_order_read_every_offset_once():
    import itertools
    import random

    rnd = random.Random(3)
    stamps = sorted(rnd.randint(0, 5 * 60) for _ in range(40))  # seconds after T, per offset
    for order in itertools.permutations(range(5)):
        recorded = []
        for i in order:
            a, b = T + i * M, T + (i + 1) * M
            at = lambda t: next((o for o, s in enumerate(stamps) if T + timedelta(seconds=s) >= t), None)  # noqa: E731
            recorded.append(Recorded(a, plan("t", 0, a, recorded, at(a), at(b), len(stamps))))
        covered = sorted(o for r in recorded for o in range(r.range.start, r.range.end))
        assert covered == list(range(len(stamps))), order
