"""``meshjoin``: MESHJOIN over Delta (papers/004 §6.2, Fig 6.2); the schedule is ``etl.core.mesh_policy``'s.

Each ``submit`` steps the cycle through the slots since the previous one: it reads the disk
segments of those slots with ONE partition-pruned read of ``key_map`` and joins them with every
queued tuple (the queue lives in executor memory as a checkpointed DataFrame; Spark's join builds
the hash table). The queue segments that have met all ``k`` disk segments expire and are released.

Two things make it exact while ``key_map`` changes under it:

- **Keys that land behind a tuple.** A tuple may have passed the segment where, later in its
  cycle, an earlier tuple's new key (or a new version of a row) is committed. Every commit's
  key_map changes are kept in an *overlay* (their post-commit values, computed from the release
  and the commit, never re-read); at expiry a tuple takes the overlay's values for its key when
  there are any. The overlay holds only changes committed since the oldest queued segment
  entered, so it stays small; a released tuple therefore always sees ``key_map`` as it is at its
  release, and no natural key can get two surrogate keys.
- **Restart.** The queue's tuples are the run's ``ingested_updates`` of the slots not yet expired
  (durable before the load starts), the cycle position is the slot number, and the ledger says
  which slots were stepped. ``begin`` rebuilds the queue by joining those tuples with the disk
  segments they had already met, read as they are now (at most one cycle's reads, once per
  restart), which gives exactly what the uninterrupted run would release.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from etl.core.mesh_policy import MeshSchedule, disk_segment_count, disk_segment_of, group_boundaries
from etl.strategies.base import KEY, KM_COLUMNS, JoinStats, JoinStrategy, committed_lookup_columns, lookup_join, new_keys_by_segment, rows_per_segment
from etl.transforms.columns import ints_in

KM = list(KM_COLUMNS)


class MeshJoin(JoinStrategy):
    name = "meshjoin"

    def __init__(self, spark, cfg, layout, tables=None) -> None:
        super().__init__(spark, cfg, layout, tables)
        self.schedule = MeshSchedule(1)
        self.boundaries: list[int] = []
        self.sizes: dict[int, int] = {}  # disk segment -> key_map rows
        self.row_bytes = 128.0
        self.queue = None  # update columns + KM + _q (slot the tuple was queued at)
        self.queued: dict[int, int] = {}  # slot -> queued tuples
        self.stepped = -1  # last slot stepped
        self.overlay = None  # KEY + KM + _at (slot of the commit that changed the row)
        self.released = None  # the last release, to compute the overlay's post-commit values
        self.run_key = None
        self.batch_sizes: dict[int, int] = {}
        self._pending_read = 0
        self._stats = JoinStats()

    # ------------------------------------------------------------------ helpers

    def _disk_segment(self, partition_col):
        """Spark twin of ``mesh_policy.disk_segment_of``."""
        pos = F.lit(0)
        for b in self.boundaries:
            pos = pos + (partition_col >= F.lit(b)).cast("int")
        return pos.cast("int")

    def _read_disk_segments(self, positions: list[int]):
        km = self.key_map().withColumn("_p", self._disk_segment(F.col("segment_id")))
        km = km.where(ints_in("_p", positions))
        return km.select(
            *KEY,
            F.col("surrogate_key").alias("s_km_surrogate_key"),
            F.col("row_hash").alias("s_km_row_hash"),
            F.col("last_source_seq").alias("s_km_last_source_seq"),
            "_p",
        )

    def _bytes(self, positions) -> int:
        return int(sum(self.sizes.get(p, 0) for p in positions) * self.row_bytes)

    def _meets(self, lo: int, hi: int):
        """Spark twin of ``MeshSchedule.meets`` over the columns ``_q`` and ``_p``."""
        k = self.schedule.k
        first = F.greatest(F.lit(lo + 1), F.col("_q"))
        length = F.least(F.lit(hi), F.col("_q") + F.lit(k - 1)) - first + 1
        return F.col("_p").isNotNull() & (length > 0) & (F.pmod(F.col("_p") - first, F.lit(k)) < length)

    # ------------------------------------------------------------------ run start / restart

    def begin(self, run_key: str, ingested, done_steps: list[int], ledger_rows: list) -> None:
        self.run_key = run_key
        self.batch_sizes = {int(r["batch_index"]): int(r["count"]) for r in ingested.groupBy("batch_index").count().collect()}

        def layout_now() -> dict:
            rows = rows_per_segment(self.key_map())
            total_bytes = sum(rows.values()) * self.cfg.r_bytes  # by rows, not files (config.r_bytes)
            ids = sorted(set(self.layout.segments) | set(rows))
            k = disk_segment_count(self.cfg.k, self.cfg.d, total_bytes, len(ids))
            bounds = group_boundaries(ids, rows, k)
            sizes: dict[int, int] = {}
            for pid, n in rows.items():
                sizes[disk_segment_of(pid, bounds)] = sizes.get(disk_segment_of(pid, bounds), 0) + n
            return {
                "k": len(bounds) + 1,
                "boundaries": bounds,
                "sizes": {str(p): n for p, n in sizes.items()},
                "row_bytes": float(self.cfg.r_bytes),
            }

        data = self.run_snapshot(layout_now)
        self.schedule = MeshSchedule(int(data["k"]))
        self.boundaries = [int(b) for b in data["boundaries"]]
        self.sizes = {int(p): int(n) for p, n in data["sizes"].items()}
        self.row_bytes = float(data["row_bytes"]) or 128.0

        steps = [i for i in done_steps if i >= 0]
        if not steps:
            return
        self.stepped = max(steps)
        k = self.schedule.k
        alive = ingested.where(
            (F.col("batch_index") <= self.stepped) & (F.col("batch_index") + F.lit(k - 1) > self.stepped)
        )
        counts = {int(r["batch_index"]): int(r["count"]) for r in alive.groupBy("batch_index").count().collect()}
        if not counts:
            return
        self.queued = counts
        queue = alive.select(*self.update_columns, F.col("batch_index").alias("_q"))
        # Each queued tuple has met the disk segments of slots _q .. stepped: read them as they are now.
        met = self.schedule.positions(min(counts) - 1, self.stepped)
        seg = self._read_disk_segments(met)
        joined = lookup_join(queue, seg)
        hit = self._meets(-1, self.stepped)
        self.queue = joined.select(
            *self.update_columns,
            *[F.when(hit, F.col("s_" + c)).alias(c) for c in KM],
            "_q",
        ).localCheckpoint(eager=True)
        self._pending_read = self._bytes(met)

    def arrived(self, batch_sizes: dict[int, int]) -> None:
        self.batch_sizes.update(batch_sizes)

    # ------------------------------------------------------------------ steps

    def submit(self, batch, batch_index: int) -> list:
        nulls = [F.lit(None).cast(t).alias(c) for c, t in zip(KM, ("long", "string", "long"))]
        fresh = batch.select(*self.update_columns, *nulls, F.lit(batch_index).alias("_q"))
        n = self.batch_sizes.get(batch_index, 0)
        return [self._step(batch_index, fresh, {batch_index: n} if n else {})]

    def flush(self) -> list:
        if not self.queued:
            self._stats = JoinStats(queue_tuples=0, disk_cycle=self.schedule.cycle(self.stepped))
            return [None]
        return [self._step(self.schedule.drain_until(list(self.queued)), None, {})]

    def _step(self, hi: int, fresh, arriving: dict[int, int]):
        """Step the slots ``(stepped, hi]``: read their disk segments, join, expire, release."""
        from functools import reduce

        lo = self.stepped
        stats = JoinStats(keymap_bytes_read=self._pending_read)
        self._pending_read = 0
        parts = [p for p in (self.queue, fresh if arriving else None) if p is not None]
        self.queued.update(arriving)
        release = None
        if parts:
            queue = reduce(lambda a, b: a.unionByName(b), parts)
            positions = self.schedule.positions(lo, hi)
            seg = self._read_disk_segments(positions)
            stats.keymap_bytes_read += self._bytes(positions)
            stats.segments_probed = len(positions)
            hit = self._meets(lo, hi)
            stepped = (
                lookup_join(queue, seg)
                .select(
                    *self.update_columns,
                    *[F.when(hit, F.col("s_" + c)).otherwise(F.col(c)).alias(c) for c in KM],
                    "_q",
                )
                .localCheckpoint(eager=True)
            )
            expiring = sorted(q for q in self.queued if self.schedule.expires_by(q) <= hi)
            if expiring:
                release = self._with_overlay(stepped.where(ints_in("_q", expiring))).localCheckpoint(eager=True)
                for q in expiring:
                    del self.queued[q]
            self.queue = (stepped.where(~ints_in("_q", expiring)) if expiring else stepped) if self.queued else None
        self.stepped = hi
        self.released = release
        self._prune_overlay()
        stats.queue_tuples = sum(self.queued.values())
        stats.disk_cycle = self.schedule.cycle(hi)
        self._stats = stats
        return release.drop("_q") if release is not None else None

    def _with_overlay(self, expired):
        """Prefer the post-commit values of keys changed while the tuple was queued."""
        if self.overlay is None:
            return expired
        o = self.overlay.select(*KEY, *[F.col(c).alias("o_" + c) for c in KM])
        changed = F.col("o_km_surrogate_key").isNotNull()
        return expired.join(o, KEY, "left").select(
            *self.update_columns, *[F.when(changed, F.col("o_" + c)).otherwise(F.col(c)).alias(c) for c in KM], "_q"
        )

    def _prune_overlay(self) -> None:
        if self.overlay is None:
            return
        if not self.queued:
            self.overlay = None
            return
        self.overlay = self.overlay.where(F.col("_at") >= min(self.queued)).localCheckpoint(eager=True)

    def keys_committed(self, km, new_keys: dict[int, int] | None = None) -> None:
        """The last release was committed: record its keys' post-commit values in the overlay."""
        grown = {}
        for segment, n in new_keys_by_segment(km, new_keys).items():
            p = self._disk_segment_of(segment)
            grown[p] = grown.get(p, 0) + n
        for p, n in grown.items():
            self.sizes[p] = self.sizes.get(p, 0) + n
        if self.released is None or not self.queued:
            return  # nothing queued can have seen these keys stale (a restart reads them fresh)
        before = self.released.select(*KEY, "km_row_hash", "km_last_source_seq").dropDuplicates(KEY)
        after = km.join(before, KEY, "left").select(*KEY, *committed_lookup_columns(), F.lit(self.stepped).alias("_at"))
        self.overlay = (
            after if self.overlay is None else self.overlay.join(km.select(*KEY), KEY, "left_anti").unionByName(after)
        ).localCheckpoint(eager=True)

    def _disk_segment_of(self, partition_id: int) -> int:
        return disk_segment_of(partition_id, self.boundaries)

    def end(self) -> None:
        self.forget_snapshot()

    def stats(self) -> JoinStats:
        return self._stats
