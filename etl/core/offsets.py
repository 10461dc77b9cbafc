"""Which records of a Kafka partition a run reads: a range of offsets, decided once and recorded
(pure Python; ``etl.io.kafka`` asks the broker and reads, docs/sources.md says it for users).

A run (or a piece of one, for the always-on loader) ``[a, b)`` reads, per partition, the offsets
``[start, end)`` where ``start`` is where the recorded range before it ended and ``end`` where the
recorded range after it starts; with no recorded neighbour, the first offset whose timestamp is at
or after ``a`` (``b``), or the partition's end when there is none yet. Recorded ranges are never
decided again: a rerun, a retry or a backfill reads exactly the records it read before, and two
ranges never share an offset nor leave one out between them, whatever order the runs ran in. A
record that arrives late (its timestamp in a run that has recorded its range) goes to the next
range: read once, never lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

PREFIX = "kafka:"
_NAME = re.compile(r"kafka:([A-Za-z0-9._-]{1,249}):([0-9]+):([0-9]+)-([0-9]+)")


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
        """The range a ``landed_files`` name records; ``None`` for a landing file's name."""
        m = _NAME.fullmatch(name)
        return cls(m[1], int(m[2]), int(m[3]), int(m[4])) if m else None


def is_range(name: str) -> bool:
    return name.startswith(PREFIX)


@dataclass(frozen=True)
class Recorded:
    """A range some run (or piece) recorded, with the start of its interval."""

    piece_start: datetime
    range: OffsetRange


def plan(topic: str, partition: int, a: datetime, recorded: list[Recorded], at_a: int | None, at_b: int | None,
         end_offset: int) -> OffsetRange:
    """The range of ``[a, b)`` given the partition's other recorded ranges, the first offsets at or
    after ``a`` and ``b`` (``None``: no record that late yet) and the partition's end offset."""
    mine = [r for r in recorded if r.range.topic == topic and r.range.partition == partition]
    assert all(r.piece_start != a for r in mine), "a recorded range of the same interval is reused, not planned"
    earlier = [r.range.end for r in mine if r.piece_start < a]
    later = [r.range.start for r in mine if r.piece_start > a]
    start = max(earlier) if earlier else (end_offset if at_a is None else at_a)
    end = min(later) if later else (end_offset if at_b is None else at_b)
    start = min(start, end) if later else start
    return OffsetRange(topic, partition, start, max(start, end))
