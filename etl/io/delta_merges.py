"""The load's Delta MERGEs: small Delta operations, each a function of a table and the changes
(mack-style), each tested on a few rows, beside their in-memory equivalents (``etl.core.row_merges``)
against the same expected rows (tests/etl/load/test_apply.py).

Both MERGEs are idempotent: a row is changed only by a batch newer than the one that last changed
it (``updated_batch_seq``), so recovery may apply a logged batch again."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core.model import Entity
from etl.core import merge_rules
from etl.io.spark import sql_settings
from etl.io.table_base import conform, schema_of
from warehouse.schemas import DEFAULT_ENTITY

CUSTOMER_CURRENT_MERGE_CONDITION = merge_rules.CURRENT.condition
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"


def key_map_merge_condition(changes: DataFrame, segments: list[int] | None = None) -> str:
    """The key_map MERGE's match condition, narrowed to the segments the batch touches.

    Delta finds a MERGE's target files with a join over every file its condition does not rule
    out by target-only predicates; without the literal segment list every batch would scan all
    of key_map, whatever the join strategy read (a key's row lives in its segment's partition).
    ``segments``, when given, is that list already (``summarise_outcomes`` gathers it in the pass
    it makes anyway, a Spark job fewer)."""
    keys = "t.source_id = s.source_id AND t.natural_key = s.natural_key"
    if segments is None:
        segments = [int(r[0]) for r in changes.select("segment_id").distinct().collect()]
    segments = sorted(segments)
    if not segments:
        return keys
    return f"t.segment_id IN ({', '.join(map(str, segments))}) AND {keys}"


def merge_key_map(table: DeltaTable, changes: DataFrame, segments: list[int] | None = None) -> None:
    """``changes`` (``transforms.outcomes.key_map_changes``: one row per key of the batch) into
    ``key_map``: known keys advance their hash, sequence and arrival; new keys are inserted."""
    (
        table.alias("t")
        .merge(F.broadcast(changes).alias("s"), key_map_merge_condition(changes, segments))
        .whenMatchedUpdate(
            condition="t.updated_batch_seq < s.batch_seq",
            set={
                "row_hash": "coalesce(s.applied_row_hash, t.row_hash)",
                "last_source_seq": "greatest(t.last_source_seq, s.max_source_seq)",
                "last_arrival_ts": "greatest(t.last_arrival_ts, s.last_arrival_ts)",
                "updated_batch_seq": "s.batch_seq",
            },
        )
        .whenNotMatchedInsert(
            condition="s.is_new",
            values={
                "source_id": "s.source_id",
                "natural_key": "s.natural_key",
                "surrogate_key": "s.surrogate_key",
                "row_hash": "s.applied_row_hash",
                "last_source_seq": "s.max_source_seq",
                "first_arrival_ts": "s.new_arrival_ts",
                "last_arrival_ts": "s.last_arrival_ts",
                "created_batch_seq": "coalesce(s.created_batch_seq, s.batch_seq)" if "created_batch_seq" in changes.columns
                                     else "s.batch_seq",
                "updated_batch_seq": "s.batch_seq",
                "segment_id": "s.segment_id",
            },
        )
        .execute()
    )


def merge_current(table: DeltaTable, state: DataFrame, held: bool = False, entity: Entity = DEFAULT_ENTITY) -> None:
    """``state`` (``transforms.outcomes.current_state_rows``: a key's last applied update) into
    the entity's ``<name>_current``, unless that row is already as new (``merge_rules.CURRENT``).

    ``held``: ``state`` is a projection of a local checkpoint, so it reads the same rows however
    often it is read, and Delta need not copy it first (its ``materializeSource``, a Spark job;
    a source that is in Spark's cache must be copied, Delta refuses it otherwise)."""
    settings = {MATERIALIZE_SOURCE: "none"} if held else {}
    with sql_settings(state.sparkSession, settings):
        merge_by_rules(table, conform(state, entity.table, entity), merge_rules.CURRENT)


def merge_history(table: DeltaTable, changes: DataFrame, entity: Entity) -> None:
    """``changes`` (``transforms.history.history_changes``) into the entity's ``<name>_history``
    by ``merge_rules.history``."""
    columns = schema_of(entity.table, entity).fieldNames()
    merge_by_rules(table, changes, merge_rules.history(columns, entity.inferred, entity.type1))


def merge_by_rules(table: DeltaTable, changes: DataFrame, rules: merge_rules.MergeRules) -> None:
    """One Delta MERGE of ``changes`` (broadcast: a batch's, or a few batches') by ``rules``."""
    merge = table.alias("t").merge(F.broadcast(changes).alias("s"), rules.condition)
    if rules.delete_when:
        merge = merge.whenMatchedDelete(condition=rules.delete_when)
    if rules.update_all:
        merge = merge.whenMatchedUpdateAll(condition=rules.update_when)
    else:
        merge = merge.whenMatchedUpdate(condition=rules.update_when, set=rules.update_set)
    if rules.insert_values:
        merge = merge.whenNotMatchedInsert(condition=rules.insert_when, values=rules.insert_values)
    else:
        merge = merge.whenNotMatchedInsertAll(condition=rules.insert_when)
    merge.execute()


def compact_segments(table: DeltaTable, segments: list[int]) -> None:
    """The files of each of ``segments`` (a ``segment_id``-partitioned table) rewritten as one
    (Delta's OPTIMIZE of those partitions: one commit that changes no row, so a reader of an older
    version, time travel included, still reads the files it listed)."""
    if segments:
        table.optimize().where(f"segment_id IN ({', '.join(str(int(s)) for s in sorted(segments))})").executeCompaction()
