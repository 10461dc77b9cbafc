"""The contract every join strategy keeps.

A strategy receives the run's micro-batches in arrival order (``submit``) and hands back, when it
decides, the updates it has joined with ``key_map``: the update columns plus ``km_surrogate_key``,
``km_row_hash`` and ``km_last_source_seq`` (nulls where the key was not found). The commit
protocol (``etl.load.protocol``) then decides outcomes, allocates keys and commits; after the
``key_map`` MERGE (or at the write-ahead commit, when the MERGEs wait) it calls ``keys_committed``
so a strategy holding parts of ``key_map`` in memory never serves a stale copy. ``flush`` releases
whatever is still pending at the end of a run. Updates of one key must be released in arrival
order; that is all the loader needs for exactness. The order of every call: docs/architecture.md,
"A strategy's calls".
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from pyspark.sql import functions as F

from etl.core.faults import crash_point
from etl.core.spark_conf import COMMIT_SQL_SETTINGS
from etl.io.files import write_json
from etl.io.spark import sql_settings
from etl.io.tables import open_tables

KM_COLUMNS = ("km_surrogate_key", "km_row_hash", "km_last_source_seq")
KEY = ["source_id", "natural_key"]


def update_columns(entity) -> list[str]:
    """The update columns a strategy carries from a micro-batch to its release."""
    return ["update_id", "source_id", "natural_key", "op", *(c.name for c in entity.columns),
            "source_seq", "event_ts", "arrival_ts", "row_hash"]


def committed_lookup_columns() -> list:
    """A key's ``km_*`` columns after a commit, from the commit's ``key_map`` changes joined with
    what a strategy held of the key before (null for a new key): the row the MERGE leaves."""
    return [
        F.col("surrogate_key").alias("km_surrogate_key"),
        F.coalesce(F.col("applied_row_hash"), F.col("km_row_hash")).alias("km_row_hash"),
        F.greatest(F.col("km_last_source_seq"), F.col("max_source_seq")).alias("km_last_source_seq"),
    ]


def lookup_join(tuples, lookup):
    """``tuples`` LEFT JOIN ``lookup`` on the key, as a shuffled hash join built on ``tuples`` (the
    side that is small: a batch, the pending tuples of a probe, a commit's changes). A ``lookup``
    held partitioned by the key (``by_key``: the resident copy) is then read where it lies, neither
    shuffled nor sorted; any other is shuffled, never sorted. A sort-merge join shuffled and sorted
    the whole resident copy (1.3 million rows at 20 million keys) on every step, twice more for
    each fold: 10-15 s of a 15-s step (docs/partitioned-join.md, "The copy held by key"). No
    broadcast of a small ``lookup`` either: without adaptive execution a broadcast is a Spark job
    of its own, one more a step (the job-count test's steps broadcast none of these reads before
    the hint either)."""
    return tuples.hint("shuffle_hash").join(lookup, KEY, "left")


def by_key(df):
    """``df`` hash-partitioned by the key as the session's joins partition a shuffle (its
    ``spark.sql.shuffle.partitions``), so that ``lookup_join`` finds it in place: held (a local
    checkpoint keeps a plan's partitioning), and kept through projections, filters, the joins
    built on the other side and unions of such parts. A count of its own: adaptive execution, on
    outside the commit, may coalesce a repartition without one."""
    return df.repartition(int(df.sparkSession.conf.get("spark.sql.shuffle.partitions")), *KEY)


def hold(df, eager: bool):
    """``df`` held (a local checkpoint), planned without adaptive execution, which the step's own
    work runs with in the product: a checkpoint keeps the partitioning of the plan it holds, but
    an adaptive plan's is unknown to it, so a copy held ``by_key`` under adaptive execution was
    shuffled by every join after all (found at full size)."""
    with sql_settings(df.sparkSession, COMMIT_SQL_SETTINGS):
        return df.localCheckpoint(eager=eager)


def rows_per_segment(key_map) -> dict[int, int]:
    """key_map's rows per ``segment_id``: only the partition column is selected, so Spark answers
    from the Parquet footers' row counts (and deletion vectors) without reading the data."""
    return {int(r["segment_id"]): int(r["count"]) for r in key_map.groupBy("segment_id").count().collect()}


def new_keys_by_segment(key_map_rows, counted: dict[int, int] | None = None) -> dict[int, int]:
    """Keys a commit inserted per ``segment_id``: ``counted`` when given, else from the rows."""
    if counted is not None:
        return counted
    return {int(r["segment_id"]): int(r["count"])
            for r in key_map_rows.where(F.col("is_new")).groupBy("segment_id").count().collect()}


@dataclass
class JoinStats:
    """What one submit/flush cost, for the metrics table."""

    keymap_bytes_read: int = 0
    segments_probed: int = 0
    segments_admitted: int = 0
    segments_evicted: int = 0
    resident_bytes: int = 0
    wait_buffer_tuples: int = 0
    queue_tuples: int | None = None  # MESHJOIN's queue after the step
    disk_cycle: int | None = None  # MESHJOIN's completed scans of key_map in this run
    extra: dict = field(default_factory=dict)


class JoinStrategy(ABC):
    name: str = "abstract"

    def __init__(self, spark, cfg, layout, tables=None) -> None:
        self.spark = spark
        self.cfg = cfg
        self.tables = tables or open_tables(spark, cfg)
        self.layout = layout
        self.update_columns = update_columns(cfg.entity_model)
        self.lookup_stats = JoinStats()

    def key_map(self):
        return self.tables.read("key_map")

    def lookup_columns(self, key_map):
        """``key_map`` narrowed to the join key and the ``km_*`` columns."""
        return key_map.select(
            "source_id",
            "natural_key",
            key_map["surrogate_key"].alias("km_surrogate_key"),
            key_map["row_hash"].alias("km_row_hash"),
            key_map["last_source_seq"].alias("km_last_source_seq"),
        )

    def lookup(self, probes):
        """Keys looked up and answered in this call (a fact's references: a fact row is committed
        with all of its keys): ``probes`` (``source_id``, ``natural_key``, ...) with the ``km_*``
        columns, null where the key is not in ``key_map``. The baseline, and MESHJOIN (one whole
        cycle of the disk-resident relation answers every queued tuple), read all of ``key_map``.
        What it read is ``lookup_stats``."""
        self.lookup_stats = JoinStats(keymap_bytes_read=self.tables.bytes("key_map"))
        return probes.join(self.lookup_columns(self.key_map()), KEY, "left")

    def _snapshot_path(self):
        return self.cfg.meta_path / "runs" / f"{self.run_key}.{self.name}.json"

    def run_snapshot(self, compute) -> dict:
        """State fixed at a run's start (so a restart sees the same): read back, or ``compute()``d
        and written once. ``end`` removes it (maintenance treats a snapshot as an unfinished run)."""
        path = self._snapshot_path()
        if path.exists():
            return json.loads(path.read_text())
        data = compute()
        write_json(path, data, indent=None)  # atomic: a crash leaves no snapshot or the whole one
        crash_point("strategy.snapshot_written")
        return data

    def forget_snapshot(self) -> None:
        self._snapshot_path().unlink(missing_ok=True)

    def begin(self, run_key: str, ingested, done_steps: list[int], ledger_rows: list) -> None:
        """A run starts (or restarts after a crash, with ``done_steps`` already committed)."""

    def arrived(self, batch_sizes: dict[int, int]) -> None:
        """More of the open run is ingested (the always-on loader): its batches' sizes so far."""

    def end(self) -> None:
        """The run has been flushed and committed."""

    def settle(self, run_key: str) -> None:
        """The run's flush is committed already: redo ``end`` (idempotent), which a crash right
        after that commit may have cut short (found by the crash matrix: a run snapshot left
        behind blocks maintenance for good)."""
        self.run_key = run_key
        self.end()

    @abstractmethod
    def submit(self, batch, batch_index: int) -> list:
        """Take one micro-batch; return the joined DataFrames ready to commit now. ``None`` in the
        list means "this step released nothing" (the loader still records the step as done)."""

    def flush(self) -> list:
        """Release everything still pending."""
        return []

    def keys_committed(self, key_map_rows, new_keys: dict[int, int] | None = None) -> None:
        """New or changed ``key_map`` rows were committed (hook for resident copies). ``new_keys``:
        the keys inserted per segment, when the loader counted them already (``new_keys_by_segment``)."""

    @abstractmethod
    def stats(self) -> JoinStats:
        """Cost of the last ``submit``/``flush``."""
