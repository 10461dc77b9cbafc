"""Every warehouse table as a ``StructType`` constant, with its partitioning, and the views
derived from them (``VIEWS``: read like tables, written by nobody).

The entity is a customer kept per source: its attributes are ``ENTITY_ATTRIBUTES``.
Timestamps are UTC. Nothing here holds a wall-clock time except ``batch_ledger`` (its times and
measurements, and so ``join_metrics``): every other table is a pure function of the input, so
reruns and strategies can be compared row for row (DESIGN.md §3.4).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

OUTCOMES = ("matched", "new", "duplicate", "stale", "rejected")
OPS = ("upsert", "delete")


def _s(name: str, kind, nullable: bool = True) -> StructField:
    return StructField(name, kind, nullable)


ENTITY_ATTRIBUTES = StructType(
    [
        _s("name", StringType()),
        _s("email", StringType()),
        _s("city", StringType()),
        _s("balance", DecimalType(18, 2)),
    ]
)

_UPDATE_CORE = [
    _s("update_id", StringType(), False),  # <landing file>:<line number>, stable across reruns
    _s("source_id", StringType(), False),
    _s("natural_key", StringType(), False),
    _s("op", StringType(), False),
    *ENTITY_ATTRIBUTES.fields,
    _s("source_seq", LongType(), False),
    _s("event_ts", TimestampType(), False),
    _s("arrival_ts", TimestampType(), False),
    _s("row_hash", StringType(), False),
]

# Validated updates of one run, in the order they will be processed.
INGESTED_UPDATES = StructType(
    [_s("run_key", StringType(), False), *_UPDATE_CORE, _s("batch_index", IntegerType(), False)]
)

# The partitioned join's wait buffer (papers/004 §6.3): pending updates by segment.
WAIT_BUFFER = StructType([*INGESTED_UPDATES.fields, _s("segment_id", IntegerType(), False)])

# The lookup relation R: one row per (source_id, natural_key). Partitioned by segment_id, so a
# probe of one segment reads only that segment's files.
KEY_MAP = StructType(
    [
        _s("source_id", StringType(), False),
        _s("natural_key", StringType(), False),
        _s("surrogate_key", LongType(), False),
        _s("row_hash", StringType(), False),
        _s("last_source_seq", LongType(), False),
        _s("first_arrival_ts", TimestampType(), False),
        _s("last_arrival_ts", TimestampType(), False),
        _s("created_batch_seq", LongType(), False),
        _s("updated_batch_seq", LongType(), False),
        _s("segment_id", IntegerType(), False),
    ]
)

# Current state of the entity, one row per surrogate key.
CUSTOMER_CURRENT = StructType(
    [
        _s("surrogate_key", LongType(), False),
        _s("source_id", StringType(), False),
        _s("natural_key", StringType(), False),
        *ENTITY_ATTRIBUTES.fields,
        _s("is_deleted", BooleanType(), False),
        _s("row_hash", StringType(), False),
        _s("last_source_seq", LongType(), False),
        _s("event_ts", TimestampType(), False),
        _s("arrival_ts", TimestampType(), False),
        _s("updated_batch_seq", LongType(), False),
    ]
)

# Every update after the join, with its outcome: the write-ahead log of a micro-batch, read as the
# view ``outcome_log``. Its rows are stored in the batch's ``batch_ledger`` row (``outcomes``), so
# logging a batch and recording its step is one commit; the other outputs of a batch are
# projections of these rows, so a retry re-applies instead of re-deciding.
_OUTCOME = [
    _s("outcome", StringType(), False),
    _s("reason", StringType()),
    _s("surrogate_key", LongType(), False),
    _s("stored_source_seq", LongType()),
    _s("applies", BooleanType(), False),  # this update changes the current state
    _s("is_last_applied", BooleanType(), False),  # the last applied update of its key in the batch
]
OUTCOME_LOG = StructType(
    [
        _s("run_key", StringType(), False),
        _s("batch_seq", LongType(), False),
        _s("batch_index", IntegerType(), False),
        *_UPDATE_CORE,
        *_OUTCOME,
    ]
)
# One logged update as stored in its ledger row: the batch's columns are the row's own. Nullable
# inside, as Delta stores an array's element (the view gives the log's types back).
LOGGED_UPDATE = StructType([_s(f.name, f.dataType) for f in (*_UPDATE_CORE, *_OUTCOME)])

APPLIED_CHANGES = StructType(
    [
        _s("run_key", StringType(), False),
        _s("batch_seq", LongType(), False),
        _s("surrogate_key", LongType(), False),
        _s("outcome", StringType(), False),
        *_UPDATE_CORE,
    ]
)

DUPLICATES_QUARANTINE = StructType(
    [
        _s("run_key", StringType(), False),
        _s("batch_seq", LongType(), False),
        _s("surrogate_key", LongType(), False),
        _s("outcome", StringType(), False),
        _s("reason", StringType(), False),
        _s("stored_source_seq", LongType()),
        *_UPDATE_CORE,
    ]
)

REJECTED_UPDATES = StructType(
    [
        _s("run_key", StringType(), False),
        _s("update_id", StringType(), False),
        _s("source_id", StringType()),  # from the landing path
        _s("file_name", StringType(), False),
        _s("line_number", LongType(), False),
        _s("reason", StringType(), False),
        _s("raw_line", StringType()),  # cut to max_record_bytes
        _s("arrival_minute", TimestampType(), False),
    ]
)

# What ingest read of each landing file of a run: loaded files are immutable, and a rerun or the
# gate compares the landing zone with this record (docs/ingest.md, "Late lines").
LANDED_FILES = StructType(
    [
        _s("run_key", StringType(), False),
        _s("file_name", StringType(), False),  # relative to the landing root
        _s("source_id", StringType(), False),
        _s("arrival_minute", TimestampType(), False),
        _s("bytes", LongType(), False),
        _s("sha256", StringType(), False),
        _s("lines", LongType(), False),  # non-blank lines: updates in
        _s("blank_lines", LongType(), False),
    ]
)

# Per step, what the join measured: counts, key_map bytes read, segments probed / admitted /
# evicted, the resident and waiting sizes, MESHJOIN's queue, delays and times. Nullable: a
# ledger row of a warehouse made before the ledger carried them has none.
_METRICS = [
    _s("matched", LongType()),
    _s("new", LongType()),
    _s("duplicate", LongType()),
    _s("stale", LongType()),
    _s("keymap_bytes_read", LongType()),
    _s("segments_probed", LongType()),
    _s("segments_admitted", LongType()),
    _s("segments_evicted", LongType()),
    _s("resident_bytes", LongType()),
    _s("wait_buffer_tuples", LongType()),
    _s("queue_tuples", LongType()),
    _s("disk_cycle", LongType()),
    _s("delay_avg_s", DoubleType()),
    _s("delay_p99_s", DoubleType()),
    _s("batch_started_at", TimestampType()),
    _s("duration_s", DoubleType()),
]

# One row per step of a run (a released micro-batch, or a step that released nothing), appended
# once, before the batch is applied: which steps are logged, the last ``batch_seq``, the high-water
# mark of surrogate keys, the step's measurements (``join_metrics`` is its projection) and the
# batch's outcomes (``outcome_log`` is their view; null for a step with no batch, and for a row
# written by an older version, whose outcomes are in its table ``outcome_log``).
BATCH_LEDGER = StructType(
    [
        _s("run_key", StringType(), False),
        _s("batch_index", IntegerType(), False),
        _s("batch_seq", LongType(), False),
        _s("strategy", StringType(), False),
        _s("updates_in", LongType(), False),
        _s("keys_allocated", LongType(), False),
        _s("next_surrogate_key", LongType(), False),
        _s("committed_at", TimestampType(), False),  # when the batch was logged: decided and durable
        *_METRICS,
        _s("outcomes", ArrayType(LOGGED_UPDATE)),
    ]
)

JOIN_METRICS = StructType(
    [
        _s("run_key", StringType(), False),
        _s("batch_seq", LongType(), False),
        _s("batch_index", IntegerType(), False),
        _s("strategy", StringType(), False),
        _s("updates_in", LongType(), False),
        *_METRICS[:4],
        _s("keys_allocated", LongType(), False),
        *_METRICS[4:-1],
        _s("committed_at", TimestampType(), False),
        _METRICS[-1],
    ]
)


@dataclass(frozen=True)
class Table:
    name: str
    schema: StructType
    partition_by: tuple[str, ...] = ()
    # A MERGE target: with deletion vectors a MERGE writes the changed rows and marks the old
    # ones, instead of rewriting every file that holds one.
    merge_target: bool = False


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table("key_map", KEY_MAP, ("segment_id",), merge_target=True),
        Table("customer_current", CUSTOMER_CURRENT, merge_target=True),
        Table("ingested_updates", INGESTED_UPDATES, ("run_key",)),
        Table("rejected_updates", REJECTED_UPDATES, ("run_key",)),
        Table("landed_files", LANDED_FILES, ("run_key",)),
        Table("batch_ledger", BATCH_LEDGER),
        Table("wait_buffer", WAIT_BUFFER, ("segment_id",)),
    )
}


@dataclass(frozen=True)
class View:
    """A table a batch does not write: the rows of ``source`` where ``where`` holds, with this
    schema's columns. Each was a table of its own, appended once per batch; as projections of
    what the batch writes anyway they cost no commit (docs/decisions/commit-protocol.md)."""

    name: str
    schema: StructType
    source: str
    where: str = "true"
    # An array column of ``source`` whose elements are the view's rows (with the source row's
    # columns beside them).
    explode: str | None = None
    # A warehouse made before the view has older rows only in the table of the view's name, which
    # it keeps (those of applied_changes and duplicates_quarantine are in outcome_log too; those of
    # outcome_log are its only copy).
    older_rows_kept_apart: bool = False


VIEWS: dict[str, View] = {
    v.name: v
    for v in (
        View("outcome_log", OUTCOME_LOG, "batch_ledger", explode="outcomes", older_rows_kept_apart=True),
        View("applied_changes", APPLIED_CHANGES, "outcome_log", "applies"),
        View("duplicates_quarantine", DUPLICATES_QUARANTINE, "outcome_log", "NOT applies"),
        # An older warehouse's ledger rows have no measurements: its table join_metrics has them.
        View("join_metrics", JOIN_METRICS, "batch_ledger", "matched IS NOT NULL", older_rows_kept_apart=True),
    )
}

# Tables whose content is a pure function of input + starting state (everything but wall clocks).
DETERMINISTIC_TABLES = (
    "key_map",
    "customer_current",
    "ingested_updates",
    "outcome_log",  # applied_changes and duplicates_quarantine are its projections
    "rejected_updates",
    "landed_files",
)
