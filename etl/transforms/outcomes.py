"""Transform: pure DataFrame -> DataFrame functions that decide each update's outcome.

Input is a micro-batch already joined with ``key_map`` by a strategy: the update columns plus
``km_surrogate_key``, ``km_row_hash``, ``km_last_source_seq`` (null when the key is not in
``key_map``). Updates of one key are judged in arrival order, each against the state the previous
ones left, so the outcome does not depend on how the stream was cut into micro-batches.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from etl.core.model import Entity
from warehouse.schemas import DEFAULT_ENTITY

KEY = ("source_id", "natural_key")
ARRIVAL_ORDER = ("arrival_ts", "update_id")


INFER = "infer"  # the op of an inferred member's update (``etl.load.references``): a key with no content yet
INFERRED_SEQ = -1  # its sequence and row hash: below and unlike any real update's, which fills it
INFERRED_HASH = ""


def classify(joined: DataFrame, append_only: bool = False) -> DataFrame:
    """Adds ``outcome`` (new, matched, duplicate, stale), ``reason``, ``applies``, ``is_last_applied``.

    - new: the key is in neither ``key_map`` nor earlier in the batch (its first update); reason
      ``inferred`` for an inferred member (op ``infer``);
    - stale: ``source_seq`` below the highest seen for the key;
    - duplicate/redelivered: ``source_seq`` equal to the highest seen (the same update again);
      duplicate/sequence_conflict when its content differs all the same (two changes at one log
      position, such as two changes of a row in one Oracle transaction under one SCN): not
      applied, and said, never passed for a redelivery;
    - duplicate/unchanged_content: newer, but its content equals the current version;
    - matched: a newer version with new content; with ``append_only`` (a fact identified by an
      event id) a duplicate/same_event instead: an event happens once.
    """
    by_key = Window.partitionBy(*KEY).orderBy(*ARRIVAL_ORDER)
    before = by_key.rowsBetween(Window.unboundedPreceding, -1)
    whole = Window.partitionBy(*KEY).orderBy(*ARRIVAL_ORDER).rowsBetween(
        Window.unboundedPreceding, Window.unboundedFollowing
    )

    step1 = joined.select(
        "*",
        F.row_number().over(by_key).alias("_rank_in_key"),
        F.greatest(F.col("km_last_source_seq"), F.max("source_seq").over(before)).alias("_prev_max_seq"),
    ).withColumn(
        "_advances", F.col("_prev_max_seq").isNull() | (F.col("source_seq") > F.col("_prev_max_seq"))
    )
    inferred = (F.col("op") == INFER) if "op" in joined.columns else F.lit(False)
    prev_hash = F.coalesce(
        F.last(F.when(F.col("_advances"), F.col("row_hash")), ignorenulls=True).over(before), F.col("km_row_hash")
    )
    exists_before = F.col("km_surrogate_key").isNotNull() | (F.col("_rank_in_key") > 1)
    outcome = (
        F.when(~exists_before, "new")
        .when(F.col("source_seq") < F.col("_prev_max_seq"), "stale")
        .when(F.col("source_seq") == F.col("_prev_max_seq"), "duplicate")
        .when(F.col("row_hash") == F.col("_prev_hash"), "duplicate")
        .otherwise("duplicate" if append_only else "matched")
    )
    reason = (
        F.when(F.col("outcome") == "stale", "stale")
        .when((F.col("outcome") == "new") & inferred, "inferred")
        .when((F.col("outcome") == "duplicate") & (F.col("source_seq") == F.col("_prev_max_seq"))
              & (F.col("row_hash") != F.col("_prev_hash")) & F.lit(not append_only), "sequence_conflict")
        .when((F.col("outcome") == "duplicate") & (F.col("source_seq") == F.col("_prev_max_seq")), "redelivered")
        .when((F.col("outcome") == "duplicate") & (F.col("row_hash") == F.col("_prev_hash")), "unchanged_content")
        .when(F.col("outcome") == "duplicate", "same_event")
    )
    step2 = (
        step1.withColumn("_prev_hash", prev_hash)
        .withColumn("outcome", outcome)
        .withColumn("reason", reason)
        .withColumn("applies", F.col("outcome").isin("new", "matched"))
    )
    last_applied_id = F.last(F.when(F.col("applies"), F.col("update_id")), ignorenulls=True).over(whole)
    return step2.withColumn(
        "is_last_applied", F.coalesce(F.col("update_id") == last_applied_id, F.lit(False))
    ).withColumnRenamed("km_last_source_seq", "stored_source_seq").drop(
        "_rank_in_key", "_prev_max_seq", "_advances", "_prev_hash"
    )


def allocate_keys(classified: DataFrame, next_key: int) -> DataFrame:
    """Gives each new natural key one dense surrogate key, ``next_key`` upward, in arrival order.

    Exactly one update per new key has outcome ``new`` (its first), so numbering those rows
    numbers the keys; every other update of the key takes the same number. Windows over the one
    plan, not a join of the batch with its own new rows: a self-join plans the batch's join with
    ``key_map`` twice (twice the table scans, broadcasts and Spark jobs per batch; issue 46).
    """
    is_new = F.col("outcome") == "new"
    # The new rows numbered in one partition; the others (most of a steady batch) spread by key.
    among_new = Window.partitionBy(F.when(~is_new, F.col("natural_key"))).orderBy(*ARRIVAL_ORDER)
    numbered = F.when(is_new, F.lit(next_key) - 1 + F.row_number().over(among_new))
    return (
        classified.withColumn("_new_key", numbered.cast("long"))
        .withColumn("_new_key", F.max("_new_key").over(Window.partitionBy(*KEY)))
        .withColumn("surrogate_key", F.coalesce(F.col("km_surrogate_key"), F.col("_new_key")))
        .drop("_new_key", "km_surrogate_key", "km_row_hash")
    )


def resolve(joined: DataFrame, next_key: int, append_only: bool = False) -> DataFrame:
    """classify then allocate: the whole decision for one released micro-batch."""
    return allocate_keys(classify(joined, append_only), next_key)


def key_map_changes(outcomes: DataFrame, segment_of) -> DataFrame:
    """Per key touched by the batch, or by several logged batches applied at once: its new
    ``key_map`` row (insert or update). The last applied hash is the latest batch's; the change
    carries the latest ``batch_seq`` (the MERGE's guard) and, for a new key, the batch that
    created it."""
    last_applied = F.when(F.col("is_last_applied"), F.struct("batch_seq", "row_hash"))
    agg = outcomes.groupBy(*KEY).agg(
        F.first("surrogate_key").alias("surrogate_key"),
        F.max(last_applied)["row_hash"].alias("applied_row_hash"),
        F.max("source_seq").alias("max_source_seq"),
        F.min(F.when(F.col("outcome") == "new", F.col("arrival_ts"))).alias("new_arrival_ts"),
        F.max("arrival_ts").alias("last_arrival_ts"),
        F.max(F.col("outcome") == "new").alias("is_new"),
        F.max("batch_seq").alias("batch_seq"),
        F.min(F.when(F.col("outcome") == "new", F.col("batch_seq"))).alias("created_batch_seq"),
    )
    return agg.withColumn("segment_id", segment_of(F.col("source_id"), F.col("natural_key")))


def combine_changes(earlier: DataFrame, later: DataFrame) -> DataFrame:
    """The ``key_map`` changes of earlier logged batches and of a later one, as one change per key:
    what ``key_map_changes`` of all their outcomes gives, from the changes alone (a tail grown by
    one batch is not aggregated again from all its outcomes)."""
    latest_hash = F.when(F.col("applied_row_hash").isNotNull(), F.struct("batch_seq", "applied_row_hash"))
    return earlier.unionByName(later).groupBy(*KEY).agg(
        F.first("surrogate_key").alias("surrogate_key"),
        F.max(latest_hash)["applied_row_hash"].alias("applied_row_hash"),
        F.max("max_source_seq").alias("max_source_seq"),
        F.min("new_arrival_ts").alias("new_arrival_ts"),
        F.max("last_arrival_ts").alias("last_arrival_ts"),
        F.max("is_new").alias("is_new"),
        F.max("batch_seq").alias("batch_seq"),
        F.min("created_batch_seq").alias("created_batch_seq"),
        F.first("segment_id").alias("segment_id"),
    )


def key_map_on_read(key_map: DataFrame, changes: DataFrame) -> DataFrame:
    """``key_map`` as the MERGE of ``changes`` (``key_map_changes`` of logged batches not applied
    yet) will leave it, read without writing it (merge-on-read): a known key advances as
    ``delta_merges.merge_key_map`` advances it, a new key is added. ``changes``' new keys must not
    be in ``key_map`` yet (true while their batches are unapplied: the loader checks that no one
    wrote ``key_map`` since). A filter on ``segment_id`` is pushed into both sides."""
    s = changes.select(
        *KEY, F.col("applied_row_hash").alias("_s_hash"), F.col("max_source_seq").alias("_s_seq"),
        F.col("last_arrival_ts").alias("_s_arrival"), F.col("batch_seq").alias("_s_batch"),
    )
    joined = key_map.join(F.broadcast(s), list(KEY), "left")
    advances = F.coalesce(F.col("updated_batch_seq") < F.col("_s_batch"), F.lit(False))

    def advanced(column, value):
        return F.when(advances, value).otherwise(F.col(column)).alias(column)

    known = joined.select(*[
        advanced("row_hash", F.coalesce(F.col("_s_hash"), F.col("row_hash"))) if c == "row_hash"
        else advanced("last_source_seq", F.greatest(F.col("last_source_seq"), F.col("_s_seq"))) if c == "last_source_seq"
        else advanced("last_arrival_ts", F.greatest(F.col("last_arrival_ts"), F.col("_s_arrival"))) if c == "last_arrival_ts"
        else advanced("updated_batch_seq", F.col("_s_batch")) if c == "updated_batch_seq"
        else F.col(c)
        for c in key_map.columns
    ])
    inserted = changes.where(F.col("is_new")).select(
        "source_id", "natural_key", "surrogate_key", F.col("applied_row_hash").alias("row_hash"),
        F.col("max_source_seq").alias("last_source_seq"), F.col("new_arrival_ts").alias("first_arrival_ts"),
        "last_arrival_ts", F.coalesce("created_batch_seq", "batch_seq").alias("created_batch_seq"),
        F.col("batch_seq").alias("updated_batch_seq"), "segment_id",
    )
    return known.unionByName(inserted.select([F.col(f.name).cast(f.dataType) for f in key_map.schema.fields]))


def current_state_rows(outcomes: DataFrame, entity: Entity = DEFAULT_ENTITY, several_batches: bool = False) -> DataFrame:
    """The last applied update of each key becomes its current-state row (of the latest batch,
    when ``several_batches`` logged batches are applied at once)."""
    last = outcomes.where(F.col("is_last_applied"))
    if several_batches:
        latest = Window.partitionBy("surrogate_key").orderBy(F.col("batch_seq").desc())
        last = last.withColumn("_n", F.row_number().over(latest)).where(F.col("_n") == 1).drop("_n")
    return last.select(
        "surrogate_key",
        "source_id",
        "natural_key",
        *(c.name for c in entity.columns),
        (F.col("op") == "delete").alias("is_deleted"),
        *([(F.col("op") == INFER).alias("is_inferred")] if entity.inferred else []),
        "row_hash",
        F.col("source_seq").alias("last_source_seq"),
        "event_ts",
        "arrival_ts",
        F.col("batch_seq").alias("updated_batch_seq"),
    )


def with_natural_keys(df: DataFrame, key_map: DataFrame) -> DataFrame:
    """``df`` with each surrogate key replaced by the natural key it stands for (``stands_for``:
    ``source_id/natural_key``): two warehouses compared up to the numbering of keys allocated
    in a run (DESIGN.md §3.3), by the tests and the benchmark."""
    keys = key_map.select("surrogate_key", F.concat_ws("/", *KEY).alias("stands_for"))
    return df.join(keys, "surrogate_key", "left").drop("surrogate_key")
