"""The logged tail: batches this loader has logged (their write-ahead commit) and not applied yet,
and ``key_map`` as the join sees it meanwhile (setting ``apply_interval_seconds``).

The decisions of the next batches must answer for keys the MERGEs have not applied: the join
reads ``key_map`` through ``TailReads``, which merges the tail's changes over it on read
(``transforms.outcomes.key_map_on_read``), and the strategies fold each logged batch into their
in-memory state when it is logged, not when it is applied. The tail lives in this loader's memory
only: whoever takes the load lock next applies every logged, unapplied batch from the log
(``CommitProtocol.recover``), and a loader that finds ``key_map`` written by someone else since it last held
the lock drops its tail and is taken up again as after a restart (docs/decisions/coalesced-apply.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import DataFrame

from etl.load.results import BatchResult
from etl.transforms.outcomes import combine_changes, key_map_on_read


@dataclass
class Logged:
    decided: DataFrame  # the batch's outcomes, held (a local checkpoint)
    changes: DataFrame  # their key_map changes (computed from ``decided``; the tail holds them combined)
    segments: list[int] | None
    new_keys: dict[int, int] | None
    logged_at: float = field(default_factory=time.time)
    result: BatchResult | None = None  # what the load reports of the batch: its apply fills in when


class LoggedTail:
    def __init__(self) -> None:
        self.batches: list[Logged] = []
        self._changes: DataFrame | None = None

    def __bool__(self) -> bool:
        return bool(self.batches)

    def add(self, logged: Logged) -> None:
        """A logged batch joins the tail; the tail's changes are combined with its (one small
        aggregate of the two, held: one Spark job per batch), not aggregated again from every
        batch's outcomes."""
        previous = self._changes
        self.batches.append(logged)
        combined = logged.changes if previous is None else combine_changes(previous, logged.changes)
        self._changes = combined.localCheckpoint(eager=True)
        if previous is not None:
            previous.unpersist()

    def age_s(self) -> float:
        return (time.time() - self.batches[0].logged_at) if self.batches else 0.0

    def outcomes(self) -> DataFrame:
        return reduce(lambda a, b: a.unionByName(b), [b.decided for b in self.batches])

    def changes(self) -> DataFrame | None:
        """The tail's ``key_map`` changes, one row per key (the latest batch's values), held."""
        return self._changes

    def segments(self) -> list[int] | None:
        if any(b.segments is None for b in self.batches):
            return None
        return sorted({s for b in self.batches for s in b.segments})

    def new_keys(self) -> dict[int, int] | None:
        if any(b.new_keys is None for b in self.batches):
            return None
        out: dict[int, int] = {}
        for b in self.batches:
            for segment, n in b.new_keys.items():
                out[segment] = out.get(segment, 0) + n
        return out

    def applied(self, visible_at: float, applied_at: float) -> None:
        """The tail's MERGEs committed (the entity table's at ``visible_at``): each batch's result
        says how long after its write-ahead commit."""
        for b in self.batches:
            if b.result is not None:
                b.result.visible_s, b.result.applied_s = visible_at - b.logged_at, applied_at - b.logged_at

    def clear(self) -> None:
        """Forget the tail (applied, or to be applied from the log by recovery)."""
        if self._changes is not None:
            self._changes.unpersist()
        for b in self.batches:
            b.decided.unpersist()
        self.batches, self._changes = [], None


class TailReads:
    """The loader's table handle as its strategy sees it: ``key_map`` with the logged tail merged
    over it on read; everything else the handle's own. ``layers()`` says what to read: ``key_map``
    pinned at the version an apply in flight started from (or ``None``: the latest), and the tails
    to merge over it, oldest first (the one being applied, then the one logged since)."""

    def __init__(self, tables, layers) -> None:
        self._tables = tables
        self._layers = layers

    def read(self, name: str) -> DataFrame:
        if name != "key_map":
            return self._tables.read(name)
        pinned, tails = self._layers()
        df = pinned if pinned is not None else self._tables.read(name)
        for tail in tails:
            if tail:
                df = key_map_on_read(df, tail.changes())
        return df

    def __getattr__(self, name: str):
        return getattr(self._tables, name)
