"""The partitioned join's steps. Every decision is ``etl.core.policy.PartitionPolicy``'s; this
module only moves data. One step per micro-batch:

1. the batch's tuples get their segment (Spark), per-epoch segment counts are collected (small)
   and fed to the policy, which routes each segment: resident (join now) or waiting;
2. waiting tuples are held in the wait buffer (``wait_buffer.py``, in memory);
3. the policy names the segments to probe; ONE release is built: the batch's resident tuples
   joined with the in-memory copy (``resident.py``), plus every pending tuple of the probed
   segments joined with a partition-pruned read of those segments of ``key_map``; a probed
   segment may then be admitted and another evicted.

A key's tuples are therefore released in arrival order, which is all the loader needs for
exactness. The strategy's state is a snapshot plus a replay: after a crash (or when another
session loaded meanwhile), ``begin`` gathers what the done steps brought (counts from
``ingested_updates``, segment growth from ``outcome_log``, sizes at run start from the run
snapshot), the pure ``policy.replay`` brings the policy to where the uninterrupted run stood, and
the wait buffer and the resident copy are filled again from what it names: the pending segments'
rows of ``ingested_updates`` since they began to wait, the resident segments of ``key_map``.
Nothing of the join's state is written on a step's delay path.

Between runs the join stays warm (``carry_join_state``): a run's flush, once its probes are
decided and before its commit, records the resident segments and decayed frequencies
(``join_state/<strategy>.json`` under ``meta_root``); the next run's start warms its policy from
them (``PartitionPolicy.warm``) and keeps what it started from in its run snapshot, so a restart
replays from the same state. Recorded before the flush commits, the state is the same after any
crash (a restart redoes the flush and records it again), so the same history of runs gives the
same tables whichever loader ran them (the stream, scheduled runs, a backfill). The state
decides when a tuple is joined, never its outcome; which batch releases it, and so batch and key
numbering, may differ from a cold run's, as between strategies.
"""

from __future__ import annotations

import hashlib
import json
import logging
from functools import reduce

from pyspark.sql import Window
from pyspark.sql import functions as F

from etl.core.faults import crash_point
from etl.core.layout import SlotArray, carried_across, layout_from_json
from etl.core.policy import PartitionPolicy, SegmentSizes, StepArrivals, replay
from etl.core.sizing import configured_sizes, run_sizes, segment_bytes
from etl.core.spark_conf import COMMIT_SQL_SETTINGS
from etl.io.files import write_json
from etl.io.spark import sql_settings
from etl.strategies.base import KEY, JoinStats, JoinStrategy, by_key, hold, lookup_join, new_keys_by_segment, rows_per_segment
from etl.strategies.partitioned.resident import ResidentSet
from etl.strategies.partitioned.wait_buffer import WaitBuffer
from etl.transforms.columns import ints_in
from etl.transforms.layout import segment_column

log = logging.getLogger(__name__)


