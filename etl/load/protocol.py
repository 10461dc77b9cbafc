"""The commit protocol: what one released micro-batch goes through, and what a crash leaves.

``batch_seq`` is global and increasing; a step that releases nothing is recorded in the ledger
with ``batch_seq`` 0 (``NO_BATCH``). A released batch, in ``CommitProtocol.commit``:

1. **decide** (``decide``): every outcome and allocated key, computed once from the strategy's
   joined rows and held by Spark (a local checkpoint), so the log and both MERGEs see the same rows;
2. **log** (``log``): the batch's ``batch_ledger`` row, which carries its outcomes and
   measurements: the write-ahead commit, a fresh ``batch_seq`` taken under the load lock after
   ``recover``. The delay path ends here;
3. **apply** (``apply``): MERGE into the entity table (``customer_current``, or its history), then
   into ``key_map``, each guarded by ``updated_batch_seq < batch_seq``, so a second application
   changes nothing. With ``apply_interval_seconds`` 0 at once; otherwise several logged batches
   together (``apply_tail``), off the delay path (``etl.load.tail``: the join reads ``key_map`` with
   the logged tail merged over it meanwhile), once the oldest has waited that long and at the
   run's end; with ``apply_concurrently`` in a thread beside the next batches' decisions
   (``start_apply``, ``finish_apply``: the join reads ``key_map`` pinned at the version the apply
   started from, with the batches being applied and those logged since merged over it), waited
   for before the load lock is given up. After a coalesced apply, in its thread, the table
   services (``table_services``): key_map's segments above ``key_map_files_per_segment`` files
   compacted, a commit that changes no row (docs/decisions/table-services.md);
4. **recover** (``recover``), before anything else runs under the lock: a crash leaves either
   nothing (step 2 not committed: the batch is decided again from the same state) or logged
   batches, which are applied from the log. Batches are applied in order and ``key_map`` last, so a
   batch whose ``batch_seq`` some ``key_map`` row holds is applied, and so is every batch before it:
   recovery probes the last logged batch, and when it is unapplied applies every batch above the
   highest ``batch_seq`` on ``key_map``.

``outcome_log``, ``applied_changes`` and ``duplicates_quarantine`` are views of the logged outcomes,
``join_metrics`` of the ledger. The session around this (the lock, the layout, the strategy's
lifecycle, the always-on loader's open run) is ``etl.load.loader.Loader``.
"""

from __future__ import annotations

import logging
import time

from pyspark import InheritableThread
from pyspark.sql import functions as F

from etl.core.delays import batch_delays
from etl.core.faults import crash_point
from etl.core.services import segments_to_compact
from etl.core.spark_conf import COMMIT_SQL_SETTINGS
from etl.io.runs import run_owner
from etl.io.spark import sql_settings
from etl.load.apply import arrivals_at, summarise_outcomes
from etl.load.ledger import Ledger
from etl.load.results import NO_BATCH, OUTCOME_COUNTS, BatchResult, Step
from etl.load.tail import Logged, LoggedTail
from etl.strategies import JoinStats
from etl.transforms.columns import ints_in
from etl.transforms.history import history_changes
from etl.transforms.layout import segment_column
from etl.transforms.outcomes import current_state_rows, key_map_changes, resolve

logger = logging.getLogger(__name__)


