"""The load's Delta operations on a few rows each, compared as whole frames: both MERGEs change a
row only for a newer batch (so recovery may apply a batch twice), and the key_map MERGE reads
only the segments the batch touches."""

from datetime import datetime
from decimal import Decimal

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from etl.io.tables import ensure_tables, read
from etl.load.apply import key_map_merge_condition, merge_current, merge_key_map, summarise_outcomes
from warehouse.schemas import CUSTOMER_CURRENT, KEY_MAP

T1, T2, T3 = (datetime(2026, 11, 22, 1, 0, s) for s in (1, 2, 3))
CHANGES = ("source_id string, natural_key string, surrogate_key long, applied_row_hash string, max_source_seq long, "
           "last_arrival_ts timestamp, new_arrival_ts timestamp, batch_seq long, is_new boolean, segment_id int")


def key_map(spark, cfg):
    return DeltaTable.forPath(spark, cfg.table_path("key_map"))


def test_merge_key_map_advances_known_keys_inserts_new_ones_and_ignores_a_replay(spark, cfg):
    ensure_tables(spark, cfg)
    before = [("crm", "1", 1, "h1", 5, T1, T1, 1, 1, 0)]
    spark.createDataFrame(before, KEY_MAP).write.format("delta").mode("append").save(cfg.table_path("key_map"))
    changes = spark.createDataFrame([
        ("crm", "1", 1, "h2", 7, T2, None, 2, False, 0),  # a known key changed
        ("crm", "2", 2, "h3", 1, T2, T2, 2, True, 1),  # a new key
        ("crm", "3", 3, None, 4, T2, None, 2, False, 1),  # not new and not stored: nothing to insert
    ], CHANGES)
    merge_key_map(key_map(spark, cfg), changes)
    want = spark.createDataFrame([
        ("crm", "1", 1, "h2", 7, T1, T2, 1, 2, 0),
        ("crm", "2", 2, "h3", 1, T2, T2, 2, 2, 1),
    ], KEY_MAP)
    assert_df_equality(read(spark, cfg, "key_map"), want, ignore_row_order=True, ignore_nullable=True)

    merge_key_map(key_map(spark, cfg), changes)  # recovery applies the same batch again
    older = spark.createDataFrame([("crm", "1", 1, "h0", 9, T3, None, 1, False, 0)], CHANGES)
    merge_key_map(key_map(spark, cfg), older)  # and an older batch never overwrites a newer one
    assert_df_equality(read(spark, cfg, "key_map"), want, ignore_row_order=True, ignore_nullable=True)


def test_merge_current_keeps_the_newest_state_of_each_key(spark, cfg):
    ensure_tables(spark, cfg)
    table = DeltaTable.forPath(spark, cfg.table_path("customer_current"))

    def row(key, name, batch_seq, deleted=False):
        return (key, "crm", str(key), name, f"{name}@x", "Oslo", Decimal("1.00"), deleted, f"h-{name}", batch_seq, T1, T2, batch_seq)

    state = spark.createDataFrame([row(1, "a", 1), row(2, "b", 1)], CUSTOMER_CURRENT)
    merge_current(table, state)
    merge_current(table, spark.createDataFrame([row(1, "a2", 3, deleted=True), row(2, "stale", 0)], CUSTOMER_CURRENT))
    merge_current(table, spark.createDataFrame([row(1, "a2", 3, deleted=True)], CUSTOMER_CURRENT))  # a replay
    want = spark.createDataFrame([row(1, "a2", 3, deleted=True), row(2, "b", 1)], CUSTOMER_CURRENT)
    assert_df_equality(read(spark, cfg, "customer_current"), want, ignore_row_order=True, ignore_nullable=True)


def test_a_batch_summary_counts_outcomes_and_knows_its_first_new_key(spark):
    rows = [("u1", "new", 7, T1), ("u2", "new", 8, T2), ("u3", "matched", 3, T2), ("u4", "duplicate", 3, T3)]
    outcomes = spark.createDataFrame(rows, "update_id string, outcome string, surrogate_key long, arrival_ts timestamp")
    summary = summarise_outcomes(outcomes)
    assert summary["n"] == 4 and summary["min_new_key"] == 7
    assert summary["counts"] == {"matched": 1, "new": 2, "duplicate": 1, "stale": 0}
    assert summary["avg_arrival_s"] == pytest.approx(sum(t.timestamp() for _, _, _, t in rows) / 4)


def test_the_key_map_merge_reads_only_the_segments_the_batch_touches(spark, tmp_path):
    """A file of a segment the batch does not touch is removed from disk: the MERGE with the
    loader's condition never opens it (so key_map is not scanned whole every batch), while the
    MERGE on the keys alone does and fails."""
    path = str(tmp_path / "km")
    rows = [(s, f"k{s}-{i}", s * 10 + i, s) for s in range(3) for i in range(3)]
    spark.createDataFrame(rows, "source_id int, natural_key string, surrogate_key long, segment_id int") \
        .write.format("delta").partitionBy("segment_id").save(path)
    victim = next((tmp_path / "km" / "segment_id=2").glob("*.parquet"))
    victim.unlink()
    changes = spark.createDataFrame([(0, "k0-1", 99, 0), (0, "new", 100, 0)],
                                    "source_id int, natural_key string, surrogate_key long, segment_id int")

    def merge(condition):
        (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("s"), condition)
         .whenMatchedUpdate(set={"surrogate_key": "s.surrogate_key"}).whenNotMatchedInsertAll().execute())

    assert key_map_merge_condition(changes).startswith("t.segment_id IN (0) AND ")
    merge(key_map_merge_condition(changes))
    seg0 = spark.read.format("delta").load(path).where(F.col("segment_id") == 0)
    assert sorted((r.natural_key, r.surrogate_key) for r in seg0.collect()) == [
        ("k0-0", 0), ("k0-1", 99), ("k0-2", 2), ("new", 100)
    ]
    with pytest.raises(Exception, match="(?i)not exist|FileNotFound|FAILED_READ_FILE"):
        merge("t.source_id = s.source_id AND t.natural_key = s.natural_key")


