"""Transform: a fact's references (pure DataFrame -> DataFrame functions; the lookups and the
inferred members' commit are ``etl.load.references``).

A reference names a dimension and the fact's columns (``by``) that hold the dimension's key, in
order; with the reference's source (or the fact line's own ``source_id``) they are a key of the
dimension's ``key_map``: ``(source_id, natural_key)``, the key encoded as the dimension's line
rules encode it (``etl.core.model.encode_key``). A key the dimension has not seen becomes an
inferred member: an update of op ``infer`` that allocates its surrogate key at once, with no
content, which the dimension's first real update for it fills (``transforms.outcomes``).

What a fact's key names is read when the fact is read, never stored on it: the dimension's version
valid at the fact's event time (``versions_at_event_time``) and whether that member was deleted
then (``deleted_at_event_time``), so they follow the dimension as it now is, whatever the order the
streams were loaded in (docs/decisions/deleted-references.md).
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from etl.core.model import Entity, Reference
from etl.transforms.outcomes import INFER, INFERRED_HASH, INFERRED_SEQ
from warehouse.schemas import spark_type

PROBE_KEY = ("source_id", "natural_key")


def inferred_run_key(fact: str, run_key: str) -> str:
    """The dimension's ledger names its inferred-member batches after the fact's run (a key that
    is no interval, so it overlaps no run of the dimension's)."""
    return f"{fact}:{run_key}"


def encoded(entity: Entity, by: tuple[str, ...]) -> SparkColumn:
    """``encode_key`` in Spark: each part's canonical text (a typed column cast to text is what the
    line rules write for the types a reference may use), one part as itself, several as a JSON array."""
    parts = [F.col(c).cast("string") for c in by]
    return parts[0] if len(parts) == 1 else F.to_json(F.array(*parts))


def source_of(reference: Reference) -> SparkColumn:
    return F.lit(reference.source) if reference.source else F.col("source_id")


def probes(batch: DataFrame, fact: Entity, dimension: Entity) -> DataFrame:
    """The distinct dimension keys the batch's references to ``dimension`` name, each with its
    key columns (the dimension's names) and the times of the first fact that names it (an
    inferred member's)."""
    stored = [c.name for c in dimension.key_columns_stored]
    parts = []
    for r in fact.references:
        if r.dimension != dimension.name:
            continue
        renamed = {theirs.name: F.col(mine) for mine, theirs in zip(r.by, dimension.key)}
        parts.append(batch.select(
            source_of(r).alias("source_id"), encoded(fact, r.by).alias("natural_key"),
            *[renamed[c].cast(spark_type(next(k.type for k in dimension.key if k.name == c))).alias(c) for c in stored],
            "event_ts", "arrival_ts", "update_id",
        ))
    union = reduce(DataFrame.unionByName, parts)
    # The first fact (in arrival order) naming the key gives an inferred member its times: the
    # same whichever batches the stream was cut into.
    first = F.min(F.struct("arrival_ts", "update_id", "event_ts"))
    return union.groupBy(*PROBE_KEY).agg(*[F.first(c).alias(c) for c in stored], first.alias("_first")).select(
        *PROBE_KEY, *stored, F.col("_first.event_ts").alias("event_ts"), F.col("_first.arrival_ts").alias("arrival_ts"))


def inferred_updates(missing: DataFrame, fact: Entity, dimension: Entity, update_columns: list[str]) -> DataFrame:
    """The dimension's updates that allocate ``missing`` keys as inferred members, joined already
    (nothing in ``key_map``): what the dimension's loader commits like any released batch."""
    known = set(missing.columns)
    typed = {c.name: spark_type(c.type) for c in dimension.columns}
    values = {
        "update_id": F.concat(F.lit(f"inferred:{fact.name}:"), F.col("source_id"), F.lit("/"), F.col("natural_key")),
        "op": F.lit(INFER),
        "source_seq": F.lit(INFERRED_SEQ).cast("long"),
        "row_hash": F.lit(INFERRED_HASH),
    }
    cols = [values[c].alias(c) if c in values else F.col(c) if c in known else F.lit(None).cast(typed[c]).alias(c)
            for c in update_columns]
    return missing.select(
        *cols,
        F.lit(None).cast("long").alias("km_surrogate_key"),
        F.lit(None).cast("string").alias("km_row_hash"),
        F.lit(None).cast("long").alias("km_last_source_seq"),
    )


def with_references(batch: DataFrame, fact: Entity, found: dict[str, DataFrame]) -> DataFrame:
    """``batch`` with each reference's column set from ``found[dimension]`` (``source_id``,
    ``natural_key``, ``km_surrogate_key``); null where the key was not found."""
    out = batch
    for r in fact.references:
        keys = found[r.dimension].select(
            F.col("source_id").alias("_ref_source"), F.col("natural_key").alias("_ref_key"),
            F.col("km_surrogate_key").alias("_ref_sk"))
        out = (out.withColumn("_ref_source", source_of(r)).withColumn("_ref_key", encoded(fact, r.by))
               .join(keys, ["_ref_source", "_ref_key"], "left")
               .withColumn(r.name, F.col("_ref_sk")).drop("_ref_source", "_ref_key", "_ref_sk"))
    return out.select(*batch.columns)


def versions_at_event_time(facts: DataFrame, history: DataFrame, reference: Reference) -> DataFrame:
    """``facts`` with, for ``reference`` to a history dimension, the dimension's version valid at
    each fact's ``event_ts`` (its columns prefixed ``<reference>__``): the version with
    ``valid_from <= event_ts < valid_to`` (``valid_to`` null: open); a fact older than the key's
    first version gets the first version (the member existed; its first known content describes it
    best). Read-time, so it always follows the history as it now is: a version that arrives late
    re-points the facts it covers, which a key stored on the fact would not."""
    sk = reference.name
    by_key = Window.partitionBy("surrogate_key").orderBy("valid_from", "source_seq")
    versions = history.select(
        *[F.col(c).alias(f"{sk}__{c}") for c in history.columns],
        (F.row_number().over(by_key) == 1).alias("_first"),
    )
    starts = F.col(f"{sk}__valid_from")
    ends = F.col(f"{sk}__valid_to")
    valid = (starts <= F.col("event_ts")) & (ends.isNull() | (F.col("event_ts") < ends))
    older = F.col("_first") & (F.col("event_ts") < starts)
    on = (F.col(sk) == F.col(f"{sk}__surrogate_key")) & (valid | older)
    return facts.join(versions, on, "left").drop("_first")


def deleted_at_event_time(facts: DataFrame, dimension_rows: DataFrame, reference: Reference, history: bool) -> DataFrame:
    """``facts`` with ``<reference>__deleted``: whether the member the fact's key names was deleted
    at the fact's ``event_ts``. In a history dimension, the version ``versions_at_event_time``
    gives the fact is a delete that started no later than the fact (a fact older than a first
    version that is a delete reads it, but the member was alive then); in a current-state one
    (``history`` false), the member's row is a delete no later than the fact (it keeps no history: a member deleted and then created again
    shows as it is now). False for an inferred member (never deleted) and for a key the dimension
    does not hold (dangling: the gate's own check); null only for a fact without the key. Computed
    when read, never stored: a stored flag would depend on whether the fact was loaded before or
    after the delete (docs/decisions/deleted-references.md)."""
    sk = reference.name
    # Only the members the facts name: a fact run's few keys, not the whole dimension.
    named = facts.select(F.col(sk).alias("surrogate_key")).distinct()
    dimension_rows = dimension_rows.join(named, "surrogate_key", "left_semi")
    if history:
        versions = dimension_rows.select("surrogate_key", "valid_from", "valid_to", "source_seq", "is_deleted")
        joined = versions_at_event_time(facts, versions, reference)
        # A fact older than the key's first version reads that version; when it is a delete, the
        # member was not deleted yet at the fact's time (as for a current-state dimension).
        deleted = F.col(f"{sk}__is_deleted") & (F.col(f"{sk}__valid_from") <= F.col("event_ts"))
    else:
        members = dimension_rows.select(F.col("surrogate_key").alias(f"{sk}__surrogate_key"),
                                        F.col("is_deleted").alias(f"{sk}__is_deleted"),
                                        F.col("event_ts").alias(f"{sk}__event_ts"))
        joined = facts.join(members, F.col(sk) == F.col(f"{sk}__surrogate_key"), "left")
        deleted = F.col(f"{sk}__is_deleted") & (F.col(f"{sk}__event_ts") <= F.col("event_ts"))
    flag = F.when(F.col(sk).isNotNull(), F.coalesce(deleted, F.lit(False)))
    return joined.select(*facts.columns, flag.alias(f"{sk}__deleted"))
