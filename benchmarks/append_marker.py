"""What Delta's ``txnAppId``/``txnVersion`` marker costs a small append, side by side in one run.

    .venv/bin/python -m benchmarks.append_marker                 # about a minute on 2 cores

Two 1-row Delta tables; ``--appends`` pairs of 1-row appends, alternately with the marker (one
table) and plain (the other), in one Spark session. Reports the median seconds and Spark jobs of
each kind after ``--warmup`` pairs, and their ratio. Why: the loader used to put the marker on
every append of a batch; recovery now looks for a batch's rows instead
(docs/decisions/commit-protocol.md)."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from benchmarks.measures import scratch_spark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="docs/results/append_marker.json")
    args = ap.parse_args()
    work, spark = scratch_spark("append")
    jobs = lambda: spark.sparkContext._jsc.sc().dagScheduler().nextJobId()  # noqa: E731
    try:
        row = spark.createDataFrame([(1, "a")], "x long, y string")
        marked, plain = str(work / "marked"), str(work / "plain")
        for path in (marked, plain):
            row.write.format("delta").save(path)
        seconds = {"marked": [], "plain": []}
        counts = {"marked": [], "plain": []}
        for i in range(1, args.appends + 1):
            for kind, path in (("marked", marked), ("plain", plain)):
                writer = row.write.format("delta").mode("append")
                if kind == "marked":
                    writer = writer.option("txnAppId", "bench").option("txnVersion", i)
                j, t = jobs(), time.perf_counter()
                writer.save(path)
                seconds[kind].append(time.perf_counter() - t)
                counts[kind].append(jobs() - j)
        kept = {k: v[args.warmup:] for k, v in seconds.items()}
        result = {
            "appends": args.appends, "warmup": args.warmup,
            "median_seconds": {k: statistics.median(v) for k, v in kept.items()},
            "median_jobs": {k: statistics.median(v[args.warmup:]) for k, v in counts.items()},
            "ratio_marked_over_plain": statistics.median(kept["marked"]) / statistics.median(kept["plain"]),
            "command": "python -m benchmarks.append_marker",
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
