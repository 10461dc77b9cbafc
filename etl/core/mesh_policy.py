"""MESHJOIN's decisions (papers/004 §6.2, Fig 6.2; Polyzotis et al. 2007), as pure Python.

The relation ``key_map`` is read cyclically in ``k`` disk segments; a step reads the next one and
joins it with every queued stream tuple; a queue segment expires once it has met all ``k`` disk
segments, and only then is an unmatched tuple known to be new.

Mapped onto micro-batches:

- a *slot* is one micro-batch interval of arrival time (``micro_batch_seconds``); slot ``t`` reads
  disk segment ``t mod k``, so the cycle position is a pure function of time and a restart knows
  exactly where the cycle stood;
- the micro-batch of slot ``j`` is one queue segment; it meets the disk segments of slots
  ``j .. j+k-1`` and expires at slot ``j+k-1``. Slots without arrivals still step the cycle (the
  wait of a quiet stream is bounded by ``k`` slots, and ``micro_batch_seconds`` sets it), so the
  queue never holds more than ``k`` segments;
- disk segments are contiguous runs of ``key_map``'s Delta partitions, balanced by rows, at least
  ``d`` bytes each (the thesis's read-buffer size) and at most ``k`` of them, fixed at run start.

The Spark mechanism (``etl/strategies/meshjoin.py``) evaluates ``meets`` as a column expression;
the functions here are its specification and are unit-tested in milliseconds.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Mapping, Sequence


def disk_segment_count(k: int, d: int, relation_bytes: int, partitions: int) -> int:
    """At most ``k`` disk segments, each at least ``d`` bytes, never more than there are partitions."""
    by_size = max(1, math.ceil(relation_bytes / d)) if d > 0 else k
    return max(1, min(k, by_size, max(1, partitions)))


def group_boundaries(partition_ids: Sequence[int], rows: Mapping[int, int], n_groups: int) -> list[int]:
    """First partition id of disk segments 1..n_groups-1: contiguous id ranges, balanced by rows.

    Ids outside ``partition_ids`` still fall into a segment (ranges cover every integer)."""
    ids = sorted(set(partition_ids))
    if n_groups <= 1 or len(ids) <= 1:
        return []
    n_groups = min(n_groups, len(ids))
    weights = [rows.get(i, 0) for i in ids]
    if sum(weights) == 0:  # an empty relation: split the ids evenly
        weights = [1] * len(ids)
    total = sum(weights)
    bounds: list[int] = []
    acc = 0.0
    for pos, (pid, w) in enumerate(zip(ids, weights)):
        left_ids = len(ids) - pos  # ids from here on, this one included
        left_cuts = n_groups - 1 - len(bounds)
        if pos > 0 and left_cuts > 0 and (acc >= total * (len(bounds) + 1) / n_groups or left_ids == left_cuts):
            bounds.append(pid)
        acc += w
    return bounds


def disk_segment_of(partition_id: int, boundaries: Sequence[int]) -> int:
    return bisect_right(boundaries, partition_id)


@dataclass(frozen=True)
class MeshSchedule:
    k: int  # disk segments per cycle = queue segments at most

    def positions(self, lo: int, hi: int) -> list[int]:
        """Disk segments read while stepping the slots ``(lo, hi]``."""
        if hi - lo >= self.k:
            return list(range(self.k))
        return sorted({t % self.k for t in range(lo + 1, hi + 1)})

    def meets(self, queued_at: int, lo: int, hi: int, position: int) -> bool:
        """Does the queue segment of slot ``queued_at`` meet disk segment ``position`` in ``(lo, hi]``?"""
        first = max(lo + 1, queued_at)
        length = min(hi, queued_at + self.k - 1) - first + 1
        return length > 0 and (position - first) % self.k < length

    def expires_by(self, queued_at: int) -> int:
        """The slot at which the queue segment of ``queued_at`` has met every disk segment."""
        return queued_at + self.k - 1

    def drain_until(self, queued: Sequence[int]) -> int:
        """The last slot ``flush`` must step so that every queued segment expires."""
        return max(self.expires_by(q) for q in queued)

    def cycle(self, slot: int) -> int:
        """Completed scans of the relation after stepping ``slot``."""
        return (slot + 1) // self.k
