"""Every warehouse table as a ``StructType``, with its partitioning, and the views derived from
them (read like tables, written by nobody): ``tables(entity)`` and ``views(entity)``.

The system tables (ledger, logs, quarantines, ``key_map``) have the same columns for every entity
but the entity's own: its key columns (beside the encoded ``natural_key``) and its attributes,
declared in the warehouse model (``etl.core.model``). The entity's table is ``<name>_current``
(SCD type 1) or ``<name>_history`` (SCD type 2). The upper-case constants are the default
customer entity's (``warehouse/models/customer.toml``). Timestamps are UTC. Nothing here holds a wall-clock time except ``batch_ledger`` (its times and
measurements, and so ``join_metrics``): every other table is a pure function of the input, so
reruns and strategies can be compared row for row (DESIGN.md §3.4).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from etl.core.model import ColumnType, Entity, load_model

OUTCOMES = ("matched", "new", "duplicate", "stale", "rejected")
OPS = ("upsert", "delete")


def _s(name: str, kind, nullable: bool = True) -> StructField:
    return StructField(name, kind, nullable)


_TYPES = {"string": StringType(), "integer": LongType(), "date": DateType(), "timestamp": TimestampType(),
          "boolean": BooleanType()}


def spark_type(t: ColumnType) -> DataType:
    """A declared type's Spark type: integer is 64-bit, timestamp is UTC."""
    return DecimalType(t.precision, t.scale) if t.kind == "decimal" else _TYPES[t.kind]


def entity_columns(entity: Entity) -> list[StructField]:
    """The declared columns a row carries beside the pipeline's: key columns (but the encoded
    ``natural_key``), then attributes; nullable (an attribute may be missing from a line)."""
    return [_s(c.name, spark_type(c.type)) for c in entity.columns]


def _update_core(entity: Entity) -> list[StructField]:
    return [
        _s("update_id", StringType(), False),  # <landing file>:<line number>, stable across reruns
        _s("source_id", StringType(), False),
        _s("natural_key", StringType(), False),  # the key's one text (etl.core.model.encode_key)
        _s("op", StringType(), False),
        *entity_columns(entity),
        _s("source_seq", LongType(), False),
        _s("event_ts", TimestampType(), False),
        _s("arrival_ts", TimestampType(), False),
        _s("row_hash", StringType(), False),
    ]


# The lookup relation R: one row per (source_id, natural_key). Partitioned by segment_id, so a
# probe of one segment reads only that segment's files. The same for every entity.
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

# Every update after the join, with its outcome: the write-ahead log of a micro-batch, read as the
# view ``outcome_log``. Its rows are stored in the batch's ``batch_ledger`` row (``outcomes``), so
# logging a batch and recording its step is one commit; the other outputs of a batch are
# projections of these rows, so a retry re-applies instead of re-deciding.
_OUTCOME = [
    _s("outcome", StringType(), False),
    _s("reason", StringType()),
    _s("surrogate_key", LongType(), False),
    _s("stored_source_seq", LongType()),
    _s("applies", BooleanType(), False),  # this update changes the entity's table
    _s("is_last_applied", BooleanType(), False),  # the last applied update of its key in the batch
]

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
        # The field of raw_line the reason is about (attributes.balance; a change event's own field,
        # after.balance); null when the reason is about the whole line, or in an older warehouse's rows.
        _s("reason_detail", StringType()),
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
    _s("clock_skew", LongType()),  # updates that arrived after the commit: left out of the delays
    _s("batch_started_at", TimestampType()),
    _s("duration_s", DoubleType()),
]

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
class Schemas:
    """The schemas of one entity's tables and views."""

    entity: Entity
    ingested_updates: StructType
    entity_table: StructType
    outcome_log: StructType
    logged_update: StructType
    applied_changes: StructType
    duplicates_quarantine: StructType
    batch_ledger: StructType


def _entity_table(entity: Entity) -> StructType:
    head = [
        _s("surrogate_key", LongType(), False),
        _s("source_id", StringType(), False),
        _s("natural_key", StringType(), False),
        *entity_columns(entity),
        _s("is_deleted", BooleanType(), False),
        # A dimension some fact references: a key a fact named before the dimension had it, its
        # attributes empty until the dimension's first update for it fills the row (same key).
        *([_s("is_inferred", BooleanType(), False)] if entity.inferred else []),
        _s("row_hash", StringType(), False),
    ]
    if entity.history == "current":  # one row per surrogate key: its last applied update
        return StructType([
            *head,
            _s("last_source_seq", LongType(), False),
            _s("event_ts", TimestampType(), False),
            _s("arrival_ts", TimestampType(), False),
            _s("updated_batch_seq", LongType(), False),
        ])
    # One row per version (each applied update), ordered by source_seq; [valid_from, valid_to)
    # in event time, valid_to null and is_current true for the one open version of a key.
    return StructType([
        *head,
        _s("source_seq", LongType(), False),
        _s("valid_from", TimestampType(), False),
        _s("valid_to", TimestampType()),
        _s("is_current", BooleanType(), False),
        _s("event_ts", TimestampType(), False),
        _s("arrival_ts", TimestampType(), False),
        _s("updated_batch_seq", LongType(), False),
    ])


