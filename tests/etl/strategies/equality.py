"""Warehouse equality "up to the numbering of keys allocated in the run" (DESIGN.md §3.3)."""

from chispa import assert_df_equality

from etl.tables import read

# Columns that record how a run was cut into releases, not what it decided.
BOOKKEEPING = {
    "key_map": ("created_batch_seq", "updated_batch_seq", "segment_id"),  # segment_id: placement, by layout
    "customer_current": ("updated_batch_seq",),
    "outcome_log": ("batch_seq", "batch_index", "is_last_applied", "stored_source_seq"),
    "applied_changes": ("batch_seq", "batch_index", "is_last_applied", "stored_source_seq"),
    "duplicates_quarantine": ("batch_seq", "batch_index", "is_last_applied", "stored_source_seq"),
}


def canonical(spark, cfg, name: str):
    """``name`` with each surrogate key replaced by the natural key it stands for."""
    from pyspark.sql import functions as F

    keys = read(spark, cfg, "key_map").select(
        "surrogate_key", F.concat_ws("/", "source_id", "natural_key").alias("_stands_for")
    )
    df = read(spark, cfg, name).drop(*BOOKKEEPING.get(name, ()))
    if "surrogate_key" in df.columns:
        df = df.join(keys, "surrogate_key", "left").drop("surrogate_key")
    return df.select(sorted(df.columns)).orderBy(*sorted(df.columns))


def assert_same_warehouse(spark, a, b, tables=tuple(BOOKKEEPING)) -> None:
    for name in tables:
        assert_df_equality(canonical(spark, a, name), canonical(spark, b, name), ignore_nullable=True)
