import pytest

from etl.io.tables import ensure_tables, read
from warehouse.schemas import TABLES, VIEWS

pytestmark = pytest.mark.no_tables  # these tests create the tables themselves


def test_tables_are_created_once_with_their_schema_and_partitioning(spark, cfg):
    assert set(ensure_tables(spark, cfg)) == set(TABLES)
    assert ensure_tables(spark, cfg) == []  # idempotent
    for name, table in TABLES.items():
        assert [f.name for f in read(spark, cfg, name).schema.fields] == table.schema.fieldNames()
    for name, view in VIEWS.items():
        assert name not in TABLES and not (cfg.warehouse_path / name).exists()
        assert read(spark, cfg, name).schema.fieldNames() == view.schema.fieldNames()
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{cfg.table_path('key_map')}`").first()
    assert detail.partitionColumns == ["segment_id"]


def test_a_checked_warehouse_is_not_read_again_but_a_table_removed_since_is_made_again(spark, cfg, monkeypatch):
    """``ensure`` on a warehouse it has checked skips reading every table's schema (a marker in the
    warehouse, named by the schemas); a table whose directory went since, or a marker of other
    schemas (another version's, or a warehouse restored from an older copy), is not taken on trust."""
    import shutil

    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    from etl.io.delta_tables import DeltaTables

    assert set(ensure_tables(spark, cfg)) == set(TABLES)
    markers = list(cfg.warehouse_path.glob(".tables-checked-*"))
    assert len(markers) == 1
    with monkeypatch.context() as m:  # checked: no table is looked at again
        m.setattr(DeltaTables, "_create", lambda self, table: pytest.fail(f"{table.name} checked again"))
        assert ensure_tables(spark, cfg) == []
    shutil.rmtree(cfg.warehouse_path / "key_map")
    assert ensure_tables(spark, cfg) == ["key_map"]
    assert read(spark, cfg, "key_map").schema.fieldNames() == TABLES["key_map"].schema.fieldNames()
    # Another version's marker, and a ledger made before it carried the measurements: checked again.
    markers[0].rename(cfg.warehouse_path / ".tables-checked-0000000000000000")
    shutil.rmtree(cfg.warehouse_path / "batch_ledger")
    ledger = TABLES["batch_ledger"].schema
    DeltaTable.createIfNotExists(spark).location(cfg.table_path("batch_ledger")).addColumns(StructType(ledger.fields[:8])).execute()
    assert ensure_tables(spark, cfg) == []
    assert read(spark, cfg, "batch_ledger").schema.fieldNames() == ledger.fieldNames()


def ledger_row(i: int, **metrics) -> dict:
    from datetime import datetime, timezone

    return dict(run_key="run-a", batch_index=i, batch_seq=10 + i, strategy="native", updates_in=5, keys_allocated=1,
                next_surrogate_key=100 + i, committed_at=datetime(2026, 11, 22, 0, i, tzinfo=timezone.utc), **metrics)


def test_an_older_warehouse_gains_the_new_columns_and_keeps_its_metrics(spark, cfg):
    """A warehouse made before the ledger carried the measurements: its batch_ledger gains the
    (nullable) columns, and ``join_metrics`` reads the rows of its old table beside the new ones."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import StringType, StructField, StructType

    from etl.io.tables import append, row_frame

    ledger = TABLES["batch_ledger"].schema
    old_ledger = StructType(ledger.fields[:8])
    DeltaTable.createIfNotExists(spark).location(cfg.table_path("batch_ledger")).addColumns(old_ledger).execute()
    old = spark.createDataFrame([tuple(ledger_row(0)[f.name] for f in old_ledger.fields)], old_ledger)
    old.write.format("delta").mode("append").save(cfg.table_path("batch_ledger"))
    gone_since = StructField("dropped_since", StringType())  # a column the view no longer has
    # and one the view has gained since (the old table never had it: null there)
    legacy_schema = StructType([*(f for f in VIEWS["join_metrics"].schema.fields if f.name != "clock_skew"), gone_since])
    legacy_row = {**ledger_row(0), "matched": 4, "new": 1, "duplicate": 0, "stale": 0}
    legacy_metrics = spark.createDataFrame([tuple(legacy_row.get(f.name) for f in legacy_schema)], legacy_schema)
    legacy_metrics.write.format("delta").save(cfg.table_path("join_metrics"))

    ensure_tables(spark, cfg)
    assert read(spark, cfg, "batch_ledger").schema.fieldNames() == ledger.fieldNames()
    new = ledger_row(1, matched=3, new=1, duplicate=1, stale=0, keymap_bytes_read=7, clock_skew=2)
    append(row_frame(spark, "batch_ledger", new), cfg, "batch_ledger")
    got = {r.batch_seq: (r.matched, r.keymap_bytes_read, r.clock_skew) for r in read(spark, cfg, "join_metrics").collect()}
    assert got == {10: (4, None, None), 11: (3, 7, 2)}  # the old step's metrics from the old table, once


def test_an_older_warehouse_s_outcome_log_table_is_read_beside_the_ledger_s_outcomes(spark, cfg):
    """Outcomes logged by a version with an ``outcome_log`` table stay there; the view reads them
    beside the ones stored in ledger rows since, each once."""
    from delta.tables import DeltaTable

    from etl.io.tables import append, row_frame
    from warehouse.schemas import OUTCOME_LOG

    def outcome(update_id, seq):
        from datetime import datetime, timezone
        from decimal import Decimal

        ts = datetime(2026, 11, 22, 0, 0, tzinfo=timezone.utc)
        return dict(run_key="run-a", batch_seq=seq, batch_index=seq - 10, update_id=update_id, source_id="crm",
                    natural_key=update_id, op="upsert", name="A", email="a@x", city="Oslo", balance=Decimal("1.00"),
                    source_seq=1, event_ts=ts, arrival_ts=ts, row_hash="h", outcome="new", reason=None,
                    surrogate_key=seq, stored_source_seq=None, applies=True, is_last_applied=True)

    ensure_tables(spark, cfg)
    older = cfg.table_path("outcome_log")
    DeltaTable.createIfNotExists(spark).location(older).addColumns(OUTCOME_LOG).execute()
    spark.createDataFrame([tuple(outcome("f:1", 10)[f.name] for f in OUTCOME_LOG)], OUTCOME_LOG) \
        .write.format("delta").mode("append").save(older)
    append(row_frame(spark, "batch_ledger", ledger_row(0)), cfg, "batch_ledger")  # written after its apply, no outcomes
    logged = {k: v for k, v in outcome("f:2", 11).items() if k not in ("run_key", "batch_seq", "batch_index")}
    ledger = TABLES["batch_ledger"].schema
    new = spark.createDataFrame([tuple({**ledger_row(1), "outcomes": [logged]}.get(f.name) for f in ledger)], ledger)
    append(new, cfg, "batch_ledger")

    got = sorted((r.update_id, r.batch_seq, r.batch_index) for r in read(spark, cfg, "outcome_log").collect())
    assert got == [("f:1", 10, 0), ("f:2", 11, 1)]
    assert read(spark, cfg, "applied_changes").count() == 2


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


def test_a_row_with_a_column_its_table_lacks_is_refused():
    """``row_frame`` fills missing columns with null, so a misspelt one must not pass as missing."""
    from etl.io.tables import row_frame

    with pytest.raises(ValueError, match="table batch_ledger has no column matchd"):
        row_frame(None, "batch_ledger", {"run_key": "r", "matchd": 3})


def test_a_literal_row_aggregated_over_a_frame_equals_the_row_frame_beside_its_aggregate(spark):
    """``literal_row`` (the ledger row as one aggregate): the same row as ``row_frame`` plus the
    aggregated column, with the table's types; as strict about unknown columns."""
    from chispa import assert_df_equality
    from pyspark.sql import functions as F

    from etl.io.tables import conform, literal_row, row_frame

    values = ledger_row(3, matched=2, delay_avg_s=1.5)
    numbers = spark.range(5)
    aggregated = numbers.agg(*literal_row("batch_ledger", values, updates_in=F.count(F.lit(1))))
    expected = row_frame(spark, "batch_ledger", {**values, "updates_in": 5})
    assert_df_equality(conform(aggregated, "batch_ledger"), expected, ignore_nullable=True)
    with pytest.raises(ValueError, match="table batch_ledger has no column matchd"):
        literal_row("batch_ledger", {"matchd": 3})


def test_auto_deletion_vectors_are_switched_on_per_table_from_its_size_and_never_without_the_feature(spark, cfg, tmp_path):
    """``auto`` creates the MERGE targets with the feature but unused; ``settle_deletion_vectors``
    switches on a table that holds ``deletion_vectors_from_bytes``, one way; a table created
    ``off`` (without the feature: switching would upgrade its protocol) is never switched."""
    from delta.tables import DeltaTable

    from etl.io.tables import DELETION_VECTORS, settle_deletion_vectors

    def state(c, name):
        d = DeltaTable.forPath(spark, c.table_path(name)).detail().first()
        return d.properties.get(DELETION_VECTORS), "deletionVectors" in d.tableFeatures

    ensure_tables(spark, cfg)  # auto, the default
    assert {state(cfg, n) for n in ("key_map", "customer_current")} == {("false", True)}
    assert settle_deletion_vectors(spark, cfg) == []  # empty tables: below any size
    spark.range(3).selectExpr("id AS surrogate_key", "'crm' AS source_id", "CAST(id AS STRING) AS natural_key",
                              "false AS is_deleted", "'h' AS row_hash", "1L AS last_source_seq",
                              "current_timestamp() AS event_ts", "current_timestamp() AS arrival_ts",
                              "1L AS updated_batch_seq").write.format("delta").mode("append").save(cfg.table_path("customer_current"))
    assert settle_deletion_vectors(spark, cfg.replace(deletion_vectors_from_bytes=1 << 30)) == []
    assert settle_deletion_vectors(spark, cfg.replace(deletion_vectors_from_bytes=1)) == ["customer_current"]
    assert state(cfg, "customer_current") == ("true", True) and state(cfg, "key_map") == ("false", True)
    assert settle_deletion_vectors(spark, cfg.replace(deletion_vectors_from_bytes=1)) == []  # once

    off = cfg.replace(warehouse_root=str(tmp_path / "off"), deletion_vectors="off")
    ensure_tables(spark, off)
    spark.read.format("delta").load(cfg.table_path("customer_current")).write.format("delta").mode("append") \
        .save(off.table_path("customer_current"))
    assert settle_deletion_vectors(spark, off.replace(deletion_vectors="auto", deletion_vectors_from_bytes=1)) == []
    assert state(off, "customer_current") == (None, False)
