"""The offset ranges runs read from Kafka: each offset in exactly one range, whatever order runs,
reruns, new partitions, new topics, late records and retention come in; a decided run never reads
anything new. A small broker in Python stands in for the partitions' offsets and timestamps (the
real broker's are exercised in tests/etl/test_kafka_sources.py)."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta, timezone

import pytest

from etl.core.offsets import (
    OffsetRange,
    OffsetsWentBack,
    PartitionNow,
    Recorded,
    absent_name,
    carried_forward,
    is_range,
    neighbours,
    plan,
    plan_topic,
    source_read,
)

T = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
M = timedelta(minutes=1)


def rec(minute: int, start: int, end: int, topic="t", partition=0) -> Recorded:
    return Recorded(T + minute * M, topic, OffsetRange(topic, partition, start, end))


def now(at_a, at_b, end, begin=0) -> PartitionNow:
    return PartitionNow(begin, end, at_a, at_b)


def test_a_range_names_itself_and_parses_back():
    r = OffsetRange("crm.public.customers", 3, 10, 25)
    assert r.name == "kafka:crm.public.customers:3:10-25" and is_range(r.name)
    assert OffsetRange.parse(r.name) == r and r.records == 15
    assert OffsetRange.parse("source_id=crm/arrival_date=2026-11-22/arrival_hour=10/updates-20261122T1000.jsonl") is None
    assert Recorded.parse(T, r.name) == Recorded(T, "crm.public.customers", r)
    assert Recorded.parse(T, absent_name("crm.public.customers")) == Recorded(T, "crm.public.customers")
    assert Recorded.parse(T, "kafka:t:absent").name == "kafka:t:absent" and OffsetRange.parse("kafka:t:absent") is None


def test_the_first_piece_of_a_source_reads_the_records_timestamped_in_it():
    assert plan("t", 0, T, [], now(5, 9, 12), False) == (OffsetRange("t", 0, 5, 9), None)
    assert plan("t", 0, T, [], now(5, None, 12), False)[0] == OffsetRange("t", 0, 5, 12)  # nothing that late yet
    assert plan("t", 0, T, [], now(None, None, 12), False)[0] == OffsetRange("t", 0, 12, 12)  # nothing in it yet


def test_a_range_starts_where_the_recorded_one_before_it_ended():
    # Records 9..11 came after the run before had read up to 9, timestamped in that run: this run's.
    assert plan("t", 0, T + M, [rec(0, 0, 9)], now(12, 15, 20), True)[0] == OffsetRange("t", 0, 9, 15)


def test_a_range_ends_where_the_recorded_one_after_it_starts():
    assert plan("t", 0, T, [rec(1, 7, 15)], now(3, 9, 20), False)[0] == OffsetRange("t", 0, 3, 7)  # a backfill
    assert plan("t", 0, T + M, [rec(0, 0, 5), rec(2, 8, 12)], now(2, 10, 20), True)[0] == OffsetRange("t", 0, 5, 8)
    assert plan("t", 0, T + M, [rec(0, 0, 5), rec(2, 5, 12)], now(6, 9, 20), True)[0] == OffsetRange("t", 0, 5, 5)


def test_other_partitions_and_topics_are_not_neighbours():
    got = plan("t", 0, T + M, [rec(0, 0, 50, partition=1), rec(0, 0, 60, topic="u")], now(4, 8, 9), False)[0]
    assert got == OffsetRange("t", 0, 4, 8)


def test_a_partition_that_appeared_after_the_source_was_read_starts_at_its_beginning():
    # The outside probe's case: I1 read t:0 [0, 13); then t got a second partition, whose first
    # record is timestamped inside I1. I2 must read it (offset 0), not start at offsetsForTimes(I2).
    got = plan("t", 1, T + M, [rec(0, 0, 13)], now(1, None, 2), source_read=True)
    assert got == (OffsetRange("t", 1, 0, 2), None)


def test_offsets_deleted_before_any_range_read_them_are_reported_and_skipped():
    rng, skip = plan("t", 0, T + M, [rec(0, 0, 13)], now(20, None, 30, begin=17), True)
    assert rng == OffsetRange("t", 0, 17, 30) and (skip.start, skip.end) == (13, 17) and "retention" in skip.why
    rng, skip = plan("t", 1, T + M, [rec(0, 0, 13)], now(5, None, 9, begin=4), True)  # a new partition, trimmed
    assert rng == OffsetRange("t", 1, 4, 9) and (skip.start, skip.end) == (0, 4)


def test_a_partition_whose_offsets_went_back_is_refused():
    with pytest.raises(OffsetsWentBack, match="deleted and created again"):
        plan("t", 0, T + M, [rec(0, 0, 13)], now(0, None, 2), True)


def test_a_decided_piece_reads_exactly_its_records_and_leaves_new_partitions_to_later_pieces():
    own = [rec(0, 0, 13)]
    got = plan_topic("t", T, own, [], {0: now(0, None, 14), 1: now(0, None, 2)}, True, decided=True)
    assert got.ranges == [OffsetRange("t", 0, 0, 13)] and got.left == ["kafka:t:1"] and not got.absent
    # A run that loaded before its topic existed: recorded as absent, and stays so.
    got = plan_topic("u", T, [Recorded(T, "u")], [], {0: now(0, None, 3)}, True, decided=True)
    assert got.ranges == [] and got.absent and got.left == ["kafka:u:0"]
    # Loaded by a version that recorded nothing of the topic: nothing new either.
    got = plan_topic("u", T, [], [], {0: now(0, None, 3)}, True, decided=True)
    assert got.ranges == [] and got.left == ["kafka:u:0"]
    got = plan_topic("u", T, [], [], None, False, decided=False)
    assert got.absent and got.ranges == []


# --------------------------------------------------------------------------- a broker in Python


class Broker:
    """Partitions as lists of record timestamps, a log start offset each."""

    def __init__(self) -> None:
        self.topics: dict[str, list[list[datetime]]] = {}
        self.begins: dict[tuple[str, int], int] = {}

    def create(self, topic: str, partitions: int = 1) -> None:
        self.topics.setdefault(topic, [])
        while len(self.topics[topic]) < partitions:
            self.topics[topic].append([])

    def produce(self, topic: str, partition: int, ts: datetime) -> None:
        self.topics[topic][partition].append(ts)

    def now(self, topic: str, a: datetime, b: datetime) -> dict[int, PartitionNow] | None:
        if topic not in self.topics:
            return None

        def first_at(stamps, begin, t):  # offsetsForTimes: the first offset still held timestamped at or after t
            return next((o for o, s in enumerate(stamps) if o >= begin and s >= t), None)

        begins = {p: self.begins.get((topic, p), 0) for p in range(len(self.topics[topic]))}
        return {p: PartitionNow(begins[p], len(s), first_at(s, begins[p], a), first_at(s, begins[p], b))
                for p, s in enumerate(self.topics[topic])}


class Warehouse:
    """What runs record in ``landed_files``, and which runs have loaded: plan_ranges in Python."""

    def __init__(self, broker: Broker, topics=("t", "u")) -> None:
        self.broker, self.source_topics = broker, topics
        self.recorded: dict[int, list[Recorded]] = {}
        self.loaded: set[int] = set()
        self.skips: list = []

    def run(self, i: int) -> list[str]:
        a, b = T + i * M, T + (i + 1) * M
        own = self.recorded.get(i, [])
        everything = [r for j, rs in self.recorded.items() if j != i for r in rs]
        others = neighbours(everything, a)  # what etl.io.kafka reads of them (recorded_ranges)
        assert source_read(self.source_topics, others) == source_read(self.source_topics, everything)
        decided = bool(own) or i in self.loaded
        read_before = source_read(self.source_topics, others)  # the rule plan_ranges uses
        out = []
        for topic in self.source_topics:
            piece = plan_topic(topic, a, [r for r in own if r.topic == topic], others, self.broker.now(topic, a, b),
                               read_before, decided)
            assert piece == plan_topic(topic, a, [r for r in own if r.topic == topic], everything,
                                       self.broker.now(topic, a, b), read_before, decided)
            out += [Recorded(a, topic, r) for r in piece.ranges] + ([Recorded(a, topic)] if piece.absent else [])
            self.skips += piece.skips
        if own:
            assert sorted(r.name for r in out) == sorted(r.name for r in own), "a rerun reads what its first run read"
        self.recorded[i] = out
        self.loaded.add(i)
        return sorted(r.name for r in out)

    def assert_each_offset_in_exactly_one_range(self) -> None:
        for topic, partitions in self.broker.topics.items():
            for p, stamps in enumerate(partitions):
                ranges = [r.range for rs in self.recorded.values() for r in rs if r.range and r.range.topic == topic
                          and r.range.partition == p]
                read = sorted(o for r in ranges for o in range(r.start, r.end))
                # An offset retention deleted before a range held it is read by none; the piece that
                # would have read it reports it when it can tell (it chains from a range before, or
                # the partition is new), possibly more than one piece. Every other offset: read once.
                skipped = {o for s in self.skips if s.topic == topic and s.partition == p for o in range(s.start, s.end)}
                deleted = set(range(self.broker.begins.get((topic, p), 0)))
                assert len(read) == len(set(read)), (topic, p, ranges)
                assert not skipped & set(read) and skipped <= deleted, (topic, p, ranges, self.skips)
                assert set(range(len(stamps))) - set(read) <= deleted, (topic, p, ranges, self.skips)


EVENTS = ("add partition t:1", "create topic u", "late record on t:1", "late record on u", "run I1", "run I2", "rerun I1")


@pytest.mark.parametrize("first", ["I0 read first", "I2 read first"])
def test_every_order_of_new_partitions_new_topics_late_records_and_reruns_reads_each_offset_once(first):
    for order in itertools.permutations(EVENTS):
        if order.index("late record on t:1") < order.index("add partition t:1"):
            continue
        if order.index("late record on u") < order.index("create topic u"):
            continue
        broker = Broker()
        broker.create("t")
        for s in (10, 70, 130, 150):  # on time, in I0..I2
            broker.produce("t", 0, T + timedelta(seconds=s))
        w = Warehouse(broker)
        w.run(0 if first == "I0 read first" else 2)
        broker.produce("t", 0, T + M + timedelta(seconds=5))  # late: timestamped in I1, maybe read already
        for event in order:
            kind, _, what = event.partition(" ")
            if event == "add partition t:1":
                broker.create("t", 2)
            elif event == "create topic u":
                broker.create("u")
            elif event.startswith("late record"):
                topic, _, p = what.rsplit(" ", 1)[1].partition(":")
                broker.produce(topic, int(p or 0), T + M + timedelta(seconds=5))  # timestamped in I1
            else:
                i = int(event[-1])
                before = w.recorded.get(i)
                names = w.run(i)
                if before is not None:
                    assert names == sorted(r.name for r in before), (order, event)
        for i in range(4):  # every interval run at least once, then one after every record
            w.run(i)
        w.assert_each_offset_in_exactly_one_range()


def test_random_histories_with_retention_read_each_offset_once_or_report_it():
    rnd = random.Random(43)
    for _ in range(400):
        broker = Broker()
        broker.create("t", rnd.randint(1, 2))
        w = Warehouse(broker)
        for _ in range(rnd.randint(5, 25)):
            roll = rnd.random()
            if roll < 0.45:
                topic = rnd.choice([t for t in ("t", "u") if t in broker.topics])
                p = rnd.randrange(len(broker.topics[topic]))
                broker.produce(topic, p, T + timedelta(seconds=rnd.randint(0, 6 * 60 - 1)))
            elif roll < 0.5:
                broker.create("t", len(broker.topics["t"]) + 1)
            elif roll < 0.55:
                broker.create("u", rnd.randint(1, 2))
            elif roll < 0.6:  # retention deletes a prefix, never records a recorded range holds
                topic = rnd.choice(list(broker.topics))
                p = rnd.randrange(len(broker.topics[topic]))
                old = broker.begins.get((topic, p), 0)
                held = [r.range.start for rs in w.recorded.values() for r in rs if r.range and r.range.topic == topic
                        and r.range.partition == p and r.range.records and r.range.end > old]
                wanted = rnd.randint(old, len(broker.topics[topic][p]))
                broker.begins[(topic, p)] = max(old, min([wanted, *held]))
            else:
                w.run(rnd.randrange(6))
        for i in range(7):
            w.run(i)
        w.assert_each_offset_in_exactly_one_range()


def test_a_partition_that_appeared_after_the_first_run_is_read_whole_by_a_backfill_too():
    """The outside review's order: I5 is the warehouse's first run; then t gets a partition whose
    first record is timestamped before I1; I1 is backfilled, then I6 runs. The new partition has no
    range anywhere, so whichever piece comes first reads it from its beginning: nothing waits for
    an I0 that may never be run."""
    broker = Broker()
    broker.create("t")
    broker.produce("t", 0, T + 5 * M + timedelta(seconds=1))
    w = Warehouse(broker, topics=("t",))
    w.run(5)
    broker.create("t", 2)
    broker.produce("t", 1, T + timedelta(seconds=30))  # timestamped in I0
    broker.produce("t", 1, T + M + timedelta(seconds=30))  # in I1
    assert "kafka:t:1:0-2" in w.run(1)
    w.run(6)
    w.assert_each_offset_in_exactly_one_range()


def test_markers_of_lost_offsets_and_piece_ends_name_themselves_and_are_no_ranges():
    from etl.core.offsets import Skip, lost_name, parse_lost, parse_piece_end, piece_end_name

    name = lost_name(Skip("t", 0, 13, 17, "deleted"))
    assert name == "kafka:t:0:13-17:lost" and parse_lost(name) == ("t", 0, 13, 17)
    assert OffsetRange.parse(name) is None and Recorded.parse(T, name) is None
    end = piece_end_name(T + 90 * M / 60)
    assert parse_piece_end(end) == T + timedelta(seconds=90) and Recorded.parse(T, end) is None


def test_a_backfill_before_a_range_the_partition_no_longer_reaches_is_refused():
    """The topic was recreated and holds fewer records than where a recorded range starts."""
    with pytest.raises(OffsetsWentBack, match="before offset 100 where a recorded range starts"):
        plan("t", 0, T, [rec(1, 100, 120)], now(2, None, 10), True)


def test_a_piece_is_planned_from_its_partitions_neighbours_alone_however_long_the_history():
    # A day of 2-s pieces on two partitions, with a backfill hole and a topic recorded as absent.
    history = [Recorded(T - M, "u")]
    offset = {0: 0, 1: 0}
    for piece in range(0, 43_200, 97):
        for p in (0, 1):
            n = piece % 5 + p
            history.append(Recorded(T + timedelta(seconds=2 * piece), "t", OffsetRange("t", p, offset[p], offset[p] + n)))
            offset[p] += n
    hole = T + timedelta(seconds=2 * 97 * 200 + 2)  # between two recorded pieces
    for a in (T - M, hole, T + timedelta(days=2)):
        reduced = neighbours(history, a)
        assert len(reduced) <= 5  # two a partition, one for the topic only ever absent
        for p in (0, 1):
            for current in (PartitionNow(0, offset[p], offset[p], offset[p]),  # all held
                            PartitionNow(offset[p] // 2, offset[p], None, None),  # retention took half
                            PartitionNow(0, 3, None, None)):  # the topic recreated: its offsets went back
                for read_before in (True, False):
                    try:
                        expected = plan("t", p, a, history, current, read_before)
                    except OffsetsWentBack as exc:
                        with pytest.raises(OffsetsWentBack, match=str(exc)):
                            plan("t", p, a, reduced, current, read_before)
                        continue
                    assert plan("t", p, a, reduced, current, read_before) == expected
        assert source_read(("u",), reduced) and source_read(("t",), reduced) and not source_read(("v",), reduced)
    # Another piece starting at a itself (overlapping runs, refused before planning) is refused by plan as before.
    with pytest.raises(AssertionError):
        plan("t", 0, T, neighbours(history, T), PartitionNow(0, offset[0], 0, 0), True)


def test_neighbours_carried_from_piece_to_piece_are_those_of_the_whole_history():
    # The always-on loader's pieces of 2 s, each writing a range per partition (empty ones too),
    # a topic absent at first: what it carries equals the neighbours of everything recorded.
    S = timedelta(seconds=2)
    history = [Recorded(T - M, "u"), rec(-3, 0, 5), rec(-3, 0, 2, partition=1)]
    offset = {0: 5, 1: 2}
    a = T
    carried = neighbours(history, a)
    for piece in range(40):
        written = []
        for p in (0, 1):
            n = (piece * (p + 1)) % 3
            written.append(Recorded(a, "t", OffsetRange("t", p, offset[p], offset[p] + n)))
            offset[p] += n
        if piece == 7:
            written.append(Recorded(a, "v"))  # a topic of the input that does not exist yet
        history += written
        carried = carried_forward(carried, a, written, a + S)
        a += S
        assert sorted(carried, key=repr) == sorted(neighbours(history, a), key=repr)
        assert len(carried) <= 4  # one a partition, one a topic only ever absent


def test_nothing_is_carried_past_a_range_recorded_after_the_piece():
    # Another run's range after the piece (a later interval loaded first): the neighbours stand
    # for it by its start alone, and the piece after needs its end.
    reduced = neighbours([rec(0, 0, 5), rec(10, 9, 12)], T + 2 * M)
    assert carried_forward(reduced, T + 2 * M, [rec(2, 5, 9)], T + 3 * M) is None
    with pytest.raises(ValueError, match="not of the piece"):
        carried_forward(neighbours([rec(0, 0, 5)], T + 2 * M), T + 2 * M, [rec(3, 5, 9)], T + 3 * M)
