"""Bytes of key_map read per 1,000 updates: partitioned-range vs native, side by side, same data.

    .venv/bin/python -m benchmarks.keymap_bytes [--keys 20000] [--rate 40] [--minutes 4] [--out docs/results/keymap_bytes.json]

1. load ``--keys`` natural keys (one interval of all-new keys) into a warehouse with ``native``;
2. copy that warehouse, so both strategies start from the same key_map;
3. run the same skewed PQRS stream (p=0.6, q=0.1, r=0.25, s=0.05, b=0.6) through each;
4. report, per strategy, the sum of ``join_metrics.keymap_bytes_read`` for that run, per 1,000
   updates, the ratio, and check that both gave identical outcomes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from etl import jobs
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.generator import SKEWS, StreamSpec, generate_stream, skew
from etl.io.spark import build_spark_session
from etl.io.tables import read


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=40.0)
    ap.add_argument("--skew", choices=sorted(SKEWS), default="thesis", help="the stream's PQRS skew (etl.generator.SKEWS)")
    ap.add_argument("--minutes", type=int, default=4)
    ap.add_argument("--memory-budget", type=int, default=512 << 10)
    ap.add_argument("--micro-batch-seconds", type=int, default=10, help="the same trigger interval for both")
    ap.add_argument("--out", default="docs/results/keymap_bytes.json")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="keymap-bytes-"))
    t0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
    seed_run = Interval(t0, t0 + timedelta(minutes=5))
    run = Interval(t0 + timedelta(minutes=5), t0 + timedelta(minutes=5 + args.minutes))
    base = EtlConfig(
        warehouse_root=str(work / "native"), landing_root=str(work / "landing"), gx_root=str(work / "gx"),
        runs_root=str(work / "runs"), spark_shuffle_partitions=2, key_domain=args.keys, n_part=64,
        memory_budget=args.memory_budget, n_invoke=200, wait_buffer_tuples=2000, tau=500,
        micro_batch_seconds=args.micro_batch_seconds,
    )
    spark = build_spark_session(base, app_name="keymap-bytes", master="local[2]")
    # 1. R: every key of the domain, once (a 5-minute interval of new keys, sequential keys 0..N-1
    #    come from a uniform PQRS; repeats are fine, they are matched).
    generate_stream(
        StreamSpec(start=seed_run.start, duration_s=300, rate=args.keys / 100, key_domain=args.keys,
                   **skew("uniform"), b=0.5, new_key_share=0, duplicate_share=0,
                   unchanged_share=0, malformed_share=0, seed=1),
        base.landing_path,
    )
    seeding = base.replace(micro_batch_seconds=300)  # R is loaded in one batch
    jobs.ingest(spark, seeding, seed_run)
    jobs.load(spark, seeding, seed_run, strategy="native")
    # 3. the skewed stream
    stream = StreamSpec(start=run.start, duration_s=60 * args.minutes, rate=args.rate, key_domain=args.keys,
                        **skew(args.skew), b=0.6, seed=2)
    generate_stream(stream, base.landing_path)
    ranged = base.replace(warehouse_root=str(work / "range"), runs_root=str(work / "runs-range"))
    shutil.copytree(base.warehouse_path, ranged.warehouse_path)  # 2. the same starting key_map
    results = {}
    for name, cfg in (("native", base), ("partitioned-range", ranged)):
        started = time.time()
        jobs.ingest(spark, cfg, run)
        summary = jobs.load(spark, cfg, run, strategy=name)
        m = read(spark, cfg, "join_metrics").where(f"run_key = '{run.run_key}'").collect()
        updates = sum(r.updates_in for r in m)
        results[name] = {
            "updates": updates,
            "keymap_bytes_read": sum(r.keymap_bytes_read for r in m),
            "keymap_bytes_per_1000_updates": 1000 * sum(r.keymap_bytes_read for r in m) / max(updates, 1),
            "segments_probed": sum(r.segments_probed for r in m),
            "segments_admitted": sum(r.segments_admitted for r in m),
            "segments_evicted": sum(r.segments_evicted for r in m),
            "outcomes": summary["outcomes"],
            "load_seconds": time.time() - started,
        }
    same = results["native"]["outcomes"] == results["partitioned-range"]["outcomes"]
    key_map_bytes = sum(f.stat().st_size for f in (ranged.warehouse_path / "key_map").rglob("*.parquet"))
    report = {
        "command": "python -m benchmarks.keymap_bytes " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "key_map_rows": read(spark, base, "key_map").count(),
        "key_map_bytes_on_disk": key_map_bytes,
        "memory_budget": args.memory_budget,
        "stream": stream.described(),
        "micro_batch_seconds": args.micro_batch_seconds,
        "results": results,
        "ratio_range_over_native": results["partitioned-range"]["keymap_bytes_read"] / max(results["native"]["keymap_bytes_read"], 1),
        "identical_outcomes": same,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
