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
    and for ``type1`` columns ``row_hash`` and those columns).

    With ``type1`` columns an applied update makes a version only when its ``version_hash`` differs
    from the key's previous one (in the batch, else the open version's); every version of the key,
    old and new, gets the type1 values of its last applied update that is no delete (a delete says
    the member is gone, not that its e-mail changed), else the open version's, else the first
    line's; the ``close`` row carries them to the key's stored versions and closes the open one
    only when the batch made a version (``_closes``)."""
    type1 = entity.type1
    applied = outcomes.where(F.col("applies")).select(
        "surrogate_key", "source_id", "natural_key", *(c.name for c in entity.columns),
        (F.col("op") == "delete").alias("is_deleted"),
        *([(F.col("op") == INFER).alias("is_inferred")] if entity.inferred else []),
        "row_hash", "source_seq", "event_ts", "arrival_ts",
        F.col("batch_seq").alias("updated_batch_seq"),
    )
    # Only the batch's keys' open versions (a semi-join on the batch's few keys), so the table's
    # other open versions are never gathered anywhere. An inferred member's open version bounds
    # nothing: the first real version replaces it (the MERGE deletes it) and starts at its own time.
    keys = F.broadcast(applied.select("surrogate_key").distinct())
    opened = open_versions.join(keys, "surrogate_key", "left_semi")
    if entity.inferred:
        opened = opened.where(~F.col("is_inferred"))
    opened = opened.select("surrogate_key", F.col("valid_from").alias("_open_from"), *(
        [F.col("row_hash").alias("_open_hash"), F.struct(*type1).alias("_open_type1")] if type1 else []))
    by_seq = Window.partitionBy("surrogate_key").orderBy("source_seq")
    so_far = by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    start = F.greatest(F.col("event_ts"), F.col("_open_from"))  # greatest skips a null: no open version
    updates = applied.join(opened, "surrogate_key", "left")
    if type1:
        digest = F.substring("row_hash", 1, VERSION_HASH_CHARS)
        before = F.coalesce(F.lag(digest).over(by_seq), F.substring("_open_hash", 1, VERSION_HASH_CHARS))
        values = F.struct(*type1)
        by_key = Window.partitionBy("surrogate_key")
        last_upsert = F.max_by(values, F.when(~F.col("is_deleted"), F.col("source_seq"))).over(by_key)
        updates = updates.withColumn("_makes_version", before.isNull() | (digest != before)).withColumn(
            "_type1", F.coalesce(last_upsert, F.col("_open_type1"), F.min_by(values, F.col("source_seq")).over(by_key)))
        made = updates.where(F.col("_makes_version")).withColumns({c: F.col(f"_type1.{c}") for c in type1})
    else:
        made = updates
    versions = (
        made
        .withColumn("valid_from", F.max(start).over(so_far))
        .withColumn("valid_to", F.lead("valid_from").over(by_seq))
        .withColumn("is_current", F.col("valid_to").isNull())
        .drop("_open_from", "_open_hash", "_open_type1", "_makes_version", "_type1")
        .withColumn("_kind", F.lit(VERSION))
    )
    starts = versions.groupBy("surrogate_key").agg(
        F.min("valid_from").alias("valid_from"), F.first("updated_batch_seq").alias("updated_batch_seq"))
    if type1:
        # Every key of the batch, a version or not: its type1 values go to all its versions.
        starts = updates.groupBy("surrogate_key").agg(
            F.first("updated_batch_seq").alias("updated_batch_seq"), F.first("_type1").alias("_type1"),
            F.max(F.col("_makes_version").cast("int")).cast("boolean").alias("_closes"),
        ).join(starts.drop("updated_batch_seq"), "surrogate_key", "left").select(
            "surrogate_key", "valid_from", "updated_batch_seq", "_closes", *[F.col(f"_type1.{c}").alias(c) for c in type1])
    closes = starts.withColumn("_kind", F.lit(CLOSE))
    return versions.unionByName(closes, allowMissingColumns=True)


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
