"""Ingest throughput: one run's landed lines through `jobs.ingest` (scan, validate on the
executors, write ingested/rejected/landed_files), median of N repetitions on one warehouse.

    .venv/bin/python -m benchmarks.ingest --minutes 10 --rate 200 --repeat 3

Prints one JSON line: lines, seconds per repetition, median, lines per second. To compare with
an older checkout on the same machine and stream, run this file by its path from that checkout's
root with it first on PYTHONPATH, and the same ``--work`` landing (copied):
``PYTHONPATH=. python /path/to/benchmarks/ingest.py --work DIR``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from etl import jobs
from etl.generator import StreamSpec, generate_stream

try:
    from etl.core.config import EtlConfig
    from etl.core.interval import Interval
    from etl.io.spark import build_spark_session
except ImportError:  # a checkout from before the layers (run this file by its path there)
    from etl.config import EtlConfig
    from etl.ingest import Interval
    from etl.spark import build_spark_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", default="")
    args = parser.parse_args()
    t0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
    work = Path(args.work or tempfile.mkdtemp(prefix="ingest-bench-"))
    landing = work / "landing"
    if not landing.exists():
        generate_stream(StreamSpec(start=t0, duration_s=args.minutes * 60, rate=args.rate, seed=7), landing)
    cfg = EtlConfig(warehouse_root=str(work / "warehouse"), landing_root=str(landing), runs_root=str(work / "runs"),
                    gx_root=str(work / "gx"), spark_master="local[2]", spark_shuffle_partitions=2)
    spark = build_spark_session(cfg)
    run = Interval(t0, t0 + timedelta(minutes=args.minutes))
    jobs.ingest(spark, cfg, run)  # warm-up (and table creation)
    seconds = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        summary = jobs.ingest(spark, cfg, run)
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    print(json.dumps({"checkout": str(Path.cwd()), "lines": summary["lines"], "seconds": [round(s, 2) for s in seconds],
                      "median_s": round(median, 2), "lines_per_s": round(summary["lines"] / median)}))
    spark.stop()


if __name__ == "__main__":
    main()
