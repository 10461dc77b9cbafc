"""The in-memory copy of the resident segments of ``key_map`` (a locally checkpointed DataFrame).
It holds exactly the policy's resident set: a segment is never held twice, nor after its
eviction (commits would no longer refresh it), and each commit's changes are folded in, so the
copy is never read again from key_map while it stays resident."""

from __future__ import annotations

from functools import reduce
from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.strategies.base import KEY


class ResidentSet:
    def __init__(self, read_segments: Callable[[list[int]], DataFrame]) -> None:
        self.read_segments = read_segments  # segments -> their key_map lookup rows with segment_id
        self.df: DataFrame | None = None  # key_map rows of exactly the segments in ``loaded``
        self.loaded: set[int] = set()

    def join(self, tuples: DataFrame) -> DataFrame:
        """``tuples`` of resident segments with their key_map rows (a left join: new keys have none)."""
        return tuples.join(self.df.drop("segment_id"), KEY, "left")

    def sync(self, want: set[int], probed: tuple[set[int], DataFrame] | None = None) -> None:
        """Hold exactly ``want``: drop evicted segments, add admitted ones. ``probed`` is (segments,
        their rows with ``segment_id``) just read by a probe: admitted ones are taken from it."""
        if want == self.loaded:
            return
        gone, new = self.loaded - want, sorted(want - self.loaded)
        df = self.df
        if df is not None and gone:
            df = df.where(~F.col("segment_id").isin(sorted(gone)))
        from_probe = sorted(set(new) & probed[0]) if probed else []
        to_read = [s for s in new if s not in from_probe]
        parts = [df] if df is not None else []
        if from_probe:
            parts.append(probed[1].where(F.col("segment_id").isin(from_probe)))
        if to_read:
            parts.append(self.read_segments(to_read))
        df = reduce(lambda a, b: a.unionByName(b), parts) if parts else None
        self.df = df.localCheckpoint(eager=True) if df is not None else None
        self.loaded = set(want)

    def fold(self, changes: DataFrame) -> None:
        """A commit's key_map changes (``key_map_changes``) of resident segments, into the copy."""
        if not self.loaded:
            return
        changed = changes.where(F.col("segment_id").isin(sorted(self.loaded)))
        old = self.df
        updated = changed.join(old.drop("segment_id"), KEY, "left").select(
            *KEY,
            F.col("surrogate_key").alias("km_surrogate_key"),
            F.coalesce(F.col("applied_row_hash"), F.col("km_row_hash")).alias("km_row_hash"),
            F.greatest(F.col("km_last_source_seq"), F.col("max_source_seq")).alias("km_last_source_seq"),
            "segment_id",
        )
        self.df = old.join(changed.select(*KEY), KEY, "left_anti").unionByName(updated).localCheckpoint(eager=True)
