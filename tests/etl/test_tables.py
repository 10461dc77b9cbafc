from etl.tables import ensure_tables, read
from warehouse.schemas import TABLES


def test_tables_are_created_once_with_their_schema_and_partitioning(spark, cfg):
    assert set(ensure_tables(spark, cfg)) == set(TABLES)
    assert ensure_tables(spark, cfg) == []  # idempotent
    for name, table in TABLES.items():
        assert [f.name for f in read(spark, cfg, name).schema.fields] == table.schema.fieldNames()
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{cfg.table_path('key_map')}`").first()
    assert detail.partitionColumns == ["segment_id"]
