"""Load: drive a run's micro-batches through the chosen strategy and commit each one exactly once.

Commit protocol of one released micro-batch (``batch_seq`` is global and increasing; a step that
releases nothing is recorded in the ledger with ``batch_seq`` 0, ``NO_BATCH``):

1. decide every outcome and allocate keys (computed once, held by Spark), and append the batch's
   ``batch_ledger`` row, which carries its outcomes and measurements: the write-ahead commit (a
   fresh ``batch_seq`` under the lock, after ``recover``);
2. apply what was decided: MERGE into the entity table (``customer_current``, or its history),
   then into ``key_map`` (each guarded by ``updated_batch_seq < batch_seq``, so a second application
   changes nothing). With ``apply_interval_seconds`` 0 at once; otherwise several logged batches
   together, off the delay path (``etl.load.tail``: the join reads ``key_map`` with the logged tail
   merged over it meanwhile), once the oldest has waited that long and at the run's end.

``outcome_log``, ``applied_changes`` and ``duplicates_quarantine`` are views of the logged outcomes,
``join_metrics`` of the ledger. A crash anywhere leaves either nothing (step 1 not committed: the
batch is decided again from the same state) or logged batches that ``recover`` applies, from the
log, before anything else runs. Batches are applied in order and ``key_map`` last, so a batch whose
``batch_seq`` some ``key_map`` row holds is applied, and so is every batch before it: recovery
probes the last logged batch, and when it is unapplied applies every batch above the highest
``batch_seq`` on ``key_map``.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager

from pyspark.sql import functions as F

from etl.core import registry
from etl.core.config import ConfigError, EtlConfig
from etl.core.delays import batch_delays
from etl.core.faults import crash_point
from etl.core.interval import Interval
from etl.core.policy import load_batches, plan_lookahead
from etl.core.spark_conf import COMMIT_SQL_SETTINGS
from etl.core.stream_plan import n_windows, settled_groups
from etl.io.layout_store import load_layout, settle_pending_layout
from etl.io.lock import LoadLock, WarehouseLocked
from etl.io.runs import OverlappingRunError, check_no_overlap, check_owner, run_owner
from etl.io.sequence_store import check_sequence_definition
from etl.io.spark import sql_settings
from etl.io.tables import open_tables
from etl.load.apply import arrivals_at, summarise_outcomes
from etl.load.ledger import Ledger
from etl.load.references import References
from etl.load.tail import Logged, LoggedTail, TailReads
from etl.load.results import (
    FLUSH_STEP,
    NO_BATCH,
    OUTCOME_COUNTS,
    BatchResult,
    LoadResult,
    Step,
)
from etl.strategies import JoinStats, get_strategy
from etl.transforms.history import history_changes
from etl.transforms.layout import segment_column
from etl.transforms.outcomes import current_state_rows, key_map_changes, resolve

__all__ = ["FLUSH_STEP", "Loader", "LoadResult", "BatchResult", "OverlappingRunError"]

log = logging.getLogger(__name__)


class Loader:
    """Drives runs through one join strategy. Everything that depends on the warehouse's layout
    (settling a rebalance cut short, the layout, the strategy) is read under the load lock, so a
    maintenance step holding the lock never has its staged layout changed under it."""

    def __init__(self, spark, cfg: EtlConfig, strategy_name: str | None = None, tables=None) -> None:
        self.spark = spark
        self.cfg = cfg
        self.tables = tables or open_tables(spark, cfg)
        self.spec = registry.spec(strategy_name or cfg.join_strategy)
        self.ledger = Ledger(self.tables)
        # Settled under the lock (``_prepare``): a maintenance step may be changing them until then.
        self.layout = self.segment_of = self.strategy = None
        self._lock = None
        # The run ``load_ready`` left open, and the ledger's last batch_seq then: its strategy state
        # is kept for the next call while nobody else has loaded and the layout is the same.
        self._open_run: tuple[str, int] | None = None
        self._continuing = False
        # Logged batches not applied yet (apply_interval_seconds > 0), and key_map's version when
        # this loader last released the lock with such a tail: kept only while no one wrote key_map.
        self.tail = LoggedTail()
        self._key_map_version: int | None = None
        self._strategy_tables = TailReads(self.tables, self.tail)
        # A fact's dimensions, which its batches' keys are looked up in (and inferred members
        # committed to) before its own join.
        self.references = References(spark, cfg, Loader) if cfg.entity_model.is_fact else None

    def _prepare(self, run_key: str) -> None:
        """Under the lock: settle a rebalance cut short, then the layout and the strategy (the open
        run's, kept; otherwise a fresh one, as a scheduled run starts with)."""
        settle_pending_layout(self.spark, self.cfg)
        layout = load_layout(self.cfg, self.spec.new_layout)
        self._continuing = (self._open_run is not None and layout == self.layout
                            and self._open_run == (run_key, self.ledger.state()[0])
                            and (not self.tail or self._key_map_version == self.tables.version("key_map")))
        self._open_run = None  # set again only by a step call that ends with the run still open
        if self._continuing:
            return
        self.tail.clear()  # logged, so recovery applies it from the log
        for name in self.tables.settle_deletion_vectors():
            log.info("%s holds %s bytes or more: its MERGEs use deletion vectors from now on", name, self.cfg.deletion_vectors_from_bytes)
        self.layout = layout
        self.segment_of = segment_column(self.layout)
        self.strategy = get_strategy(self.spec.name, self.spark, self.cfg, self.layout, self._strategy_tables)

    # ------------------------------------------------------------------ serving a fact's references

    @contextmanager
    def attached(self, owner: str, wait_s: float):
        """This warehouse locked and prepared for another entity's load (a fact resolving its
        references against this dimension): waits up to ``wait_s`` for a load holding it, settles
        a rebalance cut short, and recovers a batch a crash left unapplied (any writer's: the
        dimension's own loads, or another fact's), as every load does first."""
        deadline = time.monotonic() + wait_s
        check_sequence_definition(self.cfg, self.tables)
        if self.strategy is None:
            self.tables.ensure()
        while True:
            try:
                lock = LoadLock(self.cfg.meta_path, owner, self.cfg.lock_stale_seconds).__enter__()
                break
            except WarehouseLocked:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self._lock = lock
        try:
            self.ledger.forget()
            settle_pending_layout(self.spark, self.cfg)
            layout = load_layout(self.cfg, self.spec.new_layout)
            self.tail.clear()
            if self.strategy is None or layout != self.layout:
                self.layout, self.segment_of = layout, segment_column(layout)
                self.strategy = get_strategy(self.spec.name, self.spark, self.cfg, self.layout, self._strategy_tables)
            self.recover()
            yield self
        finally:
            self._lock = None
            lock.__exit__(None, None, None)

    def lookup(self, probes):
        """``probes`` (``source_id``, ``natural_key``, ...) joined with ``key_map`` the way this
        warehouse's join strategy reads it (``attached`` only)."""
        return self.strategy.lookup(probes)

    def commit_inferred(self, run_key: str, batch_index: int, joined) -> list:
        """Commit ``joined`` (``transforms.references.inferred_updates``) as one batch of this
        warehouse, by the same protocol as a released batch (``attached`` only). Returns the keys
        it decided (``source_id``, ``natural_key``, ``surrogate_key`` rows)."""
        kept: dict = {}
        self._commit(run_key, batch_index, joined, time.time(), kept, apply_now=True)
        return kept["keys"]

    # ------------------------------------------------------------------ the protocol

    def recover(self) -> list[BatchResult]:
        """Apply what a crash, or a loader that logged ahead of its MERGEs, left logged but
        unapplied: every logged batch after the last applied one, together, and batches an older
        version logged in its ``outcome_log`` table without their ledger row."""
        results = [self._recover_older(row) for row in self._older_pending()]
        pending = self._unapplied()
        if pending:
            seqs = [r["batch_seq"] for r in pending]
            log.warning("recovering %d logged batch(es) %s from the log (runs %s)", len(seqs),
                        seqs[0] if len(seqs) == 1 else f"{seqs[0]}-{seqs[-1]}", ", ".join(sorted({r["run_key"] for r in pending})))
            logged = self.tables.read("outcome_log").where(F.col("batch_seq").isin(seqs)).cache()
            try:
                self._apply(logged, several_batches=len(seqs) > 1)
            finally:
                logged.unpersist()
            results += [BatchResult(r["run_key"], r["batch_index"], r["batch_seq"], r["updates_in"],
                                    {k: r[k] or 0 for k in OUTCOME_COUNTS}, r["keys_allocated"],
                                    r["delay_avg_s"], r["delay_p99_s"], r["duration_s"] or 0.0, recovered=True,
                                    clock_skew=r.get("clock_skew") or 0) for r in pending]
        return results

    def _unapplied(self) -> list[dict]:
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
        log.warning("recovering batch %s (run %s, batch %s) from an older outcome_log", row.batch_seq, row.run_key, row.batch_index)
        owner = run_owner(self.spark, self.cfg, row.run_key, self.layout.kind) or self.strategy.name
        logged = (self.tables.stored("outcome_log")
                  .where(f"run_key = '{row.run_key}' AND batch_seq = {row.batch_seq}").cache())
        try:
            summary = summarise_outcomes(logged)
            first_key = summary["min_new_key"] if summary["min_new_key"] is not None else self.ledger.state()[1]
            now = time.time()
            step = Step(row.run_key, row.batch_index, row.batch_seq, owner, now, now, int(first_key),
                        updates_in=summary["n"], counts=summary["counts"])
            self._apply(logged)
            self.ledger.record(step, JoinStats())  # its outcomes stay in the older table
        finally:
            logged.unpersist()
        result = step.result()
        result.recovered = True
        return result

    def load(self, interval: Interval, progress=None) -> LoadResult:
        """Load the run's ingested updates; batches already in the ledger are skipped (idempotent).
        Fails at once with ``WarehouseLocked`` while another load holds the warehouse."""
        return self._locked(interval, lambda: self._load(interval, progress))

    def load_ready(self, interval: Interval, closed_windows: int, progress=None) -> LoadResult:
        """The always-on loader's step: load the run's batches that its first ``closed_windows``
        arrival windows (ingested) settle, and once they are all of the run's, flush and end it as
        ``load`` does. Holds the lock for this call only; the strategy's state (resident segments,
        wait buffer, MESHJOIN queue) is kept for the next call unless someone else loaded or the
        layout changed meanwhile, when the run is taken up again as after a restart."""
        return self._locked(interval, lambda: self._load(interval, progress, closed_windows))

    def _locked(self, interval: Interval, body) -> LoadResult:
        check_sequence_definition(self.cfg, self.tables)
        self.tables.ensure()
        with LoadLock(self.cfg.meta_path, f"load of {interval.run_key}", self.cfg.lock_stale_seconds) as lock:
            self._lock = lock
            self.ledger.forget()  # others may have loaded since this loader last held the lock
            try:
                self._prepare(interval.run_key)
                return body()
            finally:
                self._lock = None

    def _load(self, interval: Interval, progress=None, closed_windows: int | None = None) -> LoadResult:
        final = closed_windows is None or closed_windows >= n_windows(interval, self.cfg.micro_batch_seconds)
        result = LoadResult(interval.run_key, self.strategy.name)
        if self.references:
            result.inferred_members, result.reference_lookups = self.references.counting()
        owner = None
        if not self._continuing:
            self.ledger.facts(interval.run_key)  # one read of what the checks and the recovery below ask of the ledger
            owner = check_owner(self.spark, self.cfg, interval.run_key, self.strategy.name, self.layout.kind,
                                self.ledger.rows(interval.run_key))
            result.recovered_batches = len(self.recover())
            check_no_overlap(self.spark, self.cfg, interval)
        ingested = self.tables.read("ingested_updates").where(f"run_key = '{interval.run_key}'")
        ingested, indexes, sizes = self._plan(interval, ingested, progress, None if final else closed_windows)
        ledger_rows = self.ledger.rows(interval.run_key)
        done = {r["batch_index"] for r in ledger_rows}
        result.skipped_batches = len([i for i in indexes if i in done])
        todo = [i for i in indexes if i not in done]
        if FLUSH_STEP in done:
            self._settling_strategy(owner).settle(interval.run_key)
            self.apply_tail()
            return result
        if self._continuing:
            self.strategy.arrived(sizes)
        else:
            # A restart replays committed batches from this: their keys exist, read lazily.
            known = self.references.looked_up(ingested) if self.references else ingested
            self.strategy.begin(interval.run_key, known, sorted(done), ledger_rows)
        source = ingested
        if self.references and todo:
            # A fact's keys, for all the batches this call loads at once (one lookup and at most one
            # inferred-member batch per dimension), held: every batch is a slice of them.
            todo_rows = ingested.where(F.col("batch_index").isin(todo))
            source = self.references.resolve(todo_rows, interval.run_key, max(todo)).localCheckpoint(eager=True)
        for n, index in enumerate(todo, 1):
            started = time.time()
            batch = source.where(f"batch_index = {index}").drop("run_key", "batch_index")
            for joined in self.strategy.submit(batch, index):
                result.batches.append(self._commit(interval.run_key, index, joined, started))
            if progress:
                progress(f"batch {n}/{len(todo)} (index {index}) committed")
        if not final:
            if self._tail_due():
                self.apply_tail()
            self._open_run = (interval.run_key, self.ledger.state()[0])
            self._key_map_version = self.tables.version("key_map") if self.tail else None
            return result
        for n, joined in enumerate(self.strategy.flush(), 1):
            result.batches.append(self._commit(interval.run_key, FLUSH_STEP, joined, time.time()))
            if progress:
                progress(f"end-of-run release {n} committed (the updates still waiting in the join)")
        self.apply_tail()  # a finished run's tables are its own: its gate, a fact's lookups read them
        self.strategy.end()
        return result

    def _settling_strategy(self, owner: str | None):
        """The strategy that closes a finished run: its owner's (a crash right after the flush
        commit may have left the owner's run snapshot behind)."""
        if owner is None or owner == self.strategy.name:
            return self.strategy
        try:
            return get_strategy(owner, self.spark, self.cfg, self.layout, self.tables)
        except ConfigError:  # the warehouse has been laid out for another strategy since
            return self.strategy

    def _plan(self, interval: Interval, ingested, progress=None, closed_windows: int | None = None):
        """The run's load batches (and their sizes). The partitioned strategies switch granularity
        by backlog (``policy.plan_batches``): under a heavy backlog one batch spans ``block_factor``
        arrival windows and takes the first window's ``batch_index``. The plan is a pure function
        of the run's ingested counts, so a restart plans the same batches; with ``closed_windows``
        only the batches those windows settle for good (``stream_plan.settled_groups``)."""
        counts = {int(r[0]): int(r[1]) for r in ingested.groupBy("batch_index").count().collect()}
        groups = load_batches(self.strategy.name, counts, self.cfg)
        if closed_windows is not None:
            total = n_windows(interval, self.cfg.micro_batch_seconds)
            groups = settled_groups(groups, closed_windows, total, plan_lookahead(self.strategy.name, self.cfg))
        sizes = {g[0]: sum(counts[w] for w in g) for g in groups}
        merged = [g for g in groups if len(g) > 1]
        if not merged:
            return ingested, [g[0] for g in groups], sizes
        if progress:
            progress(f"block granularity: {sum(map(len, merged))} of {len(counts)} arrival windows in {len(merged)} batches")
        first_of = F.create_map(*[F.lit(x) for g in groups for w in g for x in (w, g[0])])
        return ingested.withColumn("batch_index", first_of[F.col("batch_index")]), [g[0] for g in groups], sizes

    def _commit(self, run_key: str, batch_index: int, joined, started: float, kept: dict | None = None,
                apply_now: bool = False) -> BatchResult:
        """Decide, log and apply (or defer) one released batch, without adaptive execution: with it
        every query stage is a Spark job (13 jobs a steady deferred batch instead of 8), and the
        batch's left join with key_map may only broadcast key_map, which adaptive execution
        re-plans only after both sides were shuffled (docs/decisions/commit-without-adaptive-execution.md)."""
        with sql_settings(self.spark, COMMIT_SQL_SETTINGS):
            return self._commit_batch(run_key, batch_index, joined, started, kept, apply_now)

    def _commit_batch(self, run_key: str, batch_index: int, joined, started: float, kept: dict | None,
                      apply_now: bool) -> BatchResult:
        if self._lock is not None:
            self._lock.verify()  # fencing: never commit after the lock was taken from us
        last_seq, next_key = self.ledger.state()
        if joined is None:  # the strategy released nothing at this step: record the step, no batch
            step = Step(run_key, batch_index, NO_BATCH, self.strategy.name, started, time.time(), next_key)
            self.ledger.record(step, self.strategy.stats())
            return step.result()
        batch_seq = last_seq + 1
        # Decided once and held: the log and both MERGEs see the same rows without reading the
        # log back (a recomputation after the key_map MERGE would decide against the new state).
        # Held lazily: the batch's summary, its first action, stores it in the same Spark job.
        decided = resolve(joined, next_key, self.cfg.entity_model.append_only).select(
            "*",
            F.lit(run_key).alias("run_key"),
            F.lit(batch_seq).cast("long").alias("batch_seq"),
            F.lit(batch_index).alias("batch_index"),
        ).localCheckpoint(eager=False)
        deferred = False
        try:
            step, logged, summary = self._log(run_key, batch_index, batch_seq, started, next_key, decided)
            result = step.result()
            if kept is not None:  # held already: read from memory
                kept["keys"] = decided.select("source_id", "natural_key", "surrogate_key").distinct().collect()
            if apply_now or self.cfg.apply_interval_seconds <= 0:
                self.apply_tail()  # in order: what was logged before this batch first
                visible_at = self._apply(decided, summary["segments"], summary["new_keys"], held=True)
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
        if deferred and self._tail_due():
            self.apply_tail()
        return result

    def _tail_due(self) -> bool:
        return bool(self.tail) and self.tail.age_s() >= self.cfg.apply_interval_seconds

    def apply_tail(self) -> None:
        """Apply the logged tail: every logged, unapplied batch of this loader, by one MERGE per
        table (``etl.load.tail``)."""
        if not self.tail:
            return
        if self._lock is not None:
            self._lock.verify()
        visible_at = self._apply(self.tail.outcomes(), self.tail.segments(), self.tail.new_keys(), held=True, fold=False,
                                 several_batches=len(self.tail.batches) > 1, changes=self.tail.changes())
        self.tail.applied(visible_at, time.time())
        self.tail.clear()

    def _log(self, run_key: str, batch_index: int, batch_seq: int, started: float, next_key: int, decided):
        """The batch's write-ahead commit: its ledger row with its counts, delays and outcomes (under
        ``_commit``'s settings)."""
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

    def _apply(self, outcomes, segments: list[int] | None = None, new_keys: dict[int, int] | None = None,
               held: bool = False, fold: bool = True, several_batches: bool = False, changes=None) -> float:
        """Apply logged batches (their rows: ``outcomes``; the ``key_map`` segments they touch and
        the keys they insert per segment, when the caller counted them; ``held``: the rows are a
        local checkpoint; ``fold``: the strategy has not seen them yet; ``changes``: their
        ``key_map`` changes, when the caller holds them already): both MERGEs, each
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
