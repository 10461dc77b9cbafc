"""Load: a fact's dimension keys, before the fact's own join decides its outcomes.

For the batches one load call is about to load, and each dimension the fact references, under
that dimension's load lock (so its layout and its ``key_map`` hold still): their distinct keys
(``transforms.references.probes``) are looked up the way the dimension's join strategy reads its
``key_map`` (``JoinStrategy.lookup``); the keys it lacks are committed to it at once as inferred
members, one batch of the dimension's by its own protocol (logged, then applied; recovered like
any batch), whose decided keys complete the lookup; the keys are then set on the fact rows. A
crash between a dimension's commit and the fact's leaves only keys the rerun finds, so a fact's
keys are the same however often it is loaded.

The dimensions' locks are taken one at a time, after the fact's own, for one lookup each: a
dimension load waits at most that long for a fact, and no two loads hold each other's locks.

What a fact's load asks of a dimension is the interface ``Dimension``: a load session of the
dimension's warehouse (``etl.load.loader.Loader``) implements it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core.config import EtlConfig
from etl.io.tables import read
from etl.strategies import JoinStats
from etl.strategies.base import update_columns
from etl.transforms.references import deleted_at_event_time, inferred_run_key, inferred_updates, probes, with_references

log = logging.getLogger(__name__)


class Dimension(Protocol):
    """One dimension's warehouse, as a fact's load uses it."""

    cfg: EtlConfig

    def attached(self, owner: str, wait_s: float) -> AbstractContextManager:
        """The dimension locked for ``owner`` (waiting up to ``wait_s``), its crashed batches
        recovered: ``lookup`` and ``commit_inferred`` are called inside."""

    def lookup(self, probes: DataFrame) -> DataFrame:
        """``probes`` with the ``km_*`` columns, the way the dimension's join strategy reads key_map."""

    @property
    def lookup_stats(self) -> JoinStats:
        """What the last ``lookup`` read."""

    def commit_inferred(self, run_key: str, batch_index: int, joined: DataFrame) -> list:
        """``joined`` committed as one batch of the dimension's; the keys it decided."""

    def committed_keys(self) -> DataFrame:
        """The dimension's committed keys (``source_id``, ``natural_key``, ``km_surrogate_key``),
        read lazily without the lock."""


class References:
    """A fact load's dimensions (``dimensions``: each reference's dimension by name)."""

    def __init__(self, cfg: EtlConfig, dimensions: Mapping[str, Dimension]) -> None:
        self.cfg = cfg
        self.fact = cfg.entity_model
        self.dimensions = {n: dimensions[n] for n in self.fact.dimensions}
        self.counting()

    def counting(self) -> tuple[dict[str, int], dict[str, dict]]:
        """Fresh counts from now on, per dimension: the inferred members allocated, and what the
        lookups cost (seconds, keys looked up, ``key_map`` bytes read and segments probed)."""
        self.inferred = {n: 0 for n in self.dimensions}
        self.costs = {n: {"lookup_s": 0.0, "keys": 0, "keymap_bytes_read": 0, "segments_probed": 0} for n in self.dimensions}
        return self.inferred, self.costs

    def resolve(self, batch: DataFrame, run_key: str, batch_index: int) -> DataFrame:
        """``batch`` (fact rows) with every reference's surrogate key set; ``batch_index`` names the
        dimension's inferred-member batch (the last fact batch these rows reach)."""
        found = {}
        for name, dim in self.dimensions.items():
            with dim.attached(f"references of {self.fact.name} {run_key}", self.cfg.lock_stale_seconds):
                started = time.monotonic()
                looked = dim.lookup(probes(batch, self.fact, dim.cfg.entity_model)).localCheckpoint(eager=True)
                absent = F.col("km_surrogate_key").isNull()
                keys, n = looked.agg(F.count(F.lit(1)), F.count(F.when(absent, 1))).first()
                missing = looked.where(absent).drop("km_surrogate_key", "km_row_hash", "km_last_source_seq")
                cost, stats = self.costs[name], dim.lookup_stats
                cost["lookup_s"] += time.monotonic() - started
                cost["keys"] += keys
                cost["keymap_bytes_read"] += stats.keymap_bytes_read
                cost["segments_probed"] += stats.segments_probed
                if n:
                    joined = inferred_updates(missing, self.fact, dim.cfg.entity_model, update_columns(dim.cfg.entity_model))
                    decided = dim.commit_inferred(inferred_run_key(self.fact.name, run_key), batch_index, joined)
                    self.inferred[name] += n
                    log.info("%s batch %s: %d inferred member(s) of %s", run_key, batch_index, n, name)
                    allocated = batch.sparkSession.createDataFrame(decided, "source_id string, natural_key string, km_surrogate_key long")
                    looked = looked.where(F.col("km_surrogate_key").isNotNull()).select(*allocated.columns).unionByName(allocated)
                found[name] = looked.select("source_id", "natural_key", "km_surrogate_key")
        # Held by the caller's strategy as it needs; the keys found are held already, so no
        # dimension is read again (keys never change once given, but a layout may).
        return with_references(batch, self.fact, found)

    def looked_up(self, ingested: DataFrame) -> DataFrame:
        """``ingested`` with the keys its references have now, read lazily from each ``key_map``
        (no lock, nothing inferred): a restarted strategy's replay of batches committed already,
        whose keys all exist (they were resolved before their commit, and keys are never removed)."""
        return with_references(ingested, self.fact, {n: d.committed_keys() for n, d in self.dimensions.items()})


def with_deleted_references(spark, cfg: EtlConfig, facts):
    """Rows of ``cfg``'s fact with ``<reference>__deleted`` for each reference, from each
    dimension's table as it is now (``transforms.references.deleted_at_event_time``)."""
    for r in cfg.entity_model.references:
        dimension = cfg.for_entity(r.dimension)
        rows = read(spark, dimension, dimension.entity_model.table)
        facts = deleted_at_event_time(facts, rows, r, dimension.entity_model.history == "history")
    return facts
