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
