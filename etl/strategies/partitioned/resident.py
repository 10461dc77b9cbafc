"""The in-memory copy of the resident segments of ``key_map`` (locally checkpointed DataFrames).
It holds exactly the policy's resident set: a segment is never held twice, nor after its
eviction (commits would no longer refresh it), and each commit's changes are folded in, so the
copy is never read again from key_map while it stays resident.

The copy is a base and an overlay: the base holds the resident segments' rows as they were read
or last compacted; the overlay holds, for the keys commits changed since, their latest rows. A
commit's fold rewrites only the overlay (its keys, not the base's 1.3 million rows at 20 million
keys, held again at every step before: docs/partitioned-join.md, "The copy as a base and an
overlay"); every ``max_overlay_folds`` folds the overlay is compacted into the base."""

from __future__ import annotations

from functools import reduce
from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.strategies.base import KEY, KM_COLUMNS, by_key, committed_lookup_columns, cut_lineage, hold, lookup_join
from etl.transforms.columns import ints_in

MAX_UNHELD_FOLDS = 8
MAX_OVERLAY_FOLDS = 8  # folds the overlay takes before it is compacted into the base

_IN_OVERLAY = "_in_overlay"


class ResidentSet:
    """Base and overlay are held partitioned by the key (``by_key``), so a step's join and a
    commit's fold read both in place and shuffle only their own small side (``lookup_join``)."""

    def __init__(self, read_segments: Callable[[list[int]], DataFrame], max_overlay_folds: int = MAX_OVERLAY_FOLDS) -> None:
        self.read_segments = read_segments  # segments -> their key_map lookup rows with segment_id
        self.df: DataFrame | None = None  # the base: key_map rows of exactly the segments in ``loaded``
        self.overlay: DataFrame | None = None  # the latest rows of keys folded since the base was compacted
        self.loaded: set[int] = set()
        self._unheld = 0  # copies (folds, syncs) no Spark job has computed yet
        self._overlay_folds = 0
        self._read_by_release: list[DataFrame] = []  # what the last step's join read, until its commit's fold
        self.max_overlay_folds = max_overlay_folds  # 1: every fold compacted at once (the copy held whole)

    def rows(self) -> DataFrame | None:
        """The copy as one frame (the overlay's rows over the base's), for reading it whole."""
        if self.overlay is None or self.df is None:
            return self.df
        return self.df.join(self.overlay.select(*KEY).hint("shuffle_hash"), KEY, "left_anti").unionByName(self.overlay)

    def join(self, tuples: DataFrame) -> DataFrame:
        """``tuples`` of resident segments with their key_map rows (a left join: new keys have none)."""
        self._unheld = 0  # the release joining the copy is committed next: its job holds the folds
        self._read_by_release = [df for df in (self.df, self.overlay) if df is not None]
        return self._lookup(tuples)

    def _lookup(self, tuples: DataFrame) -> DataFrame:
        """``tuples`` LEFT JOIN the copy: the base's ``km_*`` columns, the overlay's where it has
        the key (two hash joins built on ``tuples``, neither side of the copy shuffled)."""
        joined = lookup_join(tuples, self.df.drop("segment_id"))
        if self.overlay is None:
            return joined
        latest = self.overlay.select(*KEY, F.lit(True).alias(_IN_OVERLAY), *(F.col(c).alias(f"_overlay_{c}") for c in KM_COLUMNS))
        both = lookup_join(joined, latest)
        return both.select(*(
            F.when(F.col(_IN_OVERLAY), F.col(f"_overlay_{c}")).otherwise(F.col(c)).alias(c) if c in KM_COLUMNS else F.col(c)
            for c in joined.columns))

    def sync(self, want: set[int], probed: tuple[set[int], DataFrame] | None = None) -> None:
        """Hold exactly ``want``: drop evicted segments, add admitted ones. ``probed`` is (segments,
        their rows with ``segment_id``) a probe holds (a local checkpoint its release's job
        computes; held by key): admitted ones are taken from it, without a job of their own; any
        other is read from key_map and held at once (one Spark job)."""
        if want == self.loaded:
            return
        gone, new = self.loaded - want, sorted(want - self.loaded)
        df = self.df
        if df is not None and gone:
            df = df.where(~ints_in("segment_id", gone))
            if self.overlay is not None:
                self.overlay = self.overlay.where(~ints_in("segment_id", gone))
        from_probe = sorted(set(new) & probed[0]) if probed else []
        to_read = [s for s in new if s not in from_probe]
        parts = [df] if df is not None else []
        if from_probe:
            parts.append(probed[1].where(ints_in("segment_id", from_probe)))
        if to_read:
            parts.append(by_key(self.read_segments(to_read)))
        df = reduce(lambda a, b: a.unionByName(b), parts) if parts else None
        # Read from key_map: held now. Views of what is held already: held by the next job that
        # reads the copy (one plan again instead of a union growing with every admission).
        self.df = self._held(df, at_once=bool(to_read)) if df is not None else None
        if self.df is None:
            self.overlay, self._overlay_folds = None, 0
        self.loaded = set(want)

    def fold(self, changes: DataFrame) -> None:
        """A commit's key_map changes (``key_map_changes`` of a held batch) of resident segments,
        into the overlay. Held by the next job that reads the copy (the next release's join), not
        by a job of its own: its inputs are in memory, so the fold computes the same rows whenever
        it runs. Folds no job has read yet are held at once past ``MAX_UNHELD_FOLDS`` (a plan
        that grows with every commit)."""
        for held in self._read_by_release:  # computed by the commit that calls this fold: truncated
            cut_lineage(held)
        self._read_by_release = []
        if not self.loaded:
            return
        changed = changes.where(ints_in("segment_id", self.loaded))
        updated = self._lookup(changed).select(*KEY, *committed_lookup_columns(), "segment_id")
        overlay = updated if self.overlay is None else (
            self.overlay.join(changed.select(*KEY).hint("shuffle_hash"), KEY, "left_anti").unionByName(updated))
        self.overlay = self._held(overlay)
        self._overlay_folds += 1
        if self._overlay_folds >= self.max_overlay_folds:
            # Compacted over the held overlay, which the compaction's job computes once and reads
            # twice (its keys and its rows), not over the fold's plan, which it would run twice:
            # each hash join of a plan is a hash map in the same task (out of memory at 2g).
            self.df = self._held(self.rows())
            self.overlay, self._overlay_folds = None, 0

    def _held(self, df: DataFrame, at_once: bool = False) -> DataFrame:
        """``df`` as a local checkpoint: computed now (``at_once``, or past ``MAX_UNHELD_FOLDS``
        copies no job has computed yet, each a step of lineage more), else by the next job that
        reads it."""
        self._unheld += 1
        at_once = at_once or self._unheld >= MAX_UNHELD_FOLDS
        if at_once:
            self._unheld = 0
        return hold(df, eager=at_once)
