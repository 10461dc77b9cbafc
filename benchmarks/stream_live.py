"""The always-on loader timed live, on the wall clock, beside the scheduled way on the same stream.

    .venv/bin/python -m benchmarks.stream_live             # about 3 x (minutes + 1) minutes on 2 cores

Per mode, a warehouse seeded directly (``measures.seed_direct``: ``--keys`` keys) and a stream of
``--minutes`` of arrivals at ``--rate`` updates/s stamped from the next whole minute on (written
ahead, read only once each minute has closed, as from a landing agent that has finished the
minute). Modes: ``stream:<strategy>`` is ``etl stream`` (one session, each minute's windows
loaded once the minute closes, ``--micro-batch-seconds`` windows); ``scheduled:<strategy>`` loads
each run of ``--run-minutes`` after it closes, ingest then load, in the same session (a DAG run
would add three spark-submit starts: this is the scheduled way's best case). Reported per mode:
per batch Spark jobs, Delta commits and seconds (medians over pieces, per batch), and the
production delay of every update (its batch's write-ahead commit minus its arrival): avg and p99.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import functions as F

from benchmarks.measures import delta_commits, jobs_started, seed_direct
from etl import jobs
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.spark import build_spark_session
from etl.io.tables import read
from etl.stream import Stream


def delays(spark, cfg: EtlConfig) -> dict:
    """Every update's delay: its batch's commit (the ledger's ``committed_at``) minus its arrival."""
    ledger = read(spark, cfg, "batch_ledger").where("strategy != 'seed'").select("batch_seq", "committed_at")
    d = (read(spark, cfg, "outcome_log").join(ledger, "batch_seq")
         .select((F.unix_micros("committed_at") - F.unix_micros("arrival_ts")).alias("us")))
    row = d.agg(F.avg("us"), F.percentile_approx("us", 0.99, 10000), F.count("*")).first()
    return {"updates": int(row[2]), "delay_avg_s": (row[0] or 0) / 1e6, "delay_p99_s": (row[1] or 0) / 1e6}


def run_mode(spark, base: EtlConfig, work: Path, mode: str, args) -> dict:
    kind, strategy = mode.split(":")
    cfg = base.replace(warehouse_root=str(work / mode.replace(":", "-") / "warehouse"),
                       runs_root=str(work / mode.replace(":", "-") / "runs"), join_strategy=strategy)
    # The first boundary of the schedule at least 45 s away (the seeding's time).
    start = (datetime.now(timezone.utc) + timedelta(seconds=45 + 59)).replace(second=0, microsecond=0)
    start += timedelta(minutes=-start.minute % args.run_minutes)
    seed_direct(spark, cfg, args.keys, Interval(start - timedelta(minutes=args.run_minutes), start))
    landing = work / f"landing-{mode.replace(':', '-')}"
    generate_stream(StreamSpec(start=start, duration_s=60 * args.minutes, rate=args.rate, seed=5, key_domain=args.keys),
                    landing)
    cfg = cfg.replace(landing_root=str(landing))
    end = start + timedelta(minutes=args.minutes)
    marks = []

    def mark(message: str = "") -> None:
        n = int(message.split(": ")[1].split(" ")[0]) if "batches committed" in message else 0
        marks.append((jobs_started(spark), delta_commits(cfg.warehouse_path), time.perf_counter(), n))
        print(f"  {mode}: {message}", flush=True)

    if kind == "stream":
        stream = Stream(spark, cfg, progress=mark)
        mark("started")
        stream.run(start=start, until=end)
    else:
        for i in range(0, args.minutes, args.run_minutes):
            run = Interval(start + timedelta(minutes=i), start + timedelta(minutes=i + args.run_minutes))
            wait = (run.end - datetime.now(timezone.utc)).total_seconds() + cfg.stream_grace_seconds
            time.sleep(max(wait, 0))
            jobs.ingest(spark, cfg, run)
            mark("ingested")
            summary = jobs.load(spark, cfg, run)
            mark(f"run: {summary['batches_committed']} batches committed")
    pieces = [(a, b) for a, b in zip(marks, marks[1:]) if b[3]]
    per = lambda i: statistics.median((b[i] - a[i]) / b[3] for a, b in pieces) if pieces else None  # noqa: E731
    return {"mode": mode, "batches": sum(b[3] for _, b in pieces), "jobs_per_batch": per(0),
            "commits_per_batch": per(1), "seconds_per_batch": per(2), **delays(spark, cfg)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=int, default=4, help="minutes of arrivals per mode")
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--micro-batch-seconds", type=int, default=20)
    ap.add_argument("--run-minutes", type=int, default=2, help="the schedule's interval, in minutes")
    ap.add_argument("--modes", default="stream:native,stream:partitioned-range,scheduled:native")
    ap.add_argument("--out", default="docs/results/stream_live.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-stream-live-"))
    base = EtlConfig(
        warehouse_root=str(work / "wh"), gx_root=str(work / "gx"), spark_master="local[2]", spark_shuffle_partitions=2,
        micro_batch_seconds=args.micro_batch_seconds, key_domain=args.keys, schedule=f"*/{args.run_minutes} * * * *",
    )
    spark = build_spark_session(base, app_name="bench-stream-live", master="local[2]")
    try:
        rows = []
        for mode in args.modes.split(","):
            row = run_mode(spark, base, work, mode, args)
            print(json.dumps(row), flush=True)
            rows.append(row)
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out")
        result = {"command": f"python -m benchmarks.stream_live {options}", "runs": rows}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