class PartitionedJoin(JoinStrategy):
    def __init__(self, spark, cfg, layout, variant: str, tables=None) -> None:
        super().__init__(spark, cfg, layout, tables)
        self.name = f"partitioned-{variant}"
        self.policy = PartitionPolicy.from_config(cfg)
        self.segment_of = segment_column(layout)
        self.sizes = SegmentSizes({}, 128.0)
        self.resident = ResidentSet(lambda segments: self._with_segment(self._segments(segments)))
        self.run_key = None
        self._began = None  # the run this object began (or replayed): only its flush records the state
        self.wait_buffer = WaitBuffer(self.update_columns)
        self._stats = JoinStats()
        self._pending_bytes_read = 0

    # ------------------------------------------------------------------ helpers

    def _segments(self, segments: list[int]):
        """The lookup rows of ``segments`` of key_map (a partition-pruned read)."""
        return self.lookup_columns(self.key_map().where(ints_in("segment_id", segments)))

    def _with_segment(self, df):
        return df.withColumn("segment_id", self.segment_of(F.col("source_id"), F.col("natural_key")))

    def _arrivals(self, df, offset: int) -> StepArrivals:
        """Per-epoch segment counts of ``df`` in arrival order, epochs numbered from ``offset``
        tuples; with them, for the wait bound, each segment's earliest arrival and the latest
        arrival (epoch seconds; one Spark job for all three: planned without adaptive execution,
        which runs its shuffle stage as a job of its own, one job more a step)."""
        ranked = df.select(
            "segment_id", F.unix_micros("arrival_ts").alias("_t"),
            (F.row_number().over(Window.orderBy("arrival_ts", "update_id")) - 1 + offset).alias("_i"),
        )
        with sql_settings(self.spark, COMMIT_SQL_SETTINGS):
            rows = (
                ranked.groupBy((F.col("_i") / self.cfg.tau).cast("long").alias("epoch"), "segment_id")
                .agg(F.count(F.lit(1)).alias("count"), F.min("_t").alias("first"), F.max("_t").alias("last"))
                .collect()
            )
        by_epoch: dict[int, dict[int, int]] = {}
        oldest: dict[int, float] = {}
        for r in rows:
            seg = int(r["segment_id"])
            by_epoch.setdefault(int(r["epoch"]), {})[seg] = int(r["count"])
            oldest[seg] = min(oldest.get(seg, r["first"] / 1e6), r["first"] / 1e6)
        return StepArrivals(by_epoch, oldest, max((r["last"] / 1e6 for r in rows), default=None))

    def _sizes_now(self) -> dict:
        # A row counts ``r_bytes``, never the table's stored bytes over its rows: those move with
        # compaction and deletion vectors, so two loaders of one history would size (and so
        # admit) differently.
        return {
            "sizes": {str(seg): n for seg, n in rows_per_segment(self.key_map()).items()},
            "row_bytes": float(self.cfg.r_bytes),
        }

    def _run_start(self) -> dict:
        """What a run fixes at its start: the segments' sizes and the wait buffer's and
        ``n_invoke``'s, derived from them unless set (``etl.core.sizing``)."""
        data = self._sizes_now()
        rows = sum(data["sizes"].values())
        sizes = configured_sizes(self.cfg, segment_bytes(self.cfg.theta, data["row_bytes"], rows, len(data["sizes"])))
        return {**data, "n_invoke": sizes.n_invoke, "wait_buffer_tuples": sizes.wait_buffer_tuples,
                "carried": self._carried_in({int(seg): n for seg, n in data["sizes"].items()})}

    # ------------------------------------------------------------------ carried between runs

    def _carried_path(self):
        return self.cfg.meta_path / "join_state" / f"{self.name}.json"

    def _layout_id(self) -> str:
        return hashlib.sha256(self.layout.to_json().encode()).hexdigest()[:16]

    def _carried_in(self, rows: dict[int, int]) -> dict | None:
        """The previous run's end state, named by key_map's segments now: a split or merge since
        (a run's end, maintenance's rebalance) hands each old segment's frequency to the segments
        its keys are in now (``etl.core.layout.carried_across``, from the rows per segment now);
        a layout that cannot be matched to the old one (a relayout) starts the run cold."""
        path = self._carried_path()
        if not self.cfg.carry_join_state or not path.exists():
            return None
        try:
            state = json.loads(path.read_text())
            state["resident"] = [int(seg) for seg in state["resident"]]
            state["frequency"] = [[int(seg), float(value)] for seg, value in state["frequency"]]
        except (ValueError, KeyError, TypeError) as e:
            log.warning("%s: %s is unreadable (%s): this run starts cold", self.name, path, e)
            return None
        carried = {"resident": state["resident"], "frequency": state["frequency"], "run_key": state.get("run_key")}
        if state.get("layout") == self._layout_id():
            return carried
        old = layout_from_json(state["layout_json"]) if state.get("layout_json") else None
        mapped = (carried_across(dict(state["frequency"]), state["resident"], old, self.layout, rows)
                  if isinstance(old, SlotArray) and isinstance(self.layout, SlotArray) else None)
        if mapped is None:
            log.info("%s: key_map was laid out anew since run %s ended: this run starts cold", self.name, state.get("run_key"))
            return None
        frequency, resident = mapped
        log.info("%s: key_map's segments were split or merged since run %s ended: its state is carried to them",
                 self.name, state.get("run_key"))
        return {**carried, "resident": resident, "frequency": [[seg, value] for seg, value in sorted(frequency.items())]}

    def _carry_out(self) -> None:
        """At the flush, its probes decided, before its commit: a crash from here on is restarted
        by redoing the flush (the same state, recorded again) or, after the commit, by settling
        the run, which leaves this state as it is."""
        if not self.cfg.carry_join_state or self._began != self.run_key:
            return
        write_json(self._carried_path(), {"layout": self._layout_id(), "layout_json": self.layout.to_json(),
                                          "run_key": self.run_key, **self.policy.carried()},
                   indent=None, durable=True)  # atomic: the previous run's state or this one's
        crash_point("partitioned.join_state_carried")

    def lookup(self, probes):
        """Only the segments the probes fall in are read (partition pruning): a fact's keys cost
        the dimension's touched partitions, not the whole of it."""
        with_segment = self._with_segment(probes)
        segments = sorted(int(r[0]) for r in with_segment.select("segment_id").distinct().collect())
        if not self.sizes.tuples:  # no run began here (a fact's lookups): the segments' sizes once
            data = self._sizes_now()
            self.sizes = SegmentSizes({int(k): v for k, v in data["sizes"].items()}, float(data["row_bytes"]))
        self.lookup_stats = JoinStats(keymap_bytes_read=sum(self.sizes.bytes(s) for s in segments), segments_probed=len(segments))
        return lookup_join(with_segment, self._segments(segments)).drop("segment_id")

    # ------------------------------------------------------------------ run start / restart

    def begin(self, run_key: str, ingested, done_steps: list[int], ledger_rows: list) -> None:
        self.run_key = run_key
        self.wait_buffer.release()

        data = self.run_snapshot(self._run_start)
        self.sizes = SegmentSizes({int(k): v for k, v in data["sizes"].items()}, float(data["row_bytes"]))
        n_invoke, wait_buffer_tuples = run_sizes(data, self.cfg)
        self.policy.size_for_run(n_invoke, wait_buffer_tuples)
        if data.get("carried"):
            self.policy.warm(data["carried"], self.sizes)
            log.info("run %s starts warm from run %s's end: %d resident segments", run_key,
                     data["carried"].get("run_key"), len(self.policy.resident))
        self._began = run_key
        log.info("run %s: wait buffer %d tuples, n_invoke %d (docs/partitioned-join.md, \"Sizes derived from the "
                 "memory\")", run_key, wait_buffer_tuples, n_invoke)

        steps = sorted(i for i in done_steps if i >= 0)
        if steps:
            # Read once for the replay's counts and the wait buffer's rows (a fact's: with the keys
            # of its references, from each dimension's key_map).
            done = self._with_segment(ingested.where(ints_in("batch_index", steps))).localCheckpoint(eager=True)
            replay(self.policy, self.sizes, steps, self._done_arrivals(done, steps),
                   self._done_new_keys(run_key, steps, ledger_rows))
            self.wait_buffer.restore(done, self.policy.pending_since, steps[-1])
        if self.policy.resident:
            self._pending_bytes_read += sum(self.sizes.bytes(s) for s in self.policy.resident)
            self.resident.sync(set(self.policy.resident))

    def _done_arrivals(self, rows, steps: list[int]) -> dict[int, StepArrivals]:
        n_of = {int(r["batch_index"]): int(r["count"]) for r in rows.groupBy("batch_index").count().collect()}
        out, offset = {}, 0
        for step in steps:
            out[step] = self._arrivals(rows.where(F.col("batch_index") == step), offset)
            offset += n_of.get(step, 0)
        return out

    def _done_new_keys(self, run_key: str, steps: list[int], ledger_rows: list) -> dict[int, dict[int, int]]:
        """Per done step, the keys its commit inserted per segment (from ``outcome_log``)."""
        step_of = {int(r["batch_seq"]): int(r["batch_index"]) for r in ledger_rows}
        new_keys = (
            self._with_segment(self.tables.read("outcome_log").where(f"run_key = '{run_key}' AND outcome = 'new'"))
            .groupBy("batch_seq", "segment_id")
            .count()
            .collect()
        )
        grown: dict[int, dict[int, int]] = {}
        for r in new_keys:
            step = step_of.get(int(r["batch_seq"]))
            if step is not None:
                grown.setdefault(step, {})[int(r["segment_id"])] = int(r["count"])
        return grown

    # ------------------------------------------------------------------ one step

    def submit(self, batch, batch_index: int) -> list:
        # Held by the first job that reads it, the arrivals' count (one job for both); the wait
        # buffer's part of it and the resident tuples' join read it from memory.
        b = self._with_segment(batch).localCheckpoint(eager=False)
        joined_segs, waiting_segs = self.policy.observe(self._arrivals(b, self.policy.freq.seen), batch_index)
        if waiting_segs:
            self.wait_buffer.append(b.where(ints_in("segment_id", waiting_segs)), batch_index, waiting_segs)
            self.wait_buffer.forget_released(self.policy.last_probe_step)  # folds the parts past MAX_PARTS
        parts = []
        if joined_segs:
            parts.append(self.resident.join(b.where(ints_in("segment_id", joined_segs)).select(*self.update_columns)))
        return [self._probe(self.policy.probes_due(), batch_index, parts)]

    def flush(self) -> list:
        release = self._probe(self.policy.drain(), -1, [])
        self._carry_out()  # what the next run starts from, before the flush commits
        return [release]

    def _probe(self, due: list[int], step: int, parts: list):
        """Join the pending tuples of ``due`` with their segments; admit/evict; return the release."""
        stats = JoinStats(keymap_bytes_read=self._pending_bytes_read)
        self._pending_bytes_read = 0
        if due:
            pending = self.wait_buffer.pending(due, self.policy.last_probe_step)
            if pending is None and any(self.policy.pending.get(s) for s in due):
                # Never expected: the probe below would forget tuples the buffer does not hold.
                raise RuntimeError(f"run {self.run_key}: the wait buffer holds none of the pending tuples of segments {due}")
            stats.keymap_bytes_read += sum(self.sizes.bytes(s) for s in due)
            for seg in due:
                decision = self.policy.probed(seg, self.sizes.bytes(seg), step)
                stats.segments_probed += 1
                if decision is not None and decision.admitted == seg:
                    stats.segments_admitted += 1
                    stats.segments_evicted += len(decision.evicted)
            self.wait_buffer.forget_released(self.policy.last_probe_step)
            # The probed segments are read once, for the release's join and for the copy of those
            # admitted. With an admission that read is held (a local checkpoint, planned now: its
            # files and the logged tail merged over them are fixed here) by the release's own
            # Spark job, or at once when nothing is released; without one it is a plain part of
            # the release. The copy is synced once, after every decision: a segment admitted
            # early in the loop may be the victim of a later admission. The run's flush probes
            # most of key_map for a few of its keys: there the segments it does not admit are
            # narrowed to the pending keys as they are read (a broadcast semi-join, one job more
            # once a run) instead of shuffled whole (at 20 million keys, 17 million rows shuffled
            # for 99,208 tuples).
            admitted = (set(self.policy.resident) - self.resident.loaded) & set(due)
            probed = lookup = None
            if admitted or pending is not None:
                read = self._with_segment(self._segments(due))
                narrow = step < 0 and pending is not None and not set(due) <= admitted
                if admitted:  # held by key, as the copy it joins (and the release's join's shuffle)
                    whole = read.where(ints_in("segment_id", admitted)) if narrow else read
                    probed = hold(by_key(whole), eager=pending is None)
                lookup = probed if probed is not None else read
                if narrow:
                    rest = read.where(~ints_in("segment_id", admitted)) if admitted else read
                    rest = rest.join(F.broadcast(pending.select(*KEY)), KEY, "left_semi")
                    lookup = rest if probed is None else probed.unionByName(rest)
            self.resident.sync(set(self.policy.resident), probed=(set(due), probed) if admitted else None)
            if pending is not None:
                parts.append(lookup_join(pending, lookup.drop("segment_id")))
        stats.resident_bytes = self.policy.resident_bytes
        stats.wait_buffer_tuples = self.policy.waiting
        self._stats = stats
        if not parts:
            return None
        return reduce(lambda a, c: a.unionByName(c), parts)

    def keys_committed(self, km, new_keys: dict[int, int] | None = None) -> None:
        """Fold a commit's key_map changes into the segment sizes and the resident copy."""
        grown = new_keys_by_segment(km, new_keys)
        evicted = self.sizes.grow(grown, self.policy)
        if evicted:
            self._stats.segments_evicted += len(evicted)
            self.resident.sync(set(self.policy.resident))
        self.resident.fold(km)

    def end(self) -> None:
        self.wait_buffer.release()
        crash_point("partitioned.wait_buffer_released")  # the run's end: only its snapshot is left
        self.forget_snapshot()

    def stats(self) -> JoinStats:
        return self._stats
