"""MESHJOIN on the seeded warehouses of conftest.py: it cycles over k disk segments, is
deterministic, and a restart mid-cycle ends with the same tables."""


import pytest

from etl import jobs
from etl.io.layout_store import load_layout
from etl.io.tables import read
from etl.load.loader import Loader
from tests.helpers import SEEDED_SECOND as SECOND
from tests.helpers import copy_of, deterministic_tables, die_after


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
    assert deterministic_tables(spark, again) == deterministic_tables(spark, loaded["meshjoin"])


def test_a_meshjoin_run_killed_mid_cycle_ends_with_the_same_tables(spark, seeded, loaded, tmp_path):
    cfg = copy_of(seeded["range"], tmp_path, "killed")
    loader = Loader(spark, cfg, "meshjoin")
    # The second release: one batch applied, the later ones still mid-cycle.
    die_after(loader, 1, "killed in the middle of a cycle")
    with pytest.raises(RuntimeError, match="killed"):
        loader.load(SECOND)
    jobs.load(spark, cfg, SECOND, strategy="meshjoin")  # recover, rebuild the queue, go on
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, loaded["meshjoin"])


@pytest.mark.parametrize("lo, hi", [(-1, 0), (2, 3), (3, 7), (0, 12)])
def test_the_spark_twin_of_meets_agrees_with_the_schedule(spark, cfg, lo, hi):
    """Gaps between submits (quiet slots) are stepped by one read; the column expression must
    decide exactly what ``MeshSchedule.meets`` decides."""
    from etl.core.mesh_policy import MeshSchedule
    from etl.strategies.meshjoin import MeshJoin

    mesh = MeshJoin(spark, cfg, load_layout(cfg))
    mesh.schedule = MeshSchedule(4)
    combos = [(q, p) for q in range(0, hi + 1) for p in range(4)]
    df = spark.createDataFrame(combos, "_q int, _p int").select("_q", "_p", mesh._meets(lo, hi).alias("m"))
    got = {(r["_q"], r["_p"]): r["m"] for r in df.collect()}
    assert got == {(q, p): mesh.schedule.meets(q, lo, hi, p) for q, p in combos}
