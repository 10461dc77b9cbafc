"""Which records of a Kafka topic a run reads: per partition a range of offsets, decided once and
recorded (pure Python; ``etl.io.kafka`` asks the broker and reads, docs/sources.md says it for users).

A piece ``[a, b)`` of a run (the whole run, or one of the always-on loader's pieces) is decided at
its first ingest and never again: it reads exactly its recorded ranges from then on, and a
partition or topic that appears later is read by a later piece. A new piece reads, per partition,
``[start, end)`` where

- ``start`` is where the recorded range before it ended. A partition with no range at all while
  the warehouse has read this source (the partition or topic appeared since: its records,
  whatever their timestamps, are in no range) starts at its beginning. Otherwise (the source's
  first piece, or a backfill before the partition's first range) at the first offset timestamped
  at or after ``a``;
- ``end`` is where the recorded range after it starts; with none, the first offset timestamped at
  or after ``b``, or the partition's end when there is none yet.

So two ranges never share an offset nor leave one out between them, whatever order runs ran in,
and a record that arrives late (its timestamp in a piece already decided) is read by the next
piece. Offsets the broker deleted before any range read them (retention) cannot be read: the
piece starts after them and reports them as skipped. A topic that does not exist when a piece is
decided is recorded as absent (``kafka:<topic>:absent``), so the source counts as read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

PREFIX = "kafka:"
ABSENT = "absent"
_TOPIC = r"([A-Za-z0-9._-]{1,249})"
_NAME = re.compile(PREFIX + _TOPIC + r":([0-9]+):([0-9]+)-([0-9]+)")
_ABSENT = re.compile(PREFIX + _TOPIC + ":" + ABSENT)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def name(self) -> str:
        """Its ``landed_files.file_name``: the record that makes a run's input immutable."""
        return f"{PREFIX}{self.topic}:{self.partition}:{self.start}-{self.end}"

    @property
    def records(self) -> int:
        return self.end - self.start

    @classmethod
    def parse(cls, name: str) -> "OffsetRange | None":
        """The range a ``landed_files`` name records; ``None`` for anything else."""
        m = _NAME.fullmatch(name)
        return cls(m[1], int(m[2]), int(m[3]), int(m[4])) if m else None


def absent_name(topic: str) -> str:
    """The ``landed_files`` name recording that ``topic`` did not exist when a piece was decided."""
    return f"{PREFIX}{topic}:{ABSENT}"


_LOST = re.compile(PREFIX + _TOPIC + r":([0-9]+):([0-9]+)-([0-9]+):lost")
_PIECE_END = re.compile(PREFIX + r"piece-end:([0-9]+)")


def lost_name(skip: "Skip") -> str:
    """The ``landed_files`` name recording offsets a piece found deleted unread: a rerun of the
    piece says the loss again instead of a summary that forgot it."""
    return f"{skip.name}:lost"


def parse_lost(name: str) -> tuple[str, int, int, int] | None:
    """``(topic, partition, start, end)`` of a lost-offsets record, or ``None``."""
    m = _LOST.fullmatch(name)
    return (m[1], int(m[2]), int(m[3]), int(m[4])) if m else None


def piece_end_name(end: datetime) -> str:
    """The ``landed_files`` name recording where a piece ended: a whole run read again keeps each
    record in the minutes of the piece that decided it, the last piece included (a stream stopped
    mid-run ended its last piece before the run's end)."""
    return f"{PREFIX}piece-end:{(end - _EPOCH) // timedelta(microseconds=1)}"


def parse_piece_end(name: str) -> datetime | None:
    m = _PIECE_END.fullmatch(name)
    return _EPOCH + timedelta(microseconds=int(m[1])) if m else None


def is_range(name: str) -> bool:
    """A Kafka entry of ``landed_files`` (a range or an absent topic), not a landing file."""
    return name.startswith(PREFIX)


@dataclass(frozen=True)
class Recorded:
    """What a piece starting at ``piece_start`` recorded of ``topic``: a range of one of its
    partitions, or (``range`` None) that the topic did not exist then."""

    piece_start: datetime
    topic: str
    range: OffsetRange | None = None

    @classmethod
    def parse(cls, piece_start: datetime, name: str) -> "Recorded | None":
        rng = OffsetRange.parse(name)
        if rng is not None:
            return cls(piece_start, rng.topic, rng)
        m = _ABSENT.fullmatch(name)
        return cls(piece_start, m[1]) if m else None

    @property
    def name(self) -> str:
        return self.range.name if self.range else absent_name(self.topic)