@functools.lru_cache(maxsize=64)
def schemas(entity: Entity) -> Schemas:
    core = _update_core(entity)
    ingested = StructType([_s("run_key", StringType(), False), *core, _s("batch_index", IntegerType(), False)])
    logged_update = StructType([_s(f.name, f.dataType) for f in (*core, *_OUTCOME)])
    # One row per step of a run (a released micro-batch, or a step that released nothing), appended
    # once, before the batch is applied: which steps are logged, the last ``batch_seq``, the high-water
    # mark of surrogate keys, the step's measurements (``join_metrics`` is its projection) and the
    # batch's outcomes (``outcome_log`` is their view; null for a step with no batch, and for a row
    # written by an older version, whose outcomes are in its table ``outcome_log``).
    batch_ledger = StructType(
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
            _s("outcomes", ArrayType(logged_update)),
        ]
    )

    dup_prefix = [_s("run_key", StringType(), False), _s("batch_seq", LongType(), False),
                  _s("surrogate_key", LongType(), False), _s("outcome", StringType(), False)]
    return Schemas(
        entity=entity,
        ingested_updates=ingested,
        entity_table=_entity_table(entity),
        outcome_log=StructType([
            _s("run_key", StringType(), False),
            _s("batch_seq", LongType(), False),
            _s("batch_index", IntegerType(), False),
            *core,
            *_OUTCOME,
        ]),
        # One logged update as stored in its ledger row: the batch's columns are the row's own.
        # Nullable inside, as Delta stores an array's element (the view gives the log's types back).
        logged_update=logged_update,
        applied_changes=StructType([*dup_prefix, *core]),
        duplicates_quarantine=StructType([*dup_prefix, _s("reason", StringType(), False),
                                          _s("stored_source_seq", LongType()), *core]),
        batch_ledger=batch_ledger,
    )

@dataclass(frozen=True)
class Table:
    name: str
    schema: StructType
    partition_by: tuple[str, ...] = ()
    # A MERGE target: with deletion vectors a MERGE writes the changed rows and marks the old
    # ones, instead of rewriting every file that holds one.
    merge_target: bool = False


@functools.lru_cache(maxsize=64)
def tables(entity: Entity) -> dict[str, Table]:
    """Every table an entity's warehouse holds, by name."""
    s = schemas(entity)
    return {
        t.name: t
        for t in (
            Table("key_map", KEY_MAP, ("segment_id",), merge_target=True),
            Table(entity.table, s.entity_table, merge_target=True),
            Table("ingested_updates", s.ingested_updates, ("run_key",)),
            Table("rejected_updates", REJECTED_UPDATES, ("run_key",)),
            Table("landed_files", LANDED_FILES, ("run_key",)),
            Table("batch_ledger", s.batch_ledger),
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


@functools.lru_cache(maxsize=64)
def views(entity: Entity) -> dict[str, View]:
    s = schemas(entity)
    return {
        v.name: v
        for v in (
            View("outcome_log", s.outcome_log, "batch_ledger", explode="outcomes", older_rows_kept_apart=True),
            View("applied_changes", s.applied_changes, "outcome_log", "applies"),
            View("duplicates_quarantine", s.duplicates_quarantine, "outcome_log", "NOT applies"),
            # An older warehouse's ledger rows have no measurements: its table join_metrics has them.
            View("join_metrics", JOIN_METRICS, "batch_ledger", "matched IS NOT NULL", older_rows_kept_apart=True),
        )
    }


def deterministic_tables(entity: Entity) -> tuple[str, ...]:
    """Tables whose content is a pure function of input + starting state (everything but wall clocks)."""
    return (
        "key_map",
        entity.table,
        "ingested_updates",
        "outcome_log",  # applied_changes and duplicates_quarantine are its projections
        "rejected_updates",
        "landed_files",
    )


# The default customer entity's (warehouse/models/customer.toml).
DEFAULT_ENTITY = load_model().entity()
_DEFAULT = schemas(DEFAULT_ENTITY)
ENTITY_ATTRIBUTES = StructType([_s(c.name, spark_type(c.type)) for c in DEFAULT_ENTITY.attributes])
INGESTED_UPDATES = _DEFAULT.ingested_updates
CUSTOMER_CURRENT = _DEFAULT.entity_table
OUTCOME_LOG = _DEFAULT.outcome_log
LOGGED_UPDATE = _DEFAULT.logged_update
APPLIED_CHANGES = _DEFAULT.applied_changes
DUPLICATES_QUARANTINE = _DEFAULT.duplicates_quarantine
BATCH_LEDGER = _DEFAULT.batch_ledger
TABLES = tables(DEFAULT_ENTITY)
VIEWS = views(DEFAULT_ENTITY)
DETERMINISTIC_TABLES = deterministic_tables(DEFAULT_ENTITY)
