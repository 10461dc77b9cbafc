"""Maintenance on a real warehouse: rebalancing changes no mapping, only segment ids; loads go on
exactly after it; OPTIMIZE/VACUUM run under the load lock; an interrupted rebalance is settled."""

from datetime import timedelta

import pytest
from delta.tables import DeltaTable

from etl import jobs
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.layout import SlotArray
from etl.generator import StreamSpec, generate_stream
from etl.io.layout_store import LAYOUT_FILE, load_layout, settle_pending_layout
from etl.io.lock import LoadLock, WarehouseLocked
from etl.io.tables import read
from etl.maintenance import maintain
from etl.transforms.layout import segment_column
from tests.helpers import T0, assert_equals_oracle, copy_of, deterministic_tables

FIRST = Interval(T0, T0 + timedelta(minutes=2))
SECOND = Interval(T0 + timedelta(minutes=2), T0 + timedelta(minutes=3))


@pytest.fixture(scope="module")
def skewed_seed(spark, tmp_path_factory):
    """key_map with keys packed into two of eight segments (theta=20: far above 2*theta) and
    six nearly empty ones; loaded once per module, each test works on its own copy. The split at
    a run's end is off: these tests are the maintenance step's (the service between runs is
    tests/etl/strategies/test_partitioned.py's)."""
    root = tmp_path_factory.mktemp("skewed")
    cfg = EtlConfig(
        warehouse_root=str(root / "warehouse"), landing_root=str(root / "landing"), gx_root=str(root / "gx"),
        runs_root=str(root / "runs"), reports_root=str(root / "reports"), spark_master="local[2]",
        spark_shuffle_partitions=2, key_domain=2000, n_part=8, theta=20, micro_batch_seconds=120,
        join_strategy="partitioned-range", memory_budget=4000, split_segments_per_run=0,
    )
    generate_stream(StreamSpec(start=T0, duration_s=180, rate=4, seed=9, key_domain=400, new_key_share=0.05), cfg.landing_path)
    jobs.ingest(spark, cfg, FIRST)
    jobs.load(spark, cfg, FIRST)
    return cfg


@pytest.fixture
def skewed(skewed_seed, tmp_path):
    return copy_of(skewed_seed, tmp_path, "skewed")


def test_rebalance_changes_segment_ids_only_and_loads_stay_exact(spark, skewed):
    cfg = skewed
    before = {(r.source_id, r.natural_key): r.asDict() for r in read(spark, cfg, "key_map").collect()}
    result = maintain(spark, cfg, ["rebalance"])["steps"][0]
    assert result["split"] and result["rows_moved"] > 0
    layout = load_layout(cfg)
    assert isinstance(layout, SlotArray)
    from pyspark.sql import functions as F

    after = read(spark, cfg, "key_map").withColumn("expected", segment_column(layout)(F.col("source_id"), F.col("natural_key")))
    rows = {(r.source_id, r.natural_key): r.asDict() for r in after.collect()}
    assert set(rows) == set(before)
    for key, row in rows.items():
        assert row["segment_id"] == row.pop("expected")  # every row where the new layout says
        old = dict(before[key])
        old.pop("segment_id"), row.pop("segment_id")
        assert row == old  # and nothing else changed: surrogate key, hash, sequence numbers
    sizes = [r["count"] for r in read(spark, cfg, "key_map").groupBy("segment_id").count().collect()]
    assert max(sizes) <= 2 * cfg.theta  # every key range here is splittable (slots down to one key)

    # The next run, through the partitioned join on the new segments, is still exact.
    jobs.ingest(spark, cfg, SECOND)
    jobs.load(spark, cfg, SECOND)
    assert_equals_oracle(spark, cfg)


def test_optimize_and_vacuum_keep_every_row_and_respect_the_lock(spark, skewed):
    """Every row of every deterministic table is the same after both steps, and VACUUM keeps the
    files of its retention window: the version before OPTIMIZE still reads (time travel)."""
    cfg = skewed
    before = deterministic_tables(spark, cfg)
    path = cfg.table_path("key_map")
    version = DeltaTable.forPath(spark, path).history(1).first()["version"]
    out = maintain(spark, cfg, ["optimize", "vacuum"])
    assert [s["step"] for s in out["steps"]] == ["optimize", "vacuum"]
    assert deterministic_tables(spark, cfg) == before
    old = spark.read.format("delta").option("versionAsOf", version).load(path)
    assert sorted(old.collect()) == before["key_map"]
    with LoadLock(cfg.meta_path, "a load"):
        with pytest.raises(WarehouseLocked):
            maintain(spark, cfg, ["optimize"])