class CommitProtocol:
    """The four steps on one warehouse's tables, for the strategy and layout the session settles
    under the lock (``use``); ``lock`` is the session's while it holds one (fencing)."""

    def __init__(self, spark, cfg, tables) -> None:
        self.spark = spark
        self.cfg = cfg
        self.tables = tables
        self.ledger = Ledger(tables)
        # Logged batches not applied yet (apply_interval_seconds > 0), and those being applied
        # beside the next decisions (apply_concurrently), with key_map as that apply found it.
        self.tail = LoggedTail()
        self.applying: LoggedTail | None = None
        self._beside: _Beside | None = None
        self._pinned_key_map = None
        self.strategy = self.layout = self.segment_of = None
        self.lock = None

    def use(self, strategy, layout) -> None:
        self.strategy, self.layout, self.segment_of = strategy, layout, segment_column(layout)

    def verify_lock(self) -> None:
        """Fencing: nothing is written after the load lock was taken from this loader."""
        if self.lock is not None:
            self.lock.verify()

    # ------------------------------------------------------------------ a released batch, steps 1-3

    def commit(self, run_key: str, batch_index: int, joined, started: float, kept: dict | None = None,
               apply_now: bool = False) -> BatchResult:
        """Decide, log and apply (or defer) one released batch (``joined``: the strategy's rows, or
        ``None`` for a step that released nothing), without adaptive execution: with it every query
        stage is a Spark job (13 jobs a steady deferred batch instead of 8), and the batch's left
        join with key_map may only broadcast key_map, which adaptive execution re-plans only after
        both sides were shuffled (docs/decisions/commit-without-adaptive-execution.md). ``kept``
        receives the keys decided (a fact's inferred members); ``apply_now`` applies whatever the
        setting says."""
        with sql_settings(self.spark, COMMIT_SQL_SETTINGS):
            return self._commit(run_key, batch_index, joined, started, kept, apply_now)

    def _commit(self, run_key: str, batch_index: int, joined, started: float, kept: dict | None,
                apply_now: bool) -> BatchResult:
        self.verify_lock()
        last_seq, next_key = self.ledger.state()
        if joined is None:  # the strategy released nothing at this step: record the step, no batch
            step = Step(run_key, batch_index, NO_BATCH, self.strategy.name, started, time.time(), next_key)
            self.ledger.record(step, self.strategy.stats())
            return step.result()
        batch_seq = last_seq + 1
        decided = self.decide(joined, run_key, batch_index, batch_seq, next_key)
        deferred = False
        try:
            step, logged, summary = self.log(run_key, batch_index, batch_seq, started, next_key, decided)
            result = step.result()
            if kept is not None:  # held already: read from memory
                kept["keys"] = decided.select("source_id", "natural_key", "surrogate_key").distinct().collect()
            if apply_now or self.cfg.apply_interval_seconds <= 0:
                self.apply_tail()  # in order: what was logged before this batch first
                visible_at = self.apply(decided, summary["segments"], summary["new_keys"], held=True)
                result.visible_s, result.applied_s = visible_at - logged, time.time() - logged
            else:
                # The join's state answers for the batch from now on; the MERGEs come later (and
                # say when in ``result``). Its changes are read from the held batch: the tail holds
                # them combined with the earlier batches' (one Spark job).
                changes = key_map_changes(decided, self.segment_of)
                self.strategy.keys_committed(changes, summary["new_keys"])
                self.tail.add(Logged(decided, changes, summary["segments"], summary["new_keys"], logged_at=logged,
                                     result=result))
                deferred = True
        finally:
            if not deferred:
                decided.unpersist()
        if deferred and self.tail_due():
            self.start_apply()
        return result

    def decide(self, joined, run_key: str, batch_index: int, batch_seq: int, next_key: int):
        """Step 1. Decided once and held: the log and both MERGEs see the same rows without reading
        the log back (a recomputation after the key_map MERGE would decide against the new state).
        Held lazily: the batch's summary, its first action, stores it in the same Spark job."""
        return resolve(joined, next_key, self.cfg.entity_model.append_only).select(
            "*",
            F.lit(run_key).alias("run_key"),
            F.lit(batch_seq).cast("long").alias("batch_seq"),
            F.lit(batch_index).alias("batch_index"),
        ).localCheckpoint(eager=False)

    def log(self, run_key: str, batch_index: int, batch_seq: int, started: float, next_key: int, decided):
        """Step 2, the batch's write-ahead commit: its ledger row with its counts, delays and outcomes
        (under ``commit``'s settings)."""
        # The delays are measured to the commit, known only after the pass that computes the
        # batch: that pass splits the arrivals at its own start (etl.core.delays.Arrivals).
        summary = summarise_outcomes(decided, self.segment_of, cut_s=time.time())
        logged = time.time()
        arrivals = summary["arrivals"]
        if not arrivals.split_as_at(logged):
            arrivals = arrivals_at(decided, logged)
        delays = batch_delays(logged, arrivals)
        step = Step(
            run_key, batch_index, batch_seq, self.strategy.name, started, logged, next_key,
            updates_in=summary["n"], counts=summary["counts"],
            delay_avg_s=delays.avg_s, delay_p99_s=delays.p99_s, clock_skew=delays.clock_skew,
            sequence_conflicts=summary["sequence_conflicts"],
        )
        self.ledger.record(step, self.strategy.stats(), outcomes=decided)
        return step, logged, summary

    def apply(self, outcomes, segments: list[int] | None = None, new_keys: dict[int, int] | None = None,
              held: bool = False, fold: bool = True, several_batches: bool = False, changes=None) -> float:
        """Step 3: apply logged batches (their rows: ``outcomes``; the ``key_map`` segments they
        touch and the keys they insert per segment, when the caller counted them; ``held``: the
        rows are a local checkpoint; ``fold``: the strategy has not seen them yet; ``changes``:
        their ``key_map`` changes, when the caller holds them already): both MERGEs, each
        idempotent, the entity table's first and ``key_map``'s last (``key_map`` marks a batch
        applied for ``recover``). Returns when the entity table's MERGE committed (the batches'
        *visible* time)."""
        with sql_settings(self.spark, COMMIT_SQL_SETTINGS):
            entity = self.cfg.entity_model
            if entity.history == "history":
                opened = self.tables.read(entity.table).where(F.col("is_current"))
                self.tables.merge_history(history_changes(outcomes, opened, entity))
            else:
                self.tables.merge_current(current_state_rows(outcomes, entity, several_batches), held=held)
            visible_at = time.time()  # readers of the entity table see the batches from here
            crash_point("load.current_merged")

            held_changes = changes is not None
            if not held_changes:
                changes = key_map_changes(outcomes, self.segment_of).cache()
            self.tables.merge_key_map(changes, segments)
            crash_point("load.key_map_merged")
            if fold:
                self.strategy.keys_committed(changes, new_keys)
            if not held_changes:
                changes.unpersist()
        return visible_at

    def tail_due(self, overdue: bool = False) -> bool:
        """The logged tail's oldest batch has waited ``apply_interval_seconds`` (``overdue``: twice
        that, when applies run beside the decisions and wait for a step that decides)."""
        wait = self.cfg.apply_interval_seconds * (2 if overdue and self.cfg.apply_concurrently else 1)
        return bool(self.tail) and self.tail.age_s() >= wait

    def key_map_layers(self):
        """What the join reads ``key_map`` as (``etl.load.tail.TailReads``): with an apply in
        flight, the version it started from with its batches and the ones logged since merged
        over it (its MERGE may commit between two reads of one decision: a read of the latest
        version would hold its new keys twice); otherwise the latest version and the tail."""
        if self.applying is None:
            return None, [self.tail]
        return self._pinned_key_map, [self.applying, self.tail]

    def start_apply(self) -> None:
        """Step 3 for the logged tail, begun: with ``apply_concurrently`` its MERGEs run in a thread
        of their own (Spark's pool ``apply``, shared fairly with the decisions') while the next
        batches are decided and logged, which read ``key_map`` pinned (``key_map_layers``); one
        apply at a time, in order. The caller waits for it (``finish_apply``) before it gives up
        the load lock. Without ``apply_concurrently``, applied at once."""
        if not self.cfg.apply_concurrently:
            self.apply_tail()
            return
        if self.applying is not None or not self.tail:
            return
        self.verify_lock()
        self._pinned_key_map = self.tables.pinned("key_map")
        applying, self.tail = self.tail, LoggedTail()
        self.applying = applying

        def merge() -> tuple[float, float]:
            self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "apply")
            visible_at, applied_at = self._apply_rows(applying), time.time()
            self.table_services()
            return visible_at, applied_at

        self._beside = _Beside(merge)

    def finish_apply(self, quiet: bool = False) -> None:
        """Wait for the apply in flight, if any: its batches' results say when they became visible,
        and its tail is forgotten, applied. If it failed, forgotten too (its batches are logged:
        the error ends the caller's step, and the run is taken up again as after a restart, whose
        recovery applies them from the log); ``quiet``: the caller is failing already, the apply's
        error is logged instead of raised."""
        if self.applying is None:
            return
        applying, beside = self.applying, self._beside
        try:
            visible_at, applied_at = beside.wait()
            applying.applied(visible_at, applied_at)
        except Exception:
            if not quiet:
                raise
            logger.exception("the logged tail's apply beside the decisions failed (recovery applies it from the log)")
        finally:
            applying.clear()
            self.applying = self._beside = self._pinned_key_map = None

    def apply_tail(self) -> None:
        """Step 3 for the logged tail, now: after the apply in flight, every logged, unapplied
        batch of this loader, by one MERGE per table (``etl.load.tail``)."""
        self.finish_apply()
        if not self.tail:
            return
        self.verify_lock()
        visible_at = self._apply_rows(self.tail)
        self.tail.applied(visible_at, time.time())
        self.tail.clear()
        self.table_services()

    def _apply_rows(self, tail: LoggedTail) -> float:
        return self.apply(tail.outcomes(), tail.segments(), tail.new_keys(), held=True, fold=False,
                          several_batches=len(tail.batches) > 1, changes=tail.changes())

    def table_services(self) -> list[int]:
        """Between batches, after a coalesced apply (in its thread when it runs beside the
        decisions, which read key_map pinned: a compaction changes no row and removes no file
        they list): the key_map segments above ``key_map_files_per_segment`` files compacted,
        in one commit, under the lock (``etl.core.services``). Returns them. A failed compaction
        fails nothing: the batches before it are applied, and the next apply plans it again."""
        limit = self.cfg.key_map_files_per_segment
        if limit <= 0:
            return []
        self.verify_lock()  # a loader whose lock was taken over stops here, as before a commit
        try:
            due = segments_to_compact(self.tables.files_per_segment("key_map"), limit)
            if not due:
                return []
            started = time.time()
            self.tables.compact_segments("key_map", due)
        except Exception as e:  # noqa: BLE001 - the batches are applied; the next apply tries again
            logger.warning("key_map's compaction failed (%s); the next apply plans it again", e)
            return []
        crash_point("services.key_map_compacted")
        logger.info("key_map: %d segment(s) above %d files compacted in %.1f s", len(due), limit, time.time() - started)
        return due

    # ------------------------------------------------------------------ step 4

    def recover(self) -> list[BatchResult]:
        """Apply what a crash, or a loader that logged ahead of its MERGEs, left logged but
        unapplied: every logged batch after the last applied one, together, and batches an older
        version logged in its ``outcome_log`` table without their ledger row."""
        results = [self._recover_older(row) for row in self._older_pending()]
        pending = self.unapplied()
        if pending:
            seqs = [r["batch_seq"] for r in pending]
            logger.warning("recovering %d logged batch(es) %s from the log (runs %s)", len(seqs),
                        seqs[0] if len(seqs) == 1 else f"{seqs[0]}-{seqs[-1]}", ", ".join(sorted({r["run_key"] for r in pending})))
            logged = self.tables.read("outcome_log").where(ints_in("batch_seq", seqs)).cache()
            try:
                self.apply(logged, several_batches=len(seqs) > 1)
            finally:
                logged.unpersist()
            results += [BatchResult(r["run_key"], r["batch_index"], r["batch_seq"], r["updates_in"],
                                    {k: r[k] or 0 for k in OUTCOME_COUNTS}, r["keys_allocated"],
                                    r["delay_avg_s"], r["delay_p99_s"], r["duration_s"] or 0.0, recovered=True,
                                    clock_skew=r.get("clock_skew") or 0) for r in pending]
        return results

    def unapplied(self) -> list[dict]:
        """The logged batches not applied yet, oldest first. Batches are applied in order, ``key_map``
        last, and every applied batch marks the ``key_map`` rows of its keys with its ``batch_seq``
        (a later applied batch marks them with its own): so the batches applied are those up to
        the highest ``batch_seq`` on ``key_map``, and the rest are not. The last logged batch is
        probed first (data skipping reads only the files that can hold its mark): applied, the
        common case, that is all; otherwise one aggregate of ``key_map`` says where applying stopped."""
        last = self.ledger.last_logged()
        if last is None:
            return []
        if self._marked("key_map", last["batch_seq"]):
            if (last["matched"] or 0) + (last["new"] or 0) and not self._marked(self.cfg.entity_model.table, last["batch_seq"]):
                # A version before 2026-11-27 merged key_map first and was cut short before the
                # entity table's MERGE of its last batch, the only one it could leave unapplied.
                return [last]
            return []
        applied_through = self.tables.read("key_map").agg(F.max("updated_batch_seq")).first()[0] or 0
        logged = self.ledger.table().where((F.col("batch_seq") > applied_through) & (F.col("updates_in") > 0))
        return [r.asDict() for r in logged.orderBy("batch_seq").collect()]

    def _marked(self, table: str, batch_seq: int) -> bool:
        return bool(self.tables.read(table).where(F.col("updated_batch_seq") == batch_seq).limit(1).count())

    def _older_pending(self) -> list:
        """Batches in an older version's ``outcome_log`` table but not in the ledger (that version
        appended the ledger row after applying)."""
        older = self.tables.stored("outcome_log")
        if older is None:
            return []
        last_seq = self.ledger.state()[0]
        return (older.where(F.col("batch_seq") > last_seq)
                .select("run_key", "batch_index", "batch_seq").distinct().orderBy("batch_seq").collect())

    def _recover_older(self, row) -> BatchResult:
        logger.warning("recovering batch %s (run %s, batch %s) from an older outcome_log", row.batch_seq, row.run_key, row.batch_index)
        owner = run_owner(self.spark, self.cfg, row.run_key) or self.strategy.name
        logged = (self.tables.stored("outcome_log")
                  .where(f"run_key = '{row.run_key}' AND batch_seq = {row.batch_seq}").cache())
        try:
            summary = summarise_outcomes(logged)
            first_key = summary["min_new_key"] if summary["min_new_key"] is not None else self.ledger.state()[1]
            now = time.time()
            step = Step(row.run_key, row.batch_index, row.batch_seq, owner, now, now, int(first_key),
                        updates_in=summary["n"], counts=summary["counts"])
            self.apply(logged)
            self.ledger.record(step, JoinStats())  # its outcomes stay in the older table
        finally:
            logged.unpersist()
        result = step.result()
        result.recovered = True
        return result


class _Beside:
    """A call in a thread of its own that inherits the caller's Spark local properties (PySpark's
    ``InheritableThread``); ``wait`` returns its result or raises its error."""

    def __init__(self, call) -> None:
        self._call = call
        self._result = self._error = None
        self._thread = InheritableThread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._call()
        except BaseException as exc:  # handed to the waiting caller
            self._error = exc

    def wait(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result
