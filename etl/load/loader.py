"""Load: the session that drives a run's micro-batches through the chosen strategy, each one
committed exactly once by the commit protocol (``etl.load.protocol``: decide, log, apply, recover).

The session holds what lives between batches and calls: the load lock, the warehouse's layout and
the strategy settled under it (a maintenance step may change them until then), the strategy's
lifecycle through a run (``docs/architecture.md``, "A strategy's calls"), the always-on loader's
open run and logged tail kept from one call to the next, and a fact's dimensions
(``etl.load.references``)."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from functools import reduce

from pyspark.sql import functions as F

from etl.core import registry
from etl.core.config import ConfigError, EtlConfig
from etl.core.interval import Interval
from etl.core.layout import SlotArray, segments_to_split
from etl.core.policy import load_plan
from etl.core.stream_plan import n_windows, settled_groups
from etl.io.layout_store import load_layout, settle_pending_layout, split_after
from etl.io.lock import LoadLock, WarehouseLocked
from etl.io.rebalance import RebalanceBlocked, rebalance
from etl.io.run_ends import owe, owed, owed_by, settled
from etl.io.runs import OverlappingRunError, check_no_overlap, check_owner
from etl.io.sequence_store import check_sequence_definition
from etl.io.tables import open_tables
from etl.load.protocol import CommitProtocol
from etl.load.references import References
from etl.load.results import FLUSH_STEP, BatchResult, HeldWindows, LoadResult
from etl.load.tail import TailReads
from etl.strategies import get_strategy
from etl.strategies.base import rows_per_segment
from etl.transforms.columns import int_map, ints_in

__all__ = ["FLUSH_STEP", "Loader", "LoadResult", "BatchResult", "HeldWindows", "OverlappingRunError"]

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
        # The four steps of a batch, for the strategy and layout settled under the lock (``_use``).
        self.protocol = CommitProtocol(spark, cfg, self.tables)
        # The run ``load_ready`` left open, and the ledger's last batch_seq then: its strategy state
        # is kept for the next call while nobody else has loaded and the layout is the same.
        self._open_run: tuple[str, int] | None = None
        self._continuing = False
        # The token of the lock this loader's last call left the run open under: when the next call
        # finds it recorded as the lock's previous holder, nobody held the warehouse in between, so
        # the ledger and key_map are as this loader left them (no read to check them).
        self._left_open_under: str | None = None
        # The open run's arrivals per window (batch_index -> updates), as its ingested rows have
        # them: read once, then completed by the counts of each piece the stream ingests.
        self._counts: dict[int, int] | None = None
        # The open run's windows the stream's ingest holds in memory, as written (``HeldWindows``):
        # a step whose batches all fall in them decides from memory, not from the table.
        self._held: list[HeldWindows] = []
        # The open run's batch indexes in the ledger, and whether this call holds the lock after
        # this loader's own last call (``_locked``).
        self._done: set[int] | None = None
        self._alone = False
        self._strategy_tables = TailReads(self.tables, self.protocol.key_map_layers)
        # A fact's dimensions, which its batches' keys are looked up in (and inferred members
        # committed to) before its own join: each served by a session of its own.
        self.references = (References(cfg, {n: Loader(spark, cfg.for_entity(n)) for n in cfg.entity_model.dimensions})
                           if cfg.entity_model.is_fact else None)

    # The protocol's, read through: the session and the protocol never hold two copies.
    @property
    def ledger(self):
        return self.protocol.ledger

    @property
    def tail(self):
        return self.protocol.tail

    @property
    def strategy(self):
        return self.protocol.strategy

    @property
    def layout(self):
        return self.protocol.layout

    def _use(self, layout) -> None:
        """Settled under the lock: a maintenance step may be changing the layout until then."""
        self.protocol.use(get_strategy(self.spec.name, self.spark, self.cfg, layout, self._strategy_tables), layout)

    def _prepare(self, run_key: str) -> None:
        """Under the lock: settle a rebalance cut short, then the layout and the strategy (the open
        run's, kept; otherwise a fresh one, as a scheduled run starts with). The open run is
        continued when nobody held the lock since this loader's last call (``_alone``), otherwise
        only when nobody loaded meanwhile and no logged tail is held: someone else may have applied
        it (a fact's lookups recover it), and recovery applies it from the log instead."""
        settle_pending_layout(self.spark, self.cfg)
        layout = load_layout(self.cfg, self.spec.new_layout)
        same_run = self._open_run is not None and self._open_run[0] == run_key and layout == self.layout
        # another run's end owing its split (killed after its flush: a flush of no batch leaves the
        # ledger's last batch_seq as it was) is made first, by the path that takes the run up again;
        # alone, nobody can have flushed one since this loader's last call settled them
        same_run = same_run and (self._alone or not self._flushed_run_ends(run_key))
        self._continuing = same_run and (self._alone or (self._open_run[1] == self.ledger.state()[0] and not self.tail))
        self._open_run = None  # set again only by a step call that ends with the run still open
        if self._continuing:
            return
        self.tail.clear()  # logged, so recovery applies it from the log
        for name in self.tables.settle_deletion_vectors():
            log.info("%s holds %s bytes or more: its MERGEs use deletion vectors from now on", name, self.cfg.deletion_vectors_from_bytes)
        self._use(layout)

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
        self.protocol.lock = lock
        try:
            self.ledger.forget()
            settle_pending_layout(self.spark, self.cfg)
            layout = load_layout(self.cfg, self.spec.new_layout)
            self.protocol.finish_apply(quiet=True)
            self.tail.clear()
            if self.strategy is None or layout != self.layout:
                self._use(layout)
            self.protocol.recover()
            self._settle_run_ends()
            yield self
        finally:
            self.protocol.lock = None
            lock.__exit__(None, None, None)

    def lookup(self, probes):
        """``probes`` (``source_id``, ``natural_key``, ...) joined with ``key_map`` the way this
        warehouse's join strategy reads it (``attached`` only)."""
        return self.strategy.lookup(probes)

    @property
    def lookup_stats(self):
        """What the last ``lookup`` read (``JoinStats``)."""
        return self.strategy.lookup_stats

    def commit_inferred(self, run_key: str, batch_index: int, joined) -> list:
        """Commit ``joined`` (``transforms.references.inferred_updates``) as one batch of this
        warehouse, by the same protocol as a released batch (``attached`` only). Returns the keys
        it decided (``source_id``, ``natural_key``, ``surrogate_key`` rows)."""
        kept: dict = {}
        self.protocol.commit(run_key, batch_index, joined, time.time(), kept, apply_now=True)
        return kept["keys"]

    def committed_keys(self):
        """``key_map``'s keys as committed (``source_id``, ``natural_key``, ``km_surrogate_key``),
        read lazily, without the lock."""
        self.tables.ensure()
        return self.tables.read("key_map").select("source_id", "natural_key", F.col("surrogate_key").alias("km_surrogate_key"))

    def load(self, interval: Interval, progress=None) -> LoadResult:
        """Load the run's ingested updates; batches already in the ledger are skipped (idempotent).
        Fails at once with ``WarehouseLocked`` while another load holds the warehouse."""
        return self._locked(interval, lambda: self._load(interval, progress))

    def load_ready(self, interval: Interval, closed_windows: int, progress=None,
                   counts: dict[int, int] | None = None, held: list[HeldWindows] | None = None) -> LoadResult:
        """The always-on loader's step: load the run's batches that its first ``closed_windows``
        arrival windows (ingested) settle, and once they are all of the run's, flush and end it as
        ``load`` does. Holds the lock for this call only; the strategy's state (resident segments,
        wait buffer, MESHJOIN queue) is kept for the next call unless someone else loaded or the
        layout changed meanwhile, when the run is taken up again as after a restart. ``counts``:
        the updates per window of what was ingested since the last call (``jobs.ingest_pieces``),
        so a continued run is planned without reading its ingested rows again; ``held``: those
        windows' rows as the ingest wrote them, in memory (``HeldWindows``; the loader releases them
        once their batches are committed), so that their batches are decided without reading the
        table back."""
        return self._locked(interval, lambda: self._load(interval, progress, closed_windows, counts, held))

    def _locked(self, interval: Interval, body) -> LoadResult:
        check_sequence_definition(self.cfg, self.tables)
        self.tables.ensure()
        with LoadLock(self.cfg.meta_path, f"load of {interval.run_key}", self.cfg.lock_stale_seconds) as lock:
            self.protocol.lock = lock
            self._alone = self._left_open_under is not None and lock.previous == self._left_open_under
            self._left_open_under = None
            if not self._alone:
                self.ledger.forget()  # others may have loaded since this loader last held the lock
            failed = True
            try:
                self._prepare(interval.run_key)
                result = body()
                failed = False
                if self._open_run is not None:
                    self._left_open_under = lock.token
                return result
            finally:
                # An apply beside the decisions never outlives the lock (a step that failed with
                # one in flight: it is waited for, its batches stay logged for recovery).
                try:
                    self.protocol.finish_apply(quiet=failed)
                finally:
                    self.protocol.lock = None

    def _load(self, interval: Interval, progress=None, closed_windows: int | None = None,
              counts: dict[int, int] | None = None, held: list[HeldWindows] | None = None) -> LoadResult:
        final = closed_windows is None or closed_windows >= n_windows(interval, self.cfg.micro_batch_seconds)
        self._hold(held)
        result = LoadResult(interval.run_key, self.strategy.name)
        if self.references:
            result.inferred_members, result.reference_lookups = self.references.counting()
        owner = None
        if not self._continuing:
            self.ledger.facts(interval.run_key)  # one read of what the checks and the recovery below ask of the ledger
            owner = check_owner(self.spark, self.cfg, interval.run_key, self.strategy.name,
                                self.ledger.rows(interval.run_key))
            result.recovered_batches = len(self.protocol.recover())
            self._settle_run_ends(interval.run_key)
            check_no_overlap(self.spark, self.cfg, interval)
        if self._continuing and counts is not None and self._counts is not None:
            self._counts.update(counts)
        else:
            self._counts = None
        groups, sizes = self._plan(interval, None if final else closed_windows)
        indexes = [g[0] for g in groups]
        if self._continuing and self._alone and self._done is not None:
            ledger_rows, done = [], self._done  # as this loader left them: nobody held the lock since
        else:
            ledger_rows = self.ledger.rows(interval.run_key)
            done = {r["batch_index"] for r in ledger_rows}
        self._done = done
        result.skipped_batches = len([i for i in indexes if i in done])
        todo = [i for i in indexes if i not in done]
        if FLUSH_STEP in done:
            self._release_held()
            settling = self._settling_strategy(owner)
            settling.settle(interval.run_key)
            self.protocol.apply_tail()
            self._end_service(interval.run_key)
            return result
        if self._continuing:
            self.strategy.arrived(sizes)
        else:
            # A restart replays committed batches from this: their keys exist, read lazily.
            ingested = batched(self._run_rows(interval), groups)
            known = self.references.looked_up(ingested) if self.references else ingested
            self.strategy.begin(interval.run_key, known, sorted(done), ledger_rows)
        held_rows = self._held_rows(groups, todo) if todo else None
        source = batched(self._run_rows(interval) if held_rows is None else held_rows, groups, progress) if todo else None
        if self.references and todo:
            # A fact's keys, for all the batches this call loads at once (one lookup and at most one
            # inferred-member batch per dimension), held: every batch is a slice of them.
            todo_rows = source.where(ints_in("batch_index", todo))
            source = self.references.resolve(todo_rows, interval.run_key, max(todo)).localCheckpoint(eager=True)
        if todo and self.protocol.tail_due():
            self.protocol.start_apply()  # beside this step's decisions (apply_concurrently)
        for n, index in enumerate(todo, 1):
            started = time.time()
            batch = source.where(f"batch_index = {index}").drop("run_key", "batch_index")
            for joined in self.strategy.submit(batch, index):
                result.batches.append(self.protocol.commit(interval.run_key, index, joined, started))
            done.add(index)  # logged (a step that released nothing too: its ledger row says so)
            if progress:
                progress(f"batch {n}/{len(todo)} (index {index}) committed")
        self._release_held(groups, done, everything=final)
        if not final:
            self.protocol.finish_apply()
            # A tail left due by a step that decided nothing waits for the next step that decides
            # (to be applied beside it), unless it is overdue (no input for a while).
            if self.protocol.tail_due(overdue=True):
                self.protocol.apply_tail()
            self._open_run = (interval.run_key, self.ledger.state()[0])
            return result
        self.protocol.verify_lock()  # the flush records the join's state for the next run
        if self._owes_split(self.strategy.name):
            owe(self.cfg, interval.run_key, self.strategy.name, self.cfg.split_segments_per_run, self.cfg.theta)
        else:  # an earlier attempt's record (the service turned off since, or another strategy retrying)
            settled(self.cfg, interval.run_key)
        for n, joined in enumerate(self.strategy.flush(), 1):
            result.batches.append(self.protocol.commit(interval.run_key, FLUSH_STEP, joined, time.time()))
            if progress:
                progress(f"end-of-run release {n} committed (the updates still waiting in the join)")
        self.protocol.apply_tail()  # a finished run's tables are its own: its gate, a fact's lookups read them
        self.strategy.end()
        self._end_service(interval.run_key)
        return result

    def _owes_split(self, strategy_name: str) -> bool:
        return bool(self.cfg.split_segments_per_run and strategy_name == "partitioned-range"
                    and isinstance(self.layout, SlotArray))

    def _settle_run_ends(self, own_run: str | None = None) -> None:
        """Under the lock, after recovery and before anything else: the table service a run's end
        owes and did not make (killed after its flush commit), made now from the same table, so
        that it follows that flush in the history whoever loads next (``etl.io.run_ends``). A
        record whose run's flush is not committed waits for that run's own end, and ``own_run``'s
        is this call's own (its retry settles the run and makes the split itself)."""
        for record in self._flushed_run_ends(own_run):
            run_key = record["run_key"]
            log.info("run %s was stopped after its flush and before its end's table service: made now", run_key)
            self._settling_strategy(record["strategy"], fresh=True).settle(run_key)
            if self._end_service(run_key):
                self._use(load_layout(self.cfg, self.spec.new_layout))

    def _flushed_run_ends(self, own_run: str | None) -> list[dict]:
        """The owed run ends (``etl.io.run_ends``) of runs other than ``own_run`` whose flush the
        ledger holds (a read per record, only while a record is left)."""
        return [r for r in owed(self.cfg) if r["run_key"] != own_run
                and FLUSH_STEP in {row["batch_index"] for row in self.ledger.rows(r["run_key"])}]

    def _end_service(self, run_key: str) -> bool:
        """A table service at a run's end, applied and its snapshot gone (``split_segments_per_run``,
        issue 47), owed by the record its flush left (``etl.io.run_ends``; none: nothing owed, as
        for a rerun of a finished run): a run of partitioned-range has up to that many of key_map's
        segments grown past ``2*theta`` rows split, the largest first, under the lock this call
        holds, so an always-on loader, which never lets the maintenance DAG in, keeps its segments
        the thesis's size. Decided from the rows per segment; only the largest due segments' keys
        are counted (per slot, up to four times the limit of them), and only the first ``limit``
        that can be split are rewritten. The next run starts warm from this run's state, handed to
        the new segments (``etl.core.layout.carried_across``).
        A failure fails the call and keeps the record (another interval's unfinished run only
        defers the split, with a warning, as it would have without a kill); a kill ends it, and
        whichever load takes the lock next makes it (``_settle_run_ends``), or finds it made (the
        layout file names the run whose end made it). Whether the layout changed."""
        record = owed_by(self.cfg, run_key)
        if record is None:
            return False
        done = self._split(record)  # a failure raises past this: the record is kept
        settled(self.cfg, run_key)
        return bool(done and done["split"])

    def _split(self, record: dict) -> dict | None:
        """The split ``record`` owes, as the rebalance reports it (``None``: nothing split)."""
        run_key, limit = record["run_key"], int(record["limit"])
        cfg = self.cfg.replace(theta=int(record["theta"]))  # the run's own configuration's, as the limit
        if not isinstance(self.layout, SlotArray) or split_after(self.cfg) == run_key:  # made (a retry after it)
            return None
        self.protocol.verify_lock()
        rows = rows_per_segment(self.tables.read("key_map"))
        # the largest first; the keys of up to four times the bound are counted, so that one that
        # cannot be split is passed over without reading every grown segment
        due = segments_to_split(self.layout, rows, cfg.theta, 4 * limit)
        if not due:
            return None
        started = time.time()
        try:
            done = rebalance(self.spark, cfg, merge=False, segments=due, limit=limit,
                             verify=self.protocol.verify_lock, run_key=run_key)
        except RebalanceBlocked as exc:  # another interval's run is open: its pending tuples are by segment
            log.warning("key_map's segments %s are above 2*theta rows and not split: %s", due, exc)
            return None
        log.info("key_map: segments %s split between runs in %.1f s (%d -> %d segments, %d rows moved)",
                 sorted(done["split"]), time.time() - started, done["segments_before"], done["segments_after"],
                 done["rows_moved"])
        return done

    def _settling_strategy(self, owner: str | None, fresh: bool = False):
        """The strategy that closes a finished run: its owner's (a crash right after the flush
        commit may have left the owner's run snapshot behind). ``fresh``: a new one even when
        this loader's is the owner's (settling another run must not touch this loader's)."""
        if not fresh and (owner is None or owner == self.strategy.name):
            return self.strategy
        try:
            return get_strategy(owner or self.spec.name, self.spark, self.cfg, self.layout, self.tables)
        except ConfigError:  # the warehouse has been laid out for another strategy since
            if not fresh:
                return self.strategy
            return get_strategy(self.spec.name, self.spark, self.cfg, self.layout, self.tables)

    def _run_rows(self, interval: Interval):
        """The run's rows of ``ingested_updates``, read when a step needs them (a read of a table
        written since is a new Delta snapshot to load)."""
        return self.tables.read("ingested_updates").where(f"run_key = '{interval.run_key}'")

    def _plan(self, interval: Interval, closed_windows: int | None = None):
        """The run's load batches, each the arrival windows it spans (and their sizes). The
        partitioned strategies switch granularity by backlog (``policy.plan_batches``): under a
        heavy backlog one batch spans ``block_factor`` arrival windows and takes the first window's
        ``batch_index``. The plan is a pure function of the run's ingested counts, so a restart
        plans the same batches; with ``closed_windows`` only the batches those windows settle for
        good (``stream_plan.settled_groups``)."""
        if self._counts is None:
            self._counts = {int(r[0]): int(r[1]) for r in self._run_rows(interval).groupBy("batch_index").count().collect()}
        counts = self._counts
        planned = load_plan(self.strategy.name, counts, self.cfg)
        groups = [group for group, _ in planned]
        if closed_windows is not None:
            groups = settled_groups(planned, closed_windows, n_windows(interval, self.cfg.micro_batch_seconds))
        return groups, {g[0]: sum(counts[w] for w in g) for g in groups}

    # ------------------------------------------------------------------ the windows the stream holds

    def _hold(self, held: list[HeldWindows] | None) -> None:
        """Keep the windows the caller holds while the run goes on as this loader left it; anything
        else held before is dropped (another run, or the run taken up again)."""
        if not (self._continuing and self._alone):
            self._release_held()
        self._held += held or []

    def _held_rows(self, groups: list[list[int]], todo: list[int]):
        """The held rows, when they hold every window of the batches ``todo`` (else ``None``: the
        table is read)."""
        wanted = {w for g in groups if g[0] in set(todo) for w in g}
        have = {w for h in self._held for w in h.windows()}
        if not self._held or not wanted <= have:
            return None
        return reduce(lambda a, b: a.unionByName(b), [h.rows for h in self._held])

    def _release_held(self, groups: list[list[int]] | None = None, done: set[int] | None = None,
                      everything: bool = True) -> None:
        """Free the held windows whose batches are all committed (``everything``: all of them)."""
        finished = set() if everything else {w for g in groups if g[0] in done for w in g}
        counts = self._counts or {}
        kept = []
        for h in self._held:
            if everything or all(w in finished for w in h.windows() if counts.get(w)):
                h.rows.unpersist()
            else:
                kept.append(h)
        self._held = kept


def batched(ingested, groups: list[list[int]], progress=None):
    """``ingested`` with each row's ``batch_index`` that of the batch its window is in (the first
    window's, when a batch spans several)."""
    merged = [g for g in groups if len(g) > 1]
    if not merged:
        return ingested
    if progress:
        progress(f"block granularity: {sum(map(len, merged))} arrival windows in {len(merged)} batches")
    first_of = int_map((w, g[0]) for g in groups for w in g)  # an hour of 10-s windows: 720 literals
    return ingested.withColumn("batch_index", first_of[F.col("batch_index")])
