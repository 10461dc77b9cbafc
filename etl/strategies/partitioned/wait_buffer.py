"""The wait buffer: tuples of segments that are not resident wait here until their segment is
probed. It is in memory, as the thesis's wait buffer is in join memory: each part a view of its
step's batch, which the strategy holds as a local checkpoint (the executors' block stores; the
driver holds their list), and nothing of it is written: every tuple it holds is also a row of the run's
``ingested_updates``, and after a restart the policy's replay names the same tuples again (each
pending segment's rows since the step it began to wait, ``restore``). A durable copy cost a Delta
append on every step's delay path and a delete at the run's end (issue 46).

One part per step that had waiting tuples; a part is dropped once each of its segments has been
probed since, and the parts are folded into one when they grow many. A dropped part's rows stay
in memory as long as a release not yet committed reads them (its plan holds the checkpoint), and
Spark's cleaner frees them after that."""

from __future__ import annotations

from functools import reduce
from typing import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core.faults import crash_point
from etl.transforms.columns import ints_in

# Parts kept side by side before they are folded into one (a union of hundreds of checkpoints
# is slow to plan; folding is one Spark job over rows already in memory).
MAX_PARTS = 16
NEVER_PROBED = -(2**31)  # the last probe step of a segment no probe has read


class WaitBuffer:
    def __init__(self, columns: list[str]) -> None:
        self.columns = columns
        self.parts: list[tuple[int, frozenset[int], DataFrame]] = []  # (last step held, segments, rows)

    def append(self, tuples: DataFrame, step: int, segments) -> None:
        """The step's waiting tuples (with ``segment_id``) of ``segments``: a view of the step's
        batch, held in memory by the strategy (a copy of its own cost a Spark job every step)."""
        rows = tuples.select(*self.columns, F.lit(step).alias("batch_index"), "segment_id")
        self.parts.append((step, frozenset(segments), rows))
        crash_point("partitioned.wait_buffer_appended")

    def restore(self, ingested: DataFrame, pending_since: Mapping[int, int], last_step: int) -> None:
        """After a restart: ``ingested`` (the run's rows with ``batch_index`` = step and
        ``segment_id``) of the done steps, the last ``last_step``; each pending segment's rows from
        ``pending_since``."""
        self.release()
        if not pending_since:
            return
        # From its step on: after the step before it (steps are whole numbers).
        rows = ingested.where(pending_condition(sorted(pending_since), {s: t - 1 for s, t in pending_since.items()}))
        rows = rows.select(*self.columns, "batch_index", "segment_id").localCheckpoint(eager=True)
        self.parts = [(last_step, frozenset(pending_since), rows)]

    def pending(self, due: list[int], last_probe_step: Mapping[int, int]) -> DataFrame | None:
        """The still-pending tuples of the segments ``due``: held since their last probe. ``None``
        when no part holds any."""
        wanted = set(due)
        parts = [rows for _, segments, rows in self.parts if segments & wanted]
        if not parts:
            return None
        rows = reduce(lambda a, b: a.unionByName(b), parts)
        return rows.where(pending_condition(due, last_probe_step)).select(*self.columns)

    def forget_released(self, last_probe_step: Mapping[int, int]) -> None:
        """Drop the parts whose every segment has been probed since."""
        kept = []
        for step, segments, rows in self.parts:
            left = frozenset(s for s in segments if last_probe_step.get(s, NEVER_PROBED) < step)
            if left:
                kept.append((step, left, rows))
        if len(kept) > MAX_PARTS:
            segments = frozenset().union(*(s for _, s, _ in kept))
            last = max(step for step, _, _ in kept)
            due = sorted(segments)
            folded = reduce(lambda a, b: a.unionByName(b), [rows for _, _, rows in kept])
            folded = folded.where(pending_condition(due, last_probe_step))
            kept = [(last, segments, folded.localCheckpoint(eager=True))]
        self.parts = kept

    def release(self) -> None:
        """The run is flushed (or taken up again): its tuples are garbage."""
        self.parts = []


def pending_condition(due: list[int], last_probe_step: Mapping[int, int]):
    """Rows of ``due`` held after their segment's last probe. One term per distinct last-probe
    step, not per segment: an OR nested once per segment overflowed the JVM's stack in Catalyst
    when a full buffer released hundreds of segments at once (found at 20 million keys, 1,024
    segments)."""
    by_step: dict[int, list[int]] = {}
    for s in due:
        by_step.setdefault(last_probe_step.get(s, NEVER_PROBED), []).append(s)
    terms = [ints_in("segment_id", segs) & (F.col("batch_index") > step) for step, segs in sorted(by_step.items())]
    while len(terms) > 1:  # a balanced OR: depth log2(terms)
        terms = [terms[i] | terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]
