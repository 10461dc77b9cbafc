from etl.tables import ensure_tables, read
from warehouse.schemas import TABLES


def test_tables_are_created_once_with_their_schema_and_partitioning(spark, cfg):
    assert set(ensure_tables(spark, cfg)) == set(TABLES)
    assert ensure_tables(spark, cfg) == []  # idempotent
    for name, table in TABLES.items():
        assert [f.name for f in read(spark, cfg, name).schema.fields] == table.schema.fieldNames()
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{cfg.table_path('key_map')}`").first()
    assert detail.partitionColumns == ["segment_id"]


def test_a_table_from_an_older_version_gains_the_new_columns(spark, cfg):
    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    old = StructType([f for f in TABLES["join_metrics"].schema.fields if f.name not in ("queue_tuples", "disk_cycle")])
    DeltaTable.createIfNotExists(spark).location(cfg.table_path("join_metrics")).addColumns(old).execute()
    ensure_tables(spark, cfg)
    assert read(spark, cfg, "join_metrics").schema.fieldNames() == TABLES["join_metrics"].schema.fieldNames()


def test_a_retried_append_is_skipped_by_its_transaction_version(spark, cfg):
    """What makes a task retry safe: the same (txnAppId, txnVersion) commits once."""
    from datetime import datetime, timezone

    from etl.tables import append_once

    ensure_tables(spark, cfg)
    at = datetime(2026, 11, 22, tzinfo=timezone.utc)
    row = lambda i: ("run-a", i, 10 + i, "native", 5, 1, 100 + i, at)  # noqa: E731
    batch = lambda i: spark.createDataFrame([row(i)], TABLES["batch_ledger"].schema)  # noqa: E731
    append_once(batch(0), cfg, "batch_ledger", txn_version=1, app_id="run-a")
    append_once(batch(0), cfg, "batch_ledger", txn_version=1, app_id="run-a")  # the retry
    append_once(batch(1), cfg, "batch_ledger", txn_version=2, app_id="run-a")
    got = sorted(tuple(r) for r in read(spark, cfg, "batch_ledger").drop("committed_at").collect())
    assert got == [row(0)[:-1], row(1)[:-1]]
