"""SCD type 2: a history entity's applied updates as versions (pure DataFrame -> DataFrame).

Each applied update (new or matched, a delete included: its version has ``is_deleted``) is one
version of its surrogate key. Versions are ordered by ``source_seq`` (the entity's sequence
column), which only increases per key, so a stale update never becomes a version and never
rewrites history. Validity is ``[valid_from, valid_to)`` in event time, with no gap and no
overlap: a version starts at its ``event_ts``, or at its predecessor's start when that is later
(the sequence decides the order), and ends where the next begins. So a version whose event time
is not after its predecessor's start starts there too, and the predecessor is valid for no time
(``valid_from = valid_to``); the open version (``valid_to`` null, ``is_current``) is the last.
An inferred member (a key a fact named first) is one open version with no content; the
dimension's first real version replaces it. An entity's ``type1`` columns are overwritten on every
version of the key and their change alone makes no version (docs/decisions/type1-columns.md)."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from etl.core.model import VERSION_HASH_CHARS, Entity
from etl.core.row_merges import CLOSE, VERSION
from etl.transforms.outcomes import INFER

__all__ = ["CLOSE", "VERSION", "history_changes", "history_validity"]


def history_changes(outcomes: DataFrame, open_versions: DataFrame, entity: Entity) -> DataFrame:
    """The rows one MERGE applies: the batch's versions of each key, and one ``close`` row per key
    (``_kind``). ``open_versions``: the history table's open rows (``surrogate_key``, ``valid_from``,
    and for ``type1`` columns ``source_seq``, ``row_hash`` and those columns)."""
    applied = outcomes.where(F.col("applies")).select(
        "surrogate_key", "source_id", "natural_key", *(c.name for c in entity.columns),
        (F.col("op") == "delete").alias("is_deleted"),
        *([(F.col("op") == INFER).alias("is_inferred")] if entity.inferred else []),
        "row_hash", "source_seq", "event_ts", "arrival_ts",
        F.col("batch_seq").alias("updated_batch_seq"),
    )
    updates = applied.join(_open_of(applied, open_versions, entity), "surrogate_key", "left")
    # Updates at or below the open version's sequence are applied already: logged batches applied
    # together again after part of them was (a MERGE of the group committed, the other cut short)
    # must add only what is not there, as one batch applied twice adds nothing.
    updates = updates.where(F.col("_open_seq").isNull() | (F.col("source_seq") > F.col("_open_seq")))
    if not entity.type1:
        versions = _versions(updates)
        return versions.unionByName(_closes(versions), allowMissingColumns=True)
    updates = _type1_decisions(updates, entity.type1)
    versions = _versions(updates.where(F.col("_makes_version")).withColumns({c: F.col(f"_type1.{c}") for c in entity.type1}))
    return versions.unionByName(_type1_closes(updates, versions, entity.type1), allowMissingColumns=True)


def _open_of(applied: DataFrame, open_versions: DataFrame, entity: Entity) -> DataFrame:
    """The open version of each key of the batch: where it starts (``_open_from``), and for type1
    columns its sequence, hash and type1 values. Only the batch's keys' (a semi-join on the batch's
    few keys), so the table's other open versions are never gathered anywhere. An inferred
    member's open version bounds nothing: the first real version replaces it (the MERGE deletes
    it) and starts at its own time."""
    keys = F.broadcast(applied.select("surrogate_key").distinct())
    opened = open_versions.join(keys, "surrogate_key", "left_semi")
    if entity.inferred:
        opened = opened.where(~F.coalesce(F.col("is_inferred"), F.lit(False)))  # null: a row from before the column
    type1 = [F.col("row_hash").alias("_open_hash"), F.struct(*entity.type1).alias("_open_type1")] if entity.type1 else []
    return opened.select("surrogate_key", F.col("valid_from").alias("_open_from"), F.col("source_seq").alias("_open_seq"), *type1)


def _versions(made: DataFrame) -> DataFrame:
    """Updates that make versions -> the versions, each valid from its event time or its
    predecessor's start if later, to its successor's start."""
    by_seq = Window.partitionBy("surrogate_key").orderBy("source_seq")
    so_far = by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    start = F.greatest(F.col("event_ts"), F.col("_open_from"))  # greatest skips a null: no open version
    return (
        made
        .withColumn("valid_from", F.max(start).over(so_far))
        .withColumn("valid_to", F.lead("valid_from").over(by_seq))
        .withColumn("is_current", F.col("valid_to").isNull())
        .drop("_open_from", "_open_seq", "_open_hash", "_open_type1", "_makes_version", "_type1")
        .withColumn("_kind", F.lit(VERSION))
    )


def _closes(versions: DataFrame) -> DataFrame:
    """One row per key: its open version closes where the batch's first version starts (marked
    with the latest batch of those applied together: the MERGE's guard)."""
    return versions.groupBy("surrogate_key").agg(
        F.min("valid_from").alias("valid_from"), F.max("updated_batch_seq").alias("updated_batch_seq")
    ).withColumn("_kind", F.lit(CLOSE))


