"""``partitioned-range`` / ``partitioned-hash``: the partition-based hybrid join (papers/004 §6.3).

Mechanism only; every decision is ``etl.core.policy.PartitionPolicy``'s. One step per micro-batch:

1. the batch's tuples get their segment (Spark), per-epoch segment counts are collected (small)
   and fed to the policy, which routes each segment: resident (join now) or waiting;
2. waiting tuples are appended to the durable ``wait_buffer`` table (txnVersion = batch index,
   so a replayed step appends nothing twice);
3. the policy names the segments to probe; ONE release is built: the batch's resident tuples
   joined with the in-memory copy, plus every pending tuple of the probed segments joined with a
   partition-pruned read of those segments of ``key_map``; a probed segment may then be admitted
   and another evicted.

A key's tuples are therefore released in arrival order, which is all the loader needs for
exactness. The resident copy is updated from each commit (``keys_committed``), never re-read.
After a crash, ``begin`` replays the policy over the steps already in the ledger (counts from
``ingested_updates``, segment growth from ``outcome_log``, sizes at run start from a snapshot), so
the rest of the run releases exactly what an uninterrupted run would.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import Window
from pyspark.sql import functions as F

from etl.core.faults import crash_point
from etl.core.policy import PartitionPolicy
from etl.io.tables import read, table_bytes
from etl.strategies.base import KEY, KM_COLUMNS, UPDATE_COLUMNS, JoinStats, JoinStrategy
from etl.transforms.layout import segment_column

KM = list(KM_COLUMNS)


class PartitionedJoin(JoinStrategy):
    def __init__(self, spark, cfg, layout, variant: str) -> None:
        super().__init__(spark, cfg, layout)
        self.name = f"partitioned-{variant}"
        self.policy = PartitionPolicy.from_config(cfg)
        self.segment_of = segment_column(layout)
        self.sizes: dict[int, int] = {}  # segment -> tuples in key_map
        self.row_bytes = 1.0
        self.last_probe_step: dict[int, int] = {}
        self.resident_df = None  # key_map rows of exactly the segments in ``loaded``
        self.loaded: set[int] = set()
        self.run_key = None
        self._stats = JoinStats()
        self._pending_bytes_read = 0

    # ------------------------------------------------------------------ helpers

    def _wait_buffer_path(self) -> str:
        return self.cfg.table_path("wait_buffer")

    def _bytes(self, segment: int) -> int:
        return int(self.sizes.get(segment, 0) * self.row_bytes)

    def _with_segment(self, df):
        return df.withColumn("segment_id", self.segment_of(F.col("source_id"), F.col("natural_key")))

    def _epoch_counts(self, df, offset: int):
        """Per-epoch segment counts of ``df`` in arrival order, epochs numbered from ``offset``
        tuples; with them, for the wait bound, each segment's earliest arrival and the latest
        arrival (epoch seconds; one Spark job for all three)."""
        ranked = df.select(
            "segment_id", F.unix_micros("arrival_ts").alias("_t"),
            (F.row_number().over(Window.orderBy("arrival_ts", "update_id")) - 1 + offset).alias("_i"),
        )
        rows = (
            ranked.groupBy((F.col("_i") / self.cfg.tau).cast("long").alias("epoch"), "segment_id")
            .agg(F.count(F.lit(1)).alias("count"), F.min("_t").alias("first"), F.max("_t").alias("last"))
            .collect()
        )
        out: dict[int, dict[int, int]] = {}
        oldest: dict[int, float] = {}
        for r in rows:
            seg = int(r["segment_id"])
            out.setdefault(int(r["epoch"]), {})[seg] = int(r["count"])
            oldest[seg] = min(oldest.get(seg, r["first"] / 1e6), r["first"] / 1e6)
        now = max((r["last"] / 1e6 for r in rows), default=None)
        return out, oldest, now

    def _observe_and_route(self, counted) -> tuple[set[int], set[int]]:
        """Feed one step's per-epoch counts to C_k, then route its segments (live and in replay)."""
        by_epoch, oldest, now = counted
        self.policy.freq.observe_counts(by_epoch)
        totals: dict[int, int] = {}
        for seg_counts in by_epoch.values():
            for seg, n in seg_counts.items():
                totals[seg] = totals.get(seg, 0) + n
        return self.policy.route(totals, oldest, now)

    # ------------------------------------------------------------------ run start / restart

    def begin(self, run_key: str, ingested, done_steps: list[int], ledger_rows: list) -> None:
        self.run_key = run_key

        def sizes_now() -> dict:
            # Rows per segment: only the partition column is selected, so Spark answers from the
            # Parquet footers' row counts without reading key_map's data.
            counts = self.key_map().groupBy("segment_id").count().collect()
            total_rows = sum(int(r["count"]) for r in counts)
            return {
                "sizes": {str(r["segment_id"]): int(r["count"]) for r in counts},
                "row_bytes": (table_bytes(self.spark, self.cfg, "key_map") / total_rows) if total_rows else 128.0,
            }

        data = self.run_snapshot(sizes_now)
        self.sizes = {int(k): v for k, v in data["sizes"].items()}
        self.row_bytes = float(data["row_bytes"]) or 128.0

        steps = sorted(i for i in done_steps if i >= 0)
        if steps:
            seq_of = {int(r["batch_index"]): int(r["batch_seq"]) for r in ledger_rows}
            rows = self._with_segment(ingested.where(F.col("batch_index").isin(steps)))
            counts_by_step: dict[int, tuple] = {}
            per_step = rows.groupBy("batch_index").count().collect()
            n_of = {int(r["batch_index"]): int(r["count"]) for r in per_step}
            offset = 0
            for step in steps:
                counts_by_step[step] = self._epoch_counts(rows.where(F.col("batch_index") == step), offset)
                offset += n_of.get(step, 0)
            new_keys = (
                self._with_segment(read(self.spark, self.cfg, "outcome_log").where(f"run_key = '{run_key}' AND outcome = 'new'"))
                .groupBy("batch_seq", "segment_id")
                .count()
                .collect()
            )
            grown: dict[int, dict[int, int]] = {}
            for r in new_keys:
                grown.setdefault(int(r["batch_seq"]), {})[int(r["segment_id"])] = int(r["count"])
            for step in steps:
                self._observe_and_route(counts_by_step[step])
                for seg in self.policy.probes_due():
                    self.policy.probed(seg, self._bytes(seg))
                    self.last_probe_step[seg] = step
                self._grow(grown.get(seq_of.get(step, -1), {}))
        if self.policy.resident:
            self._pending_bytes_read += sum(self._bytes(s) for s in self.policy.resident)
            self._sync_resident()

    # ------------------------------------------------------------------ one step

    def submit(self, batch, batch_index: int) -> list:
        b = self._with_segment(batch).localCheckpoint(eager=True)
        joined_segs, waiting_segs = self._observe_and_route(self._epoch_counts(b, self.policy.freq.seen))
        if waiting_segs:
            waiting = b.where(F.col("segment_id").isin(sorted(waiting_segs))).select(
                F.lit(self.run_key).alias("run_key"), *UPDATE_COLUMNS, F.lit(batch_index).alias("batch_index"), "segment_id"
            )
            (
                waiting.write.format("delta")
                .mode("append")
                .option("txnAppId", f"wait_buffer:{self.run_key}")
                .option("txnVersion", batch_index)
                .save(self._wait_buffer_path())
            )
            crash_point("partitioned.wait_buffer_appended")
        parts = []
        if joined_segs:
            mine = b.where(F.col("segment_id").isin(sorted(joined_segs))).select(*UPDATE_COLUMNS)
            parts.append(mine.join(self.resident_df.drop("segment_id"), KEY, "left"))
        release = self._probe(self.policy.probes_due(), batch_index, parts)
        b.unpersist()
        return [release]

    def flush(self) -> list:
        return [self._probe(self.policy.drain(), -1, [])]

    def _probe(self, due: list[int], step: int, parts: list):
        """Join the pending tuples of ``due`` with their segments; admit/evict; return the release."""
        from functools import reduce

        stats = JoinStats(keymap_bytes_read=self._pending_bytes_read)
        self._pending_bytes_read = 0
        if due:
            wait = self.spark.read.format("delta").load(self._wait_buffer_path()).where(
                (F.col("run_key") == self.run_key) & F.col("segment_id").isin(due)
            )
            pending = wait.where(self._pending_condition(due)).select(*UPDATE_COLUMNS)
            stats.keymap_bytes_read += sum(self._bytes(s) for s in due)
            for seg in due:
                decision = self.policy.probed(seg, self._bytes(seg))
                self.last_probe_step[seg] = step if step >= 0 else 2**31 - 1
                stats.segments_probed += 1
                if decision is not None and decision.admitted == seg:
                    stats.segments_admitted += 1
                    stats.segments_evicted += len(decision.evicted)
            segment_data = self.lookup_columns(self.key_map().where(F.col("segment_id").isin(due)))
            if (set(self.policy.resident) - self.loaded) & set(due):
                # A segment is admitted: read the probed segments once, for the join and the copy.
                segment_data = segment_data.withColumn(
                    "segment_id", self.segment_of(F.col("source_id"), F.col("natural_key"))
                ).localCheckpoint(eager=True)
                self._sync_resident(probed=(set(due), segment_data))
                segment_data = segment_data.drop("segment_id")
            else:
                # A segment admitted early in this loop may be the victim of a later admission.
                self._sync_resident()
            parts.append(pending.join(segment_data, KEY, "left"))
        stats.resident_bytes = self.policy.resident_bytes
        stats.wait_buffer_tuples = self.policy.waiting
        self._stats = stats
        if not parts:
            return None
        return reduce(lambda a, c: a.unionByName(c), parts)

    def _pending_condition(self, due: list[int]):
        """Rows of ``due`` still pending: those appended after their segment's last probe. One term
        per distinct last-probe step, not per segment: an OR nested once per segment overflowed
        the JVM's stack in Catalyst when a full buffer released hundreds of segments at once
        (found at 20 million keys, 1,024 segments)."""
        by_step: dict[int, list[int]] = {}
        for s in due:
            by_step.setdefault(self.last_probe_step.get(s, -(2**31)), []).append(s)
        terms = [F.col("segment_id").isin(sorted(segs)) & (F.col("batch_index") > step) for step, segs in sorted(by_step.items())]
        while len(terms) > 1:  # a balanced OR: depth log2(terms)
            terms = [terms[i] | terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
        return terms[0]

    def _sync_resident(self, probed: tuple[set[int], object] | None = None) -> None:
        """Make the in-memory copy hold exactly the policy's resident segments: drop evicted ones,
        read newly admitted ones. A segment is never held twice, nor held after its eviction
        (where commits would no longer refresh it). ``probed`` is (segments, their key_map rows
        with ``segment_id``) just read by a probe: admitted ones among them are taken from it."""
        from functools import reduce

        want = set(self.policy.resident)
        if want == self.loaded:
            return
        gone, new = self.loaded - want, sorted(want - self.loaded)
        df = self.resident_df
        if df is not None and gone:
            df = df.where(~F.col("segment_id").isin(sorted(gone)))
        from_probe = sorted(set(new) & probed[0]) if probed else []
        to_read = [s for s in new if s not in from_probe]
        parts = [df] if df is not None else []
        if from_probe:
            parts.append(probed[1].where(F.col("segment_id").isin(from_probe)))
        if to_read:
            parts.append(
                self.lookup_columns(self.key_map().where(F.col("segment_id").isin(to_read))).withColumn(
                    "segment_id", self.segment_of(F.col("source_id"), F.col("natural_key"))
                )
            )
        df = reduce(lambda a, b: a.unionByName(b), parts) if parts else None
        self.resident_df = df.localCheckpoint(eager=True) if df is not None else None
        self.loaded = want

    def _grow(self, new_keys: dict[int, int]) -> list[int]:
        """Segments gained keys: update sizes and the policy's accounting; returns evicted segments."""
        evicted = []
        for seg in sorted(new_keys):
            self.sizes[seg] = self.sizes.get(seg, 0) + new_keys[seg]
            evicted += self.policy.resize(seg, self._bytes(seg))
        return evicted

    def keys_committed(self, km) -> None:
        """Fold a commit's key_map changes into the resident copy and the segment sizes."""
        grown = {int(r["segment_id"]): int(r["count"]) for r in km.where(F.col("is_new")).groupBy("segment_id").count().collect()}
        evicted = self._grow(grown)
        if evicted:
            self._stats.segments_evicted += len(evicted)
            self._sync_resident()
        if not self.loaded:
            return
        changed = km.where(F.col("segment_id").isin(sorted(self.loaded)))
        old = self.resident_df
        updated = changed.join(old.drop("segment_id"), KEY, "left").select(
            *KEY,
            F.col("surrogate_key").alias("km_surrogate_key"),
            F.coalesce(F.col("applied_row_hash"), F.col("km_row_hash")).alias("km_row_hash"),
            F.greatest(F.col("km_last_source_seq"), F.col("max_source_seq")).alias("km_last_source_seq"),
            "segment_id",
        )
        self.resident_df = (
            old.join(changed.select(*KEY), KEY, "left_anti").unionByName(updated).localCheckpoint(eager=True)
        )

    def end(self) -> None:
        """The run is flushed: its wait-buffer rows are garbage; drop them in one commit."""
        DeltaTable.forPath(self.spark, self._wait_buffer_path()).delete(f"run_key = '{self.run_key}'")
        crash_point("partitioned.wait_buffer_released")
        self.forget_snapshot()

    def stats(self) -> JoinStats:
        return self._stats
