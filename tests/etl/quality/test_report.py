"""The data-quality report over a loaded warehouse: panes add up to the tables, plots are written."""

import csv
from datetime import timedelta
from decimal import Decimal

import pytest

from etl import jobs
from etl.core.interval import Interval
from etl.core.panes import Pane, delay_bucket, windows
from etl.generator import StreamSpec, generate_stream
from etl.io.tables import append, read
from etl.quality.report import build_report, pane_aggregates
from tests.helpers import T0
from warehouse.schemas import BATCH_LEDGER

RUN = Interval(T0, T0 + timedelta(minutes=3))
# The report reads the tables through the handle: their store is not its claim (the Delta warehouse
# is the end-to-end tests' and the report DAG's, tests/dags/test_airflow_standalone.py).
pytestmark = pytest.mark.memory_tables


def test_report_counts_every_update_once_and_draws_the_plot(spark, cfg):
    """The configured hour-long windows every 15 minutes over a 3-minute run inside one pane (as the
    demo's 5 minutes): the totals are the run's (they were all 0: only panes starting inside the
    interval were counted); a window a minute (four identical hour-long windows before), ISO
    bounds, no p99 above its window's maximum."""
    run = Interval(T0 + timedelta(minutes=5), T0 + timedelta(minutes=8))
    assert (cfg.report_window_seconds, cfg.report_slide_seconds) == (3600, 900) and int(T0.timestamp()) % 900 == 0
    generate_stream(StreamSpec(start=run.start, duration_s=180, rate=5, seed=2, malformed_share=0.05), cfg.landing_path)
    jobs.ingest(spark, cfg, run)
    jobs.load(spark, cfg, run)
    rep = build_report(spark, cfg, run)

    assert rep["suites_passed"] and (rep["window_seconds"], rep["slide_seconds"], rep["pane_seconds"]) == (60, 60, 60)
    outcomes = {r["outcome"]: r["count"] for r in read(spark, cfg, "outcome_log").groupBy("outcome").count().collect()}
    rejected = read(spark, cfg, "rejected_updates").count()
    totals = rep["interval_totals"]
    assert totals["rejected"] == rejected > 0
    assert totals["updates"] == sum(outcomes.values()) + rejected == jobs.report(cfg, run)["updates_in"]
    for k in ("matched", "new", "duplicate", "stale"):
        assert totals[k] == outcomes.get(k, 0)

    with open(rep["windows_csv"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 * len(rep["sources"])
    assert sorted({r["window_start"] for r in rows}) == ["2026-11-22T01:05:00Z", "2026-11-22T01:06:00Z", "2026-11-22T01:07:00Z"]
    assert sum(int(r["updates"]) for r in rows) == totals["updates"]
    assert all(r["complete"] == "True" for r in rows)
    for r in rows:
        if r["delay_avg_s"]:
            assert 0 < float(r["delay_avg_s"]) <= float(r["delay_max_s"])
            assert float(r["delay_max_s"]) / 2 ** (1 / 8) <= float(r["delay_p99_s"]) <= float(r["delay_max_s"])
    with open(rep["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_updates_that_arrived_after_their_commit_are_clock_skew_in_no_delay(spark, cfg):
    """A producer that stamped updates after their batch's commit (a replay, a clock ahead): each
    pane counts them as clock_skew and leaves them out of its delay sum, count, maximum and histogram."""
    cfg = cfg.replace(report_window_seconds=120, report_slide_seconds=60)

    def logged(update_id: str, arrived_s: int, outcome: str = "new") -> dict:
        at = T0 + timedelta(seconds=arrived_s)
        return dict(update_id=update_id, source_id="crm", natural_key=update_id, op="upsert", name="A", email="a@x",
                    city="Oslo", balance=Decimal("1.00"), source_seq=1, event_ts=at, arrival_ts=at, row_hash="h",
                    outcome=outcome, reason=None, surrogate_key=1, stored_source_seq=None, applies=True, is_last_applied=True)

    def batch(seq: int, committed_s: int, outcomes: list[dict]) -> tuple:
        row = dict(run_key=RUN.run_key, batch_index=seq, batch_seq=seq, strategy="native", updates_in=len(outcomes),
                   keys_allocated=0, next_surrogate_key=1, committed_at=T0 + timedelta(seconds=committed_s), outcomes=outcomes)
        return tuple(row.get(f.name) for f in BATCH_LEDGER)

    rows = [batch(1, 30, [logged("u1", 10), logged("u2", 100), logged("u3", 150)]),  # u2, u3: after the commit
            batch(2, 180, [logged("u4", 70, "matched")])]
    append(spark.createDataFrame(rows, BATCH_LEDGER), cfg, "batch_ledger")

    t0 = int(T0.timestamp())
    counts = {"updates": 0, "matched": 0, "new": 0, "duplicate": 0, "stale": 0}
    assert pane_aggregates(spark, cfg, RUN)[0] == {
        ("crm", t0): Pane(counts={**counts, "updates": 1, "new": 1}, delay_sum_s=20.0, delay_n=1, delay_max_s=20.0,
                          histogram={delay_bucket(20.0): 1}),
        ("crm", t0 + 60): Pane(counts={**counts, "updates": 2, "new": 1, "matched": 1}, delay_sum_s=110.0, delay_n=1,
                               delay_max_s=110.0, histogram={delay_bucket(110.0): 1}, clock_skew=1),
        ("crm", t0 + 120): Pane(counts={**counts, "updates": 1, "new": 1}, clock_skew=1),
    }
