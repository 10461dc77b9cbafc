"""The ledger: ``batch_ledger`` says which steps of which run are logged, the last ``batch_seq``
and the next surrogate key, and holds each step's measurements (``join_metrics`` is their view)
and its batch's outcomes (``outcome_log`` is their view). One row per step, appended once: logging
a batch, recording its step and its metrics is one commit, where they used to take three."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import NamedTuple

from pyspark.sql import functions as F

from etl.core.faults import crash_point
from etl.io.table_base import literal_row, row_frame
from etl.strategies import JoinStats
from warehouse.schemas import schemas


class LedgerFacts(NamedTuple):
    run_key: str | None
    state: tuple[int, int]  # (last committed batch_seq, next surrogate key)
    last_logged: dict | None  # the row of the last batch that logged updates
    run_rows: list[dict]  # the rows of ``run_key``


class Ledger:
    """The ledger as one loader sees it while it holds the load lock."""

    def __init__(self, tables) -> None:
        self.tables = tables
        self.spark = tables.spark
        self.cfg = tables.cfg
        self._state: tuple[int, int] | None = None
        self._facts: LedgerFacts | None = None

    def forget(self) -> None:
        """Others may have loaded since this loader last held the lock: read the state again."""
        self._state = self._facts = None

    def facts(self, run_key: str | None = None) -> "LedgerFacts":
        """What a load call that starts or resumes a run asks of the ledger before its first batch,
        in one aggregate (one Spark job): the state, the last logged batch and the rows of the run
        ``run_key``. Four reads before, ~0.4 s each on a small warm warehouse and seconds
        in a cold driver, paid by every scheduled run (issue 44). It scans every row, as the reads
        it replaces did; the always-on loader's steady calls ask only for the state and the run's
        rows, by narrower reads (``state``, ``rows``). Dropped when a row is appended or the lock
        is taken again."""
        if self._facts is None or self._facts.run_key != run_key:
            t = self.table()
            row = F.struct(*[F.col(c) for c in t.columns])
            logged = (F.col("batch_seq") > 0) & (F.col("updates_in") > 0)
            of_run = F.col("run_key") == F.lit(run_key) if run_key is not None else F.lit(False)
            got = t.agg(F.max("batch_seq"), F.max("next_surrogate_key"),
                        F.max_by(F.when(logged, row), F.when(logged, F.col("batch_seq"))),
                        F.collect_list(F.when(of_run, row))).first()
            state = (int(got[0] or 0), int(got[1] or 1))
            self._facts = LedgerFacts(run_key, state, got[2].asDict() if got[2] is not None else None,
                                      [r.asDict() for r in got[3]])
            if self._state is None:
                self._state = state
        return self._facts

    def table(self):
        """The ledger's rows without their outcomes (``outcome_log`` reads those)."""
        return self.tables.read("batch_ledger").drop("outcomes")

    def state(self) -> tuple[int, int]:
        """(last committed batch_seq, next surrogate key). Read once per load, then advanced by each
        row this loader appends: under the lock no one else writes it, and a Delta read per batch
        cost 0.7 s of an 18-s batch (profiled)."""
        if self._state is None:
            row = self.table().agg(F.max("batch_seq"), F.max("next_surrogate_key")).first()
            self._state = (int(row[0] or 0), int(row[1] or 1))
        return self._state

    def rows(self, run_key: str) -> list[dict]:
        """The run's rows: from ``facts`` when they were read for this run and nothing was appended since."""
        if self._facts is not None and run_key == self._facts.run_key:
            return list(self._facts.run_rows)
        return [r.asDict() for r in self.table().where(f"run_key = '{run_key}'").collect()]

    def last_logged(self) -> dict | None:
        """The ledger row of the last batch that logged updates (without its outcomes), or ``None``."""
        return (self._facts or self.facts()).last_logged

    def record(self, step, stats: JoinStats, outcomes=None) -> None:
        """The step's ``batch_ledger`` row, with its measurements and, for a batch, its decided
        ``outcomes``: the write-ahead commit of the batch (DESIGN.md §3; docs/decisions/
        commit-protocol.md). A plain append: ``batch_seq`` is new under the load lock, and recovery
        re-applies a logged batch, it never logs one again."""
        next_key = step.next_key + step.keys_allocated
        row = {
            "run_key": step.run_key,
            "batch_index": step.batch_index,
            "batch_seq": step.batch_seq,
            "strategy": step.strategy,
            "updates_in": step.updates_in,
            "keys_allocated": step.keys_allocated,
            "next_surrogate_key": next_key,
            "committed_at": datetime.fromtimestamp(step.committed, tz=timezone.utc),
            **step.counts,
            "keymap_bytes_read": stats.keymap_bytes_read,
            "segments_probed": stats.segments_probed,
            "segments_admitted": stats.segments_admitted,
            "segments_evicted": stats.segments_evicted,
            "resident_bytes": stats.resident_bytes,
            "wait_buffer_tuples": stats.wait_buffer_tuples,
            "queue_tuples": stats.queue_tuples,
            "disk_cycle": stats.disk_cycle,
            "delay_avg_s": step.delay_avg_s,
            "delay_p99_s": step.delay_p99_s,
            "clock_skew": step.clock_skew,
            "batch_started_at": datetime.fromtimestamp(step.started, tz=timezone.utc),
            "duration_s": step.committed - step.started,
        }
        if outcomes is None:
            frame = row_frame(self.spark, "batch_ledger", row, self.cfg.entity_model)
        else:
            logged = F.struct(*[F.col(f.name).cast(f.dataType) for f in schemas(self.cfg.entity_model).logged_update.fields])
            # One aggregate of the outcomes with the row's values as literals: one Spark job, where
            # joining a one-row frame to the aggregate took two. Sorted by update_id: the same
            # batch is stored the same way, whoever logs it.
            frame = outcomes.agg(*literal_row("batch_ledger", row, self.cfg.entity_model, outcomes=F.array_sort(F.collect_list(logged))))
        last_seq = self.state()[0]
        self.tables.append(frame, "batch_ledger")
        self._state = (max(last_seq, step.batch_seq), next_key)  # a step with no batch keeps the last
        self._facts = None  # the run's rows and the last logged batch are read again when asked
        crash_point("load.logged")
