"""What one steady-state micro-batch costs the loader: Spark jobs, Delta commits and seconds.

    .venv/bin/python -m benchmarks.batch_jobs                      # about three minutes on 2 cores
    cd ../other-checkout && ../main/.venv/bin/python -m benchmarks.batch_jobs --out /tmp/other.json

One stream (``--minutes`` of arrivals at ``--rate`` updates/s over ``--keys`` keys); its first
half is loaded by ``native`` to seed ``key_map``, then the second half is loaded by each strategy
of ``--strategies`` (a strategy, or a variant ``strategy:name=value`` as in ``benchmarks.strategies``,
e.g. ``partitioned-range:n_invoke=1``, which releases every step) from a copy of that seeded
warehouse, one micro-batch per arrival minute.
Counted in the second load between two committed batches (the medians; the first batch, which
carries the load's start-up, and the run's end are left out, and reported whole): Spark jobs
(the DAG scheduler's job ids), Delta commits (commit files added to every table) and seconds,
over every step and over the steps that released a batch (three commits or more). Run from another checkout (with this file copied into its ``benchmarks/``), the same
measurement runs that checkout's code: the side-by-side comparison in docs/benchmark.md.

``handwritten`` is the baseline a user would write (``benchmarks/handwritten.py``: Structured
Streaming, ``foreachBatch``, two MERGEs), seeded with the same keys and current rows and fed the
same minutes one at a time. It reads the landing lines in its batches; the strategies' loads do
not (the run is ingested before them), so the report gives the ingest's seconds too."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.handwritten import Handwritten, seed, window_files
from benchmarks.measures import delta_commits, jobs_started
from benchmarks.report import parse_run
from etl import jobs
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.spark import build_spark_session
from etl.io.tables import read

T0 = datetime(2026, 11, 22, 6, 0, tzinfo=timezone.utc)
HANDWRITTEN = "handwritten"  # the baseline of benchmarks/handwritten.py, beside the strategies


def measure(spark, cfg: EtlConfig, run: Interval, strategy: str, label: str | None = None) -> dict:
    """The load of ``run``; per batch after the first (the steady state: the first carries the
    load's start-up), the jobs, commits and seconds between two committed batches, as medians."""
    marks = []

    def mark(_message=None):
        marks.append((jobs_started(spark), delta_commits(cfg.warehouse_path), time.perf_counter()))

    mark()
    summary = jobs.load(spark, cfg, run, strategy=strategy, progress=mark)
    mark()
    steps = list(zip(marks[1:-1], marks[2:-1]))  # batch to batch, without the start-up and the run's end
    per = lambda i: statistics.median(b[i] - a[i] for a, b in steps) if steps else None  # noqa: E731
    # A step that released a batch commits its ledger row and both MERGEs (a partitioned step
    # may add its wait buffer's); one that released nothing, one or two.
    released = [(a, b) for a, b in steps if b[1] - a[1] >= 3]
    per_released = lambda i: statistics.median(b[i] - a[i] for a, b in released) if released else None  # noqa: E731
    return {
        "strategy": label or strategy,
        "released_steps": len(released),
        "jobs_per_released_batch": per_released(0),
        "seconds_per_released_batch": per_released(2),
        "batches": summary["batches_committed"],
        "updates_in": summary["updates_in"],
        "rows": {t: read(spark, cfg, t).count() for t in ("key_map", "customer_current")},
        "jobs_per_batch": per(0),
        "commits_per_batch": per(1),
        "seconds_per_batch": per(2),
        "whole_load": {"jobs": marks[-1][0] - marks[0][0], "commits": marks[-1][1] - marks[0][1],
                       "seconds": marks[-1][2] - marks[0][2]},
    }


def measure_handwritten(spark, seed_cfg: EtlConfig, root: Path, run: Interval) -> dict:
    """The hand-written baseline (``benchmarks.handwritten``) seeded with the seed warehouse's keys
    and current rows, fed ``run``'s arrival minutes one at a time: one micro-batch each."""
    fed = window_files(seed_cfg.landing_path, run.start, 60, int((run.end - run.start).total_seconds() // 60),
                       root / "windows")
    seed(spark, read(spark, seed_cfg, "key_map"), read(spark, seed_cfg, "customer_current"), root)
    hand = Handwritten(spark, root)
    marks = [(jobs_started(spark), delta_commits(root), 0.0)]
    try:
        for files, _ in fed:
            seconds = hand.feed(files)
            marks.append((jobs_started(spark), delta_commits(root), seconds))
    finally:
        hand.stop()
    steps = list(zip(marks[1:], marks[2:]))  # without the first batch (the query's start-up)
    return {
        "strategy": "handwritten",
        "batches": len(marks) - 1,
        "rows": hand.rows(),
        "jobs_per_batch": statistics.median(b[0] - a[0] for a, b in steps) if steps else None,
        "commits_per_batch": statistics.median(b[1] - a[1] for a, b in steps) if steps else None,
        "seconds_per_batch": statistics.median(b[2] for _, b in steps) if steps else None,
        "whole_load": {"jobs": marks[-1][0] - marks[0][0], "commits": marks[-1][1] - marks[0][1],
                       "seconds": sum(m[2] for m in marks)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=int, default=12, help="minutes of arrivals; half seed, half measured")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--strategies", default=f"native,partitioned-range,{HANDWRITTEN}")
    ap.add_argument("--repeat", type=int, default=1, help="measured loads per strategy (medians reported)")
    ap.add_argument("--out", default="docs/results/batch_jobs.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-batch-jobs-"))
    half = args.minutes // 2
    seed_run = Interval(T0, T0 + timedelta(minutes=half))
    run = Interval(T0 + timedelta(minutes=half), T0 + timedelta(minutes=2 * half))
    base = EtlConfig(
        warehouse_root=str(work / "seed" / "warehouse"), landing_root=str(work / "landing"),
        gx_root=str(work / "seed" / "gx"), runs_root=str(work / "seed" / "runs"),
        spark_master="local[2]", spark_shuffle_partitions=2, micro_batch_seconds=60, key_domain=args.keys,
    )
    spark = build_spark_session(base, app_name="bench-batch-jobs", master="local[2]")
    try:
        generate_stream(StreamSpec(start=T0, duration_s=60 * 2 * half, rate=args.rate, seed=5, key_domain=args.keys),
                        work / "landing")
        jobs.ingest(spark, base, seed_run)
        jobs.load(spark, base, seed_run, strategy="native")
        ingest_started = time.perf_counter()
        jobs.ingest(spark, base, run)
        ingest_seconds = time.perf_counter() - ingest_started
        rows = []
        for i in range(args.repeat):
            for strategy in args.strategies.split(","):
                target = work / f"{strategy.replace(':', '-').replace('=', '-')}-{i}"
                if strategy == HANDWRITTEN:
                    row = measure_handwritten(spark, base, target, run)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    continue
                shutil.copytree(work / "seed", target)
                name, variant = parse_run(strategy)
                cfg = base.replace(warehouse_root=str(target / "warehouse"), gx_root=str(target / "gx"),
                                   runs_root=str(target / "runs"), **variant)
                row = measure(spark, cfg, run, name, label=strategy)
                print(json.dumps(row), flush=True)
                rows.append(row)
        options = " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "out")
        result = {"command": f"python -m benchmarks.batch_jobs {options}", "runs": rows, "median": {},
                  "ingest_seconds": ingest_seconds}
        for strategy in args.strategies.split(","):
            mine = [r for r in rows if r["strategy"] == strategy]
            result["median"][strategy] = {
                k: statistics.median(vals) if (vals := [r[k] for r in mine if r.get(k) is not None]) else None
                for k in ("jobs_per_batch", "commits_per_batch", "seconds_per_batch", "jobs_per_released_batch",
                          "seconds_per_released_batch")
            }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["median"], indent=2))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
