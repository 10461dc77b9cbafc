"""The durable wait buffer: tuples of segments that are not resident wait here, in the
``wait_buffer`` table, until their segment is probed. Only the first step a load submits can be a
replay of a step whose append committed before a crash (each step's ledger row is written before
the next step starts), so only that append looks for its rows first; the others are plain appends
(a Delta ``txnVersion`` on every one cost 0.77 s per step). The run's rows are dropped in one
commit when it ends."""

from __future__ import annotations

from typing import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core.faults import crash_point
from etl.strategies.base import update_columns


class WaitBuffer:
    def __init__(self, tables, run_key: str) -> None:
        self.tables = tables
        self.run_key = run_key
        self.columns = update_columns(tables.entity)
        self._may_replay = True  # until this buffer's first append

    def append(self, tuples: DataFrame, step: int) -> None:
        """The step's waiting tuples (with ``segment_id``), once per step."""
        if self._may_replay:
            self._may_replay = False
            if self._rows().where(F.col("batch_index") == step).limit(1).count():
                return  # appended by the attempt that crashed
        rows = tuples.select(F.lit(self.run_key).alias("run_key"), *self.columns, F.lit(step).alias("batch_index"), "segment_id")
        self.tables.append(rows, "wait_buffer")
        crash_point("partitioned.wait_buffer_appended")

    def _rows(self) -> DataFrame:
        return self.tables.read("wait_buffer").where(F.col("run_key") == self.run_key)

    def pending(self, due: list[int], last_probe_step: Mapping[int, int]) -> DataFrame:
        """The still-pending tuples of the segments ``due``: appended after their last probe."""
        rows = self._rows().where(F.col("segment_id").isin(due))
        return rows.where(pending_condition(due, last_probe_step)).select(*self.columns)

    def release(self) -> None:
        """The run is flushed: its rows are garbage; drop them in one commit."""
        self.tables.delete_where("wait_buffer", f"run_key = '{self.run_key}'")
        crash_point("partitioned.wait_buffer_released")


def pending_condition(due: list[int], last_probe_step: Mapping[int, int]):
    """Rows of ``due`` appended after their segment's last probe. One term per distinct last-probe
    step, not per segment: an OR nested once per segment overflowed the JVM's stack in Catalyst
    when a full buffer released hundreds of segments at once (found at 20 million keys, 1,024
    segments)."""
    by_step: dict[int, list[int]] = {}
    for s in due:
        by_step.setdefault(last_probe_step.get(s, -(2**31)), []).append(s)
    terms = [F.col("segment_id").isin(sorted(segs)) & (F.col("batch_index") > step) for step, segs in sorted(by_step.items())]
    while len(terms) > 1:  # a balanced OR: depth log2(terms)
        terms = [terms[i] | terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]
