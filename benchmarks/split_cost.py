"""What the split at a run's end costs (``split_segments_per_run``, issue 47), at full size.

    .venv/bin/python -m benchmarks.split_cost [--keys 20000000] [--n-part 1024] [--limit 16] [--rounds 3] \
        [--work var/split-cost] [--out docs/results/split_cost.json]

A warehouse seeded in bulk (``benchmarks.measures.seed_direct``: about ``--keys`` rows of
``key_map`` over two sources in ``--n-part`` range segments; at full size 19,531 rows a segment,
every one of them above ``2*theta`` = 16,384 rows with the default theta) has, ``--rounds``
times, the run end's service made as the loader makes it (``Loader._end_service``): the rows per
segment (one aggregate), the due segments planned (pure), and up to ``--limit`` of them split
(their keys counted per slot, their partitions rewritten in one commit). Each part's seconds per
round, their medians, and beside them one full scan of ``key_map`` (a column summed), the unit a run's
end is otherwise measured in, are written to ``--out``. ``--work`` is seeded anew each time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import functions as F

from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.layout import segments_to_split
from etl.io.layout_store import load_layout
from etl.io.rebalance import rebalance
from etl.io.spark import build_spark_session
from etl.io.tables import read
from etl.strategies.base import rows_per_segment
from benchmarks.measures import seed_direct
from benchmarks.report import progress, write_result

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=20_000_000)
    ap.add_argument("--n-part", type=int, default=1024)
    ap.add_argument("--limit", type=int, default=16, help="split_segments_per_run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="var/split-cost")
    ap.add_argument("--out", default="docs/results/split_cost.json")
    args = ap.parse_args()
    if args.keys <= 0 or args.n_part <= 0 or args.limit <= 0 or args.rounds <= 0:
        ap.error("--keys, --n-part, --limit and --rounds must be positive")

    work = Path(args.work)
    cfg = EtlConfig(warehouse_root=str(work / "wh"), runs_root=str(work / "runs"), gx_root=str(work / "gx"),
                    spark_shuffle_partitions=2, key_domain=args.keys, n_part=args.n_part,
                    join_strategy="partitioned-range", split_segments_per_run=args.limit)
    spark = build_spark_session(cfg, app_name="bench-split-cost", master="local[2]")
    shutil.rmtree(work, ignore_errors=True)  # each run splits what it seeded: a fresh seed for each
    started = time.time()
    rows = seed_direct(spark, cfg, args.keys, Interval(T0, T0 + timedelta(minutes=5)), progress=progress)
    progress(f"seeded {rows} key_map rows in {time.time() - started:.0f} s")

    rounds = []
    for n in range(1, args.rounds + 1):
        t = time.time()
        full_read, _ = read(spark, cfg, "key_map").agg(F.count("*"), F.sum(F.length("natural_key"))).first()
        t_full = time.time() - t
        layout = load_layout(cfg)
        t = time.time()
        rows = rows_per_segment(read(spark, cfg, "key_map"))
        t_rows = time.time() - t
        t = time.time()
        due = segments_to_split(layout, rows, cfg.theta, 4 * args.limit)
        t_plan = time.time() - t
        t = time.time()
        done = rebalance(spark, cfg, merge=False, segments=due, limit=args.limit, run_key=f"round-{n}")
        t_split = time.time() - t
        record = {"round": n, "key_map_rows": full_read, "segments_before": done["segments_before"],
                  "segments_after": done["segments_after"], "due_counted": len(due), "split": len(done["split"]),
                  "rows_moved": done["rows_moved"], "seconds": {
                      "rows_per_segment": round(t_rows, 2), "plan": round(t_plan, 4), "split": round(t_split, 2),
                      "service_total": round(t_rows + t_plan + t_split, 2), "one_full_key_map_scan": round(t_full, 2)}}
        progress(json.dumps(record))
        rounds.append(record)
    medians = {k: round(statistics.median(r["seconds"][k] for r in rounds), 2) for k in rounds[0]["seconds"]}
    write_result(args.out, "benchmarks.split_cost", {
        "keys": args.keys, "n_part": args.n_part, "theta": cfg.theta, "limit": args.limit,
        "rounds": rounds, "medians": medians,
        "service_over_full_read": round(medians["service_total"] / medians["one_full_key_map_scan"], 2),
    })
    progress(f"medians {medians}; written to {args.out}")
    spark.stop()


if __name__ == "__main__":
    main()