@dataclass(frozen=True)
class PartitionNow:
    """What the broker says of one partition while a piece is decided."""

    begin: int  # the log start offset: the records before it were deleted (retention, DeleteRecords)
    end: int  # the next record's offset
    at_a: int | None = None  # the first offset timestamped at or after a; None: none that late yet
    at_b: int | None = None


class OffsetsWentBack(ValueError):
    """A partition ends before offsets a recorded range reached: the topic was deleted and
    created again (its offsets start over), so chaining to the recorded ranges would skip it all."""


@dataclass(frozen=True)
class Skip:
    """Offsets ``[start, end)`` of a partition no range will ever read."""

    topic: str
    partition: int
    start: int
    end: int
    why: str

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.topic}:{self.partition}:{self.start}-{self.end}"


def plan(topic: str, partition: int, a: datetime, recorded: list[Recorded], now: PartitionNow,
         source_read: bool) -> tuple[OffsetRange, Skip | None]:
    """The range of a new piece starting at ``a`` (rules in the module's docstring), and the
    offsets before it that retention deleted unread, if any."""
    mine = [r for r in recorded if r.range and r.topic == topic and r.range.partition == partition]
    assert all(r.piece_start != a for r in mine), "a decided piece is reused, not planned"
    earlier = [r.range.end for r in mine if r.piece_start < a]
    later = [r.range.start for r in mine if r.piece_start > a]
    bound = min(later) if later else None  # where the next recorded range of the partition starts
    if earlier:
        start = max(earlier)
        if now.end < start:
            raise OffsetsWentBack(
                f"{PREFIX}{topic}:{partition} ends at offset {now.end}, before offset {start} that a recorded "
                f"range reached: the topic was deleted and created again")
    elif source_read and not mine:
        start = 0  # appeared after the source was first read (no range anywhere): all of it is unread
    else:
        start = now.end if now.at_a is None else now.at_a
    skip = None
    first_held = now.begin if bound is None else min(now.begin, bound)
    if (earlier or (source_read and not mine)) and first_held > start:
        why = "deleted by the broker (retention) before any run read them"
        skip = Skip(topic, partition, start, first_held, why if earlier else why + ": the partition or topic "
                                                                           "appeared after the source was first read")
        start = first_held
    if later and now.end < bound:
        raise OffsetsWentBack(
            f"{PREFIX}{topic}:{partition} ends at offset {now.end}, before offset {bound} where a recorded range "
            f"starts: the topic was deleted and created again")
    end = bound if later else (now.end if now.at_b is None else now.at_b)
    if later:
        start = min(start, end)
    return OffsetRange(topic, partition, start, max(start, end)), skip


# The two names a ``landed_files`` row of another piece is read as, for Spark's regexp_extract
# only: anchored as Java anchors the whole input (``\\z``; its ``$`` also matches before a final
# line break, which Python's fullmatch does not).
RANGE_PATTERN = "^" + _NAME.pattern + r"\z"
ABSENT_PATTERN = "^" + _ABSENT.pattern + r"\z"


@dataclass(frozen=True)
class Neighbours:
    """What the other pieces recorded of one partition, as far as a new piece starting at ``a``
    needs it: the furthest offset a range before ``a`` reached (and the latest such piece's start),
    the first offset a range after ``a`` starts at (and the earliest such piece's start), and a
    range of another piece starting at ``a`` itself (runs never overlap, so there is none; kept so
    that ``plan`` refuses it as it refuses the whole list)."""

    topic: str
    partition: int
    before_at: datetime | None = None
    before_end: int | None = None
    after_at: datetime | None = None
    after_start: int | None = None
    same_at: datetime | None = None
    same_end: int | None = None

    def recorded(self) -> list[Recorded]:
        """As records ``plan`` reads (it reads the end of those before ``a``, the start of those after)."""
        def at(when: datetime | None, offset: int | None) -> list[Recorded]:
            return [] if when is None else [Recorded(when, self.topic, OffsetRange(self.topic, self.partition, offset, offset))]
        return at(self.before_at, self.before_end) + at(self.same_at, self.same_end) + at(self.after_at, self.after_start)