def _type1_decisions(updates: DataFrame, type1: tuple[str, ...]) -> DataFrame:
    """Per applied update of an entity with ``type1`` columns: whether it makes a version
    (``_makes_version``: its ``version_hash`` differs from the key's previous one, in the batch,
    else the open version's), and the type1 values every version of the key gets (``_type1``): its
    last applied update's that is no delete (a delete says the member is gone, not that its e-mail
    changed), else the open version's, else the first line's.

    Updates at or below the open version's sequence (left out before, in ``history_changes``) are
    a replay's, the batch's MERGE committed already: they decided when first applied, and judged
    again against the batch's own last version they would make versions that never were. On a
    first apply every applied update is above it (its sequence is above ``key_map``'s, which is at
    least the open version's)."""
    by_seq = Window.partitionBy("surrogate_key").orderBy("source_seq")
    by_key = Window.partitionBy("surrogate_key")
    digest = F.substring("row_hash", 1, VERSION_HASH_CHARS)
    before = F.coalesce(F.lag(digest).over(by_seq), F.substring("_open_hash", 1, VERSION_HASH_CHARS))
    values = F.struct(*type1)
    last_upsert = F.max_by(values, F.when(~F.col("is_deleted"), F.col("source_seq"))).over(by_key)
    return updates.withColumn("_makes_version", before.isNull() | (digest != before)).withColumn(
        "_type1", F.coalesce(last_upsert, F.col("_open_type1"), F.min_by(values, F.col("source_seq")).over(by_key)))


def _type1_closes(updates: DataFrame, versions: DataFrame, type1: tuple[str, ...]) -> DataFrame:
    """One row per key of the batch, a version or not: its type1 values, for all its versions, and
    whether the batch made a version (``_closes``), whose first start closes the open one."""
    starts = versions.groupBy("surrogate_key").agg(F.min("valid_from").alias("valid_from"))
    return updates.groupBy("surrogate_key").agg(
        F.max("updated_batch_seq").alias("updated_batch_seq"), F.first("_type1").alias("_type1"),
        F.max(F.col("_makes_version").cast("int")).cast("boolean").alias("_closes"),
    ).join(starts, "surrogate_key", "left").select(
        "surrogate_key", "valid_from", "updated_batch_seq", "_closes", *[F.col(f"_type1.{c}").alias(c) for c in type1],
    ).withColumn("_kind", F.lit(CLOSE))


def history_validity(history: DataFrame) -> DataFrame:
    """Per surrogate key: its open versions (must be 1), whether the open one is the last, and the
    overlaps, gaps and inverted intervals between its versions (must be 0): what the gate checks."""
    by_seq = Window.partitionBy("surrogate_key").orderBy("source_seq")
    nxt = F.lead("valid_from").over(by_seq)
    last = F.lead("source_seq").over(by_seq).isNull()
    rows = history.select(
        "surrogate_key", "is_current", "valid_from", "valid_to",
        nxt.alias("_next_from"), last.alias("_last"),
    )
    closed = ~F.col("_last")
    return rows.groupBy("surrogate_key").agg(
        F.sum(F.col("is_current").cast("long")).alias("open_versions"),
        F.sum((F.col("_last") & F.col("is_current") & F.col("valid_to").isNull()).cast("long")).alias("last_open"),
        F.sum((closed & (F.col("valid_to").isNull() | (F.col("valid_to") > F.col("_next_from")))).cast("long")).alias("overlaps"),
        F.sum(F.coalesce(closed & (F.col("valid_to") < F.col("_next_from")), F.lit(False)).cast("long")).alias("gaps"),
        F.sum(F.coalesce(F.col("valid_to") < F.col("valid_from"), F.lit(False)).cast("long")).alias("inverted"),
    )