def test_an_interrupted_rebalance_is_settled_by_what_the_table_follows(spark, skewed):
    cfg = skewed
    current = load_layout(cfg)
    pending = cfg.meta_path / (LAYOUT_FILE + ".next")
    # The table was not rewritten (crash before the commit): the pending layout is dropped.
    pending.write_text(SlotArray(current.key_domain, tuple(range(current.n_slots)), current.slot_length).to_json()
                       if len(set(current.slots)) != current.n_slots else SlotArray(current.key_domain, (0,) * current.n_slots, current.slot_length).to_json())
    assert settle_pending_layout(spark, cfg) == "discarded" and load_layout(cfg) == current
    # The table follows it (crash after the commit): it is promoted.
    pending.write_text(current.refined().to_json())
    assert settle_pending_layout(spark, cfg) == "promoted" and load_layout(cfg) == current.refined()


def test_relayout_switches_key_map_between_range_and_hash_and_loads_stay_exact(spark, skewed):
    from pyspark.sql import functions as F

    from etl.core.config import ConfigError
    from etl.core.layout import HashLayout
    from etl.load.loader import Loader

    cfg = skewed.replace(join_strategy="partitioned-hash")
    with pytest.raises(ConfigError, match="relayout --join-strategy partitioned-hash"):
        Loader(spark, cfg).load(SECOND)  # a range-laid warehouse is refused, with the fix in the message
    before = {(r.source_id, r.natural_key): r.asDict() for r in read(spark, cfg, "key_map").collect()}

    result = maintain(spark, cfg, ["relayout"])["steps"][0]
    assert (result["from"], result["to"], result["rows"]) == ("range", "hash", len(before))
    layout = load_layout(cfg)
    assert isinstance(layout, HashLayout) and layout.n_part == cfg.n_part
    after = read(spark, cfg, "key_map").withColumn("expected", segment_column(layout)(F.col("source_id"), F.col("natural_key")))
    rows = {(r.source_id, r.natural_key): r.asDict() for r in after.collect()}
    assert set(rows) == set(before)
    for key, row in rows.items():
        assert row.pop("segment_id") == row.pop("expected")
        old = dict(before[key])
        old.pop("segment_id")
        assert row == old
    assert maintain(spark, cfg, ["relayout"])["steps"][0]["skipped"].startswith("key_map is already")

    jobs.ingest(spark, cfg, SECOND)
    jobs.load(spark, cfg, SECOND)  # partitioned-hash on the new layout
    assert_equals_oracle(spark, cfg)

    back = maintain(spark, cfg.replace(join_strategy="partitioned-range"), ["relayout"])["steps"][0]
    assert (back["from"], back["to"]) == ("hash", "range") and "rebalance" in back
    assert isinstance(load_layout(cfg), SlotArray)
    assert read(spark, cfg, "key_map").count() == read(spark, cfg, "key_map").select("source_id", "natural_key").distinct().count()


def test_a_load_started_during_maintenance_leaves_its_staged_layout_alone(spark, skewed):
    """Maintenance holds the lock and has staged the layout it is rewriting key_map for; a load
    started meanwhile used to settle that staged layout before asking for the lock (deleting it,
    so the table would follow a layout no file described and keys would be remapped)."""
    from etl.io.layout_store import PENDING, write_layout
    from etl.load.loader import Loader

    cfg = skewed
    current = load_layout(cfg)
    staged = SlotArray(current.key_domain, tuple(reversed(current.slots)), current.slot_length)
    jobs.ingest(spark, cfg, SECOND)
    with LoadLock(cfg.meta_path, "maintenance (rebalance)"):
        path = write_layout(cfg, staged, PENDING)  # the table does not follow it yet
        with pytest.raises(WarehouseLocked, match="maintenance"):
            Loader(spark, cfg).load(SECOND)
        with pytest.raises(WarehouseLocked, match="maintenance"):
            jobs.load(spark, cfg, SECOND)
        assert path.read_text() == staged.to_json()  # untouched while maintenance holds the lock
        path.unlink()  # maintenance, here, gives up its rewrite
    jobs.load(spark, cfg, SECOND)
    assert load_layout(cfg) == current
    assert_equals_oracle(spark, cfg)