def neighbours(others: list[Recorded], a: datetime) -> list[Recorded]:
    """``others`` reduced to what planning a piece starting at ``a`` reads of them (``plan`` and
    ``source_read`` give the same answers): per partition one record before ``a`` and one after,
    per topic with no range one record (it was recorded as absent). A stream's pieces add up over
    months; this is as long as the topics' partitions, and ``etl.io.kafka.recorded_ranges``
    computes it in Spark instead of collecting every range ever recorded into the driver."""
    parts: dict[tuple[str, int], Neighbours] = {}
    topics: dict[str, datetime] = {}  # each topic's first piece
    for r in others:
        topics[r.topic] = min(topics.get(r.topic, r.piece_start), r.piece_start)
        if r.range is None:
            continue
        n = parts.get((r.topic, r.range.partition)) or Neighbours(r.topic, r.range.partition)
        if r.piece_start < a:
            n = replace(n, before_at=max(filter(None, (n.before_at, r.piece_start))),
                        before_end=max(n.before_end or 0, r.range.end))
        elif r.piece_start > a:
            n = replace(n, after_at=min(filter(None, (n.after_at, r.piece_start))),
                        after_start=r.range.start if n.after_start is None else min(n.after_start, r.range.start))
        else:
            n = replace(n, same_at=a, same_end=max(n.same_end or 0, r.range.end))
        parts[(r.topic, r.range.partition)] = n
    return with_rangeless_topics([rec for n in parts.values() for rec in n.recorded()], topics)


def carried_forward(reduced: list[Recorded], a: datetime, written: list[Recorded], b: datetime) -> list[Recorded] | None:
    """What ``neighbours`` gives every piece from ``b`` on, from ``reduced`` (the neighbours of a
    piece ``[a, b)``) and the records that piece wrote (``written``, each at or after ``a`` and
    before ``b``): the always-on loader plans its next piece without reading ``landed_files``
    again. ``None`` when ``reduced`` holds a range at or after ``a``: it stands for several records
    (the earliest start of those after ``a``), and a later piece needs the ones it stood for."""
    if any(r.range is not None and r.piece_start >= a for r in reduced):
        return None
    if any(not a <= r.piece_start < b for r in written):
        raise ValueError(f"records written at {sorted({r.piece_start for r in written})} are not of the piece [{a}, {b})")
    return neighbours(reduced + written, b)


def with_rangeless_topics(reduced: list[Recorded], first_piece: dict[str, datetime]) -> list[Recorded]:
    """``reduced`` (partitions' neighbours) with one record for each topic of ``first_piece`` (a
    topic's first recorded piece) that has no range among them: recorded only as absent, it still
    counts for ``source_read``."""
    seen = {r.topic for r in reduced}
    return reduced + [Recorded(at, t) for t, at in first_piece.items() if t not in seen]


def source_read(topics: tuple[str, ...] | list[str], others: list[Recorded]) -> bool:
    """Whether any other piece, earlier or later, recorded one of a source's topics: a partition
    with no range anywhere then appeared since, and is read from its beginning."""
    return any(r.topic in topics for r in others)


@dataclass
class PiecePlan:
    """What one piece reads of one topic: its ranges, or nothing (``absent``: the topic did not
    exist), offsets no range will read, and partitions it leaves to later pieces."""

    ranges: list[OffsetRange] = field(default_factory=list)
    absent: bool = False
    skips: list[Skip] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # names of partitions/topics read by a later piece


def plan_topic(topic: str, a: datetime, own: list[Recorded], others: list[Recorded],
               partitions: dict[int, PartitionNow] | None, source_read: bool, decided: bool) -> PiecePlan:
    """One topic of a piece starting at ``a``. ``own``: what this piece recorded of the topic
    already; ``others``: what other pieces recorded; ``partitions``: the broker's partitions now
    (None: the topic does not exist); ``source_read``: another piece, earlier or later, has
    recorded this source's topics; ``decided``: the piece was ingested or loaded before (its
    input is fixed)."""
    out = PiecePlan()
    if own or decided:
        out.ranges = [r.range for r in own if r.range]
        out.absent = any(r.range is None for r in own)
        taken = {r.partition for r in out.ranges}
        for p in sorted(set(partitions or ()) - taken):
            out.left.append(f"{PREFIX}{topic}:{p}")
        return out
    if partitions is None:
        out.absent = True
        return out
    for p, now in sorted(partitions.items()):
        rng, skip = plan(topic, p, a, others, now, source_read)
        out.ranges.append(rng)
        if skip:
            out.skips.append(skip)
    return out
