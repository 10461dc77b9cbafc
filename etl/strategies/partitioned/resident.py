"""The in-memory copy of the resident segments of ``key_map`` (a locally checkpointed DataFrame).
It holds exactly the policy's resident set: a segment is never held twice, nor after its
eviction (commits would no longer refresh it), and each commit's changes are folded in, so the
copy is never read again from key_map while it stays resident."""

from __future__ import annotations

from functools import reduce
from typing import Callable

from pyspark.sql import DataFrame

from etl.strategies.base import KEY, by_key, committed_lookup_columns, hold, lookup_join
from etl.transforms.columns import ints_in

MAX_UNHELD_FOLDS = 8


class ResidentSet:
    """The copy is held partitioned by the key (``by_key``), so a step's join and a commit's fold
    read it in place and shuffle only their own small side (``lookup_join``)."""

    def __init__(self, read_segments: Callable[[list[int]], DataFrame]) -> None:
        self.read_segments = read_segments  # segments -> their key_map lookup rows with segment_id
        self.df: DataFrame | None = None  # key_map rows of exactly the segments in ``loaded``
        self.loaded: set[int] = set()
        self._unheld = 0  # copies (folds, syncs) of ``df`` that no Spark job has computed yet

    def join(self, tuples: DataFrame) -> DataFrame:
        """``tuples`` of resident segments with their key_map rows (a left join: new keys have none)."""
        self._unheld = 0  # the release joining the copy is committed next: its job holds the folds
        return lookup_join(tuples, self.df.drop("segment_id"))

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
        self.loaded = set(want)

    def fold(self, changes: DataFrame) -> None:
        """A commit's key_map changes (``key_map_changes`` of a held batch) of resident segments,
        into the copy. Held by the next job that reads the copy (the next release's join), not by
        a job of its own: both inputs are in memory, so the fold computes the same rows whenever
        it runs. Folds no job has read yet are held at once past ``MAX_UNHELD_FOLDS`` (a plan
        that grows with every commit)."""
        if not self.loaded:
            return
        changed = changes.where(ints_in("segment_id", self.loaded))
        old = self.df
        updated = lookup_join(changed, old.drop("segment_id")).select(*KEY, *committed_lookup_columns(), "segment_id")
        kept = old.join(changed.select(*KEY).hint("shuffle_hash"), KEY, "left_anti")
        self.df = self._held(kept.unionByName(updated))

    def _held(self, df: DataFrame, at_once: bool = False) -> DataFrame:
        """``df`` as a local checkpoint: computed now (``at_once``, or past ``MAX_UNHELD_FOLDS``
        copies no job has computed yet, each a step of lineage more), else by the next job that
        reads it."""
        self._unheld += 1
        at_once = at_once or self._unheld >= MAX_UNHELD_FOLDS
        if at_once:
            self._unheld = 0
        return hold(df, eager=at_once)
