"""The data-quality report over a loaded warehouse: panes add up to the tables, plots are written."""

import csv
from datetime import timedelta

from etl import jobs
from etl.core.interval import Interval
from etl.core.panes import windows
from etl.generator import StreamSpec, generate_stream
from etl.io.tables import read
from etl.quality.report import build_report
from tests.helpers import T0

RUN = Interval(T0, T0 + timedelta(minutes=3))


def test_report_counts_every_update_once_and_draws_the_plot(spark, cfg):
    cfg = cfg.replace(report_window_seconds=120, report_slide_seconds=60)
    generate_stream(StreamSpec(start=T0, duration_s=180, rate=5, seed=2, malformed_share=0.05), cfg.landing_path)
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN)
    rep = build_report(spark, cfg, RUN)

    assert rep["suites_passed"] and rep["pane_seconds"] == 60
    outcomes = {r["outcome"]: r["count"] for r in read(spark, cfg, "outcome_log").groupBy("outcome").count().collect()}
    rejected = read(spark, cfg, "rejected_updates").count()
    totals = rep["interval_totals"]
    assert totals["rejected"] == rejected > 0
    assert totals["updates"] == sum(outcomes.values()) + rejected
    for k in ("matched", "new", "duplicate", "stale"):
        assert totals[k] == outcomes.get(k, 0)

    n_windows = len(windows(int(RUN.start.timestamp()), int(RUN.end.timestamp()), 120, 60))
    with open(rep["windows_csv"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == n_windows * len(rep["sources"])
    complete = [r for r in rows if r["complete"] == "True"]
    assert complete
    for r in complete:
        if r["delay_avg_s"]:
            assert 0 < float(r["delay_avg_s"]) <= float(r["delay_max_s"]) <= float(r["delay_p99_s"]) * 1.1 + 1
    with open(rep["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
