"""MESHJOIN beside the other three strategies on the same data; determinism; a restart mid-cycle.

One warehouse per layout is seeded once (native load of a first interval, so ``key_map`` is not
empty and MESHJOIN really cycles over k=3 disk segments); each test loads the second interval
into its own copy."""

import shutil
from datetime import datetime, timedelta, timezone

import pytest

from etl import jobs
from etl.config import EtlConfig
from etl.generator import StreamSpec, generate_stream
from etl.interval import Interval
from etl.load import Loader
from etl.segments import load_layout
from etl.tables import read
from tests.etl.strategies.equality import assert_same_warehouse
from tests.etl.strategies.test_partitioned import assert_equals_oracle
from warehouse.schemas import DETERMINISTIC_TABLES

T0 = datetime(2026, 11, 22, 3, 0, tzinfo=timezone.utc)
FIRST = Interval(T0, T0 + timedelta(minutes=2))
SECOND = Interval(T0 + timedelta(minutes=2), T0 + timedelta(minutes=4))
SETTINGS = dict(
    micro_batch_seconds=40, key_domain=300, n_part=8, k=3, d=1,  # d=1 byte: three disk segments
    memory_budget=3000, n_invoke=15, wait_buffer_tuples=60, tau=50,
)


@pytest.fixture(scope="module")
def seeded(spark, tmp_path_factory):
    """Per layout, a warehouse with FIRST loaded by ``native`` and SECOND ingested."""
    root = tmp_path_factory.mktemp("mesh-seed")
    landing = root / "landing"
    generate_stream(StreamSpec(start=T0, duration_s=240, rate=6, seed=44, key_domain=300, p=0.6, q=0.1, r=0.25, s=0.05), landing)
    out = {}
    for kind in ("range", "hash"):
        cfg = EtlConfig(
            warehouse_root=str(root / kind / "warehouse"), landing_root=str(landing), gx_root=str(root / kind / "gx"),
            runs_root=str(root / kind / "runs"), spark_master="local[2]", spark_shuffle_partitions=2, **SETTINGS,
        )
        load_layout(cfg, kind)
        one_batch = cfg.replace(micro_batch_seconds=120)  # the seed's own cut does not matter: keep it cheap
        jobs.ingest(spark, one_batch, FIRST)
        jobs.load(spark, one_batch, FIRST, strategy="native")
        jobs.ingest(spark, cfg, SECOND)
        out[kind] = cfg
    return out


def copy_of(seed: EtlConfig, tmp_path, name: str) -> EtlConfig:
    shutil.copytree(seed.warehouse_path, tmp_path / name / "warehouse")
    return seed.replace(warehouse_root=str(tmp_path / name / "warehouse"), runs_root=str(tmp_path / name / "runs"))


STRATEGIES = ("native", "meshjoin", "partitioned-range", "partitioned-hash")


@pytest.fixture(scope="module")
def loaded(spark, seeded, tmp_path_factory):
    """SECOND loaded by each strategy, side by side, from the same starting warehouse."""
    base = tmp_path_factory.mktemp("side-by-side")
    out = {}
    for strategy in STRATEGIES:
        cfg = copy_of(seeded["hash" if strategy == "partitioned-hash" else "range"], base, strategy)
        jobs.load(spark, cfg, SECOND, strategy=strategy)
        out[strategy] = cfg
    return out


def test_all_four_strategies_give_the_same_warehouse(spark, loaded):
    for strategy, cfg in loaded.items():
        assert_equals_oracle(spark, cfg)
        if strategy != "native":
            assert_same_warehouse(spark, loaded["native"], cfg)


def test_meshjoin_cycles_over_k_segments_and_drains_its_queue(spark, loaded):
    rows = (
        read(spark, loaded["meshjoin"], "join_metrics")
        .where(f"run_key = '{SECOND.run_key}'")
        .orderBy("batch_seq")
        .collect()
    )
    assert [r.segments_probed for r in rows][:3] == [1, 1, 1]  # one disk segment per slot
    assert [r.updates_in for r in rows][:2] == [0, 0]  # nothing is known to be new before a full cycle
    assert rows[-1].batch_index == -1 and rows[-1].queue_tuples == 0  # flush drains the queue
    assert max(r.queue_tuples for r in rows) > 0
    assert rows[-1].disk_cycle >= 1
    assert sum(r.updates_in for r in rows) == read(spark, loaded["meshjoin"], "ingested_updates").where(
        f"run_key = '{SECOND.run_key}'"
    ).count()


def test_meshjoin_twice_on_the_same_input_gives_identical_tables(spark, seeded, loaded, tmp_path):
    again = copy_of(seeded["range"], tmp_path, "again")
    jobs.load(spark, again, SECOND, strategy="meshjoin")
    for name in DETERMINISTIC_TABLES:
        a, b = read(spark, loaded["meshjoin"], name), read(spark, again, name)
        assert sorted(a.collect()) == sorted(b.collect()), name


def test_a_meshjoin_run_killed_mid_cycle_ends_with_the_same_tables(spark, seeded, loaded, tmp_path):
    cfg = copy_of(seeded["range"], tmp_path, "killed")
    loader = Loader(spark, cfg, "meshjoin")
    applied = {"n": 0}
    original = loader._apply

    def dying_apply(*args, **kwargs):
        applied["n"] += 1
        if applied["n"] == 2:  # the second release: one batch applied, the later ones still mid-cycle
            raise RuntimeError("killed in the middle of a cycle")
        return original(*args, **kwargs)

    loader._apply = dying_apply
    with pytest.raises(RuntimeError, match="killed"):
        loader.load(SECOND)
    jobs.load(spark, cfg, SECOND, strategy="meshjoin")  # recover, rebuild the queue, go on
    for name in DETERMINISTIC_TABLES:
        a, b = read(spark, loaded["meshjoin"], name), read(spark, cfg, name)
        assert sorted(a.collect()) == sorted(b.collect()), name


@pytest.mark.parametrize("lo, hi", [(-1, 0), (2, 3), (3, 7), (0, 12)])
def test_the_spark_twin_of_meets_agrees_with_the_schedule(spark, cfg, lo, hi):
    """Gaps between submits (quiet slots) are stepped by one read; the column expression must
    decide exactly what ``MeshSchedule.meets`` decides."""
    from etl.mesh_policy import MeshSchedule
    from etl.segments import load_layout
    from etl.strategies.meshjoin import MeshJoin

    mesh = MeshJoin(spark, cfg, load_layout(cfg))
    mesh.schedule = MeshSchedule(4)
    combos = [(q, p) for q in range(0, hi + 1) for p in range(4)]
    df = spark.createDataFrame(combos, "_q int, _p int").select("_q", "_p", mesh._meets(lo, hi).alias("m"))
    got = {(r["_q"], r["_p"]): r["m"] for r in df.collect()}
    assert got == {(q, p): mesh.schedule.meets(q, lo, hi, p) for q, p in combos}
