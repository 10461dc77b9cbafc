"""Reading fresh rows (etl.fresh) on Delta, where a DataFrame, and so a view, reads the tables
again at each query: the logged tail merged over the entity table and key_map equals them once
the tail is applied, and a view registered before the apply still reads exactly them after it
(docs/reading-fresh-rows.md). The hardest entity shape is read fresh in tests/etl/test_entities.py."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

from chispa import assert_df_equality

from etl import jobs
from etl.core.interval import Interval
from etl.fresh import applied_through, fresh, register_fresh_views
from etl.io.tables import read
from etl.load.protocol import CommitProtocol
from tests.helpers import T0, good, land

FIRST, SECOND = Interval(T0, T0 + timedelta(minutes=1)), Interval(T0 + timedelta(minutes=1), T0 + timedelta(minutes=2))


def stamped(second: int) -> dict:
    return {"event_ts": f"2026-11-22T01:01:{second:02d}Z", "arrival_ts": f"2026-11-22T01:01:{second:02d}Z"}


def test_a_view_registered_before_the_apply_reads_the_applied_tables_after_it(spark, cfg):
    cfg = cfg.replace(micro_batch_seconds=20, apply_interval_seconds=3600)
    land(cfg, [good("1", seq=1), good("2", seq=1), good("5", seq=1)])  # 5: a row no later batch touches
    # The second run: a known key changed, a key changed twice over two batches, new keys, a
    # delete, a duplicate (three 20-s batches, logged and not applied).
    land(cfg, [good("1", seq=2, attributes={"name": "B"}, **stamped(5)), good("3", seq=1, **stamped(6)),
               good("3", seq=2, attributes={"name": "C"}, **stamped(25)), good("2", seq=2, op="delete", **stamped(26)),
               good("4", seq=1, **stamped(45)), good("4", seq=1, **stamped(46))], minute=SECOND.start)
    for run in (FIRST, SECOND):
        jobs.ingest(spark, cfg, run)
    jobs.load(spark, cfg, FIRST)
    applied = applied_through(spark, cfg)
    with mock.patch.object(CommitProtocol, "apply_tail", lambda self: None):  # as a kill after the last write-ahead commit
        assert jobs.load(spark, cfg, SECOND)["batches_committed"] == 3
    assert applied_through(spark, cfg) == applied
    names = {"customer_current": "customer_current_fresh", "key_map": "customer_key_map_fresh"}
    assert register_fresh_views(spark, cfg) == {v: t for t, v in names.items()}
    before = {t: (fresh(spark, cfg, t).collect(), spark.sql(f"SELECT * FROM {v}").collect()) for t, v in names.items()}
    current = {r.natural_key: (r.name, r.is_deleted) for r in before["customer_current"][0]}
    assert current == {"1": ("B", False), "2": ("A", True), "3": ("C", False), "4": ("A", False), "5": ("A", False)}

    assert jobs.load(spark, cfg, SECOND)["batches_recovered"] == 3  # the next load applies the tail from the log
    for table, view in names.items():
        stored = read(spark, cfg, table)
        function, registered = before[table]
        assert_df_equality(spark.createDataFrame(function, stored.schema), stored, ignore_row_order=True, ignore_nullable=True)
        assert sorted(registered, key=repr) == sorted(function, key=repr), table
        # registered before the apply, read after it: the same rows, no key twice
        assert_df_equality(spark.sql(f"SELECT * FROM {view}"), stored, ignore_row_order=True, ignore_nullable=True)
