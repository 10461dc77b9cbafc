import pytest

from etl.io.tables import ensure_tables, read
from warehouse.schemas import TABLES

pytestmark = pytest.mark.no_tables  # these tests create the tables themselves


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


def test_a_recovered_append_is_skipped_when_its_batch_is_already_there(spark, cfg):
    """What makes recovery safe without a Delta transaction marker on every append: a retried
    batch's append finds its batch_seq's rows and adds nothing; another batch is appended."""
    from datetime import datetime, timezone

    from etl.io.tables import append, append_batch

    ensure_tables(spark, cfg)
    at = datetime(2026, 11, 22, tzinfo=timezone.utc)
    row = lambda i: ("run-a", i, 10 + i, "native", 5, 1, 100 + i, at)  # noqa: E731
    batch = lambda i: spark.createDataFrame([row(i)], TABLES["batch_ledger"].schema)  # noqa: E731
    append(batch(0), cfg, "batch_ledger")
    assert append_batch(spark, batch(0), cfg, "batch_ledger", batch_seq=10, recovering=True) is False  # the retry
    assert append_batch(spark, batch(1), cfg, "batch_ledger", batch_seq=11, recovering=True) is True
    got = sorted(tuple(r) for r in read(spark, cfg, "batch_ledger").drop("committed_at").collect())
    assert got == [row(0)[:-1], row(1)[:-1]]


def test_two_first_runs_creating_the_tables_at_once_both_succeed(spark, tmp_path):
    """Two first runs at once used to race on creating the tables (the loser failed with exit 1
    and a Delta trace, or left a half-made table); creation is serialised."""
    import threading

    from etl.core.config import EtlConfig
    from etl.io.tables import ensure_tables
    from warehouse.schemas import TABLES

    for attempt in range(3):
        cfg = EtlConfig(warehouse_root=str(tmp_path / f"w{attempt}"))
        errors, created = [], []

        def first_run():
            try:
                created.append(ensure_tables(spark, cfg))
            except Exception as exc:  # noqa: BLE001 - any failure is the defect
                errors.append(exc)

        threads = [threading.Thread(target=first_run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(created[0] + created[1]) == sorted(TABLES)  # each table made once, by one of them
