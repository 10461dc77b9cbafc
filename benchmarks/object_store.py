"""What a warehouse on an S3 API costs per batch against the local file system, side by side in one
session: the same stream loaded run by run into a local warehouse and into one at ``s3a://`` on a
real S3-API server on 127.0.0.1 (``etl.devtools.s3_server``: S3Proxy over a directory, through
Hadoop's S3A connector), the runs alternating between the two so the machine's drift falls on both.

    .venv/bin/python -m benchmarks.object_store          # about ten minutes on 2 cores
    .venv/bin/python -m benchmarks.object_store --strategies native,partitioned-range --runs 4

Per run and warehouse: the ingest's and the load's seconds, Spark jobs and Delta commits (commit
files counted in the tables' logs: on the S3 side in the server's own directory), and per batch
the seconds to its write-ahead commit and to its MERGEs (``BatchResult``). Reported: the medians
per batch and per run, and their ratios S3 / local. The server runs on this machine, so what is
measured is the S3A connector's and the protocol's cost (requests, listings, no rename), not a
network's round trips: a store over a network adds its latency to every request."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.measures import delta_commits, jobs_started, seed_direct
from etl import jobs
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.spark_conf import s3a_packages
from etl.devtools import s3_server
from etl.generator import StreamSpec, generate_stream
from etl.io.spark import build_spark_session

T0 = datetime(2026, 11, 22, 8, 0, tzinfo=timezone.utc)


def run_once(spark, cfg: EtlConfig, interval: Interval, store_root: Path) -> dict:
    """Ingest and load one run; its figures."""
    out = {}
    for stage, call in (("ingest", lambda: jobs.ingest(spark, cfg, interval)),
                        ("load", lambda: jobs.load(spark, cfg, interval))):
        jobs0, commits0, t0 = jobs_started(spark), delta_commits(store_root), time.perf_counter()
        summary = call()
        out[stage] = {"seconds": round(time.perf_counter() - t0, 3), "jobs": jobs_started(spark) - jobs0,
                      "commits": delta_commits(store_root) - commits0}
        if stage == "load":
            batches = [b for b in summary["batches"] if b["batch_seq"]]
            out["batches"] = len(batches)
            out["batch_logged_s"] = [round(b["duration_s"], 3) for b in batches]
            out["batch_applied_s"] = [round(b["applied_s"], 3) for b in batches if b.get("applied_s") is not None]
    return out


def medians(runs: list[dict]) -> dict:
    steady = runs[1:] or runs  # the first run of each warehouse carries its tables' first reads
    per_batch = [s for r in steady for s in r["batch_logged_s"]]
    applied = [s for r in steady for s in r["batch_applied_s"]]
    return {
        "ingest_s": statistics.median(r["ingest"]["seconds"] for r in steady),
        "load_s": statistics.median(r["load"]["seconds"] for r in steady),
        "load_jobs": statistics.median(r["load"]["jobs"] for r in steady),
        "load_commits": statistics.median(r["load"]["commits"] for r in steady),
        "batch_to_log_s": statistics.median(per_batch) if per_batch else None,
        "batch_log_to_applied_s": statistics.median(applied) if applied else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategies", default="native,partitioned-range")
    ap.add_argument("--runs", type=int, default=4, help="runs of --run-minutes each, per warehouse and strategy")
    ap.add_argument("--run-minutes", type=int, default=2)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--out", default="docs/results/object_store.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-object-store-"))
    server = s3_server.start(work / "s3", buckets=("warehouse",))
    base = EtlConfig(warehouse_root=str(work / "wh"), gx_root=str(work / "gx"), spark_master="local[2]",
                     spark_shuffle_partitions=2, key_domain=args.keys, micro_batch_seconds=60,
                     schedule=f"*/{args.run_minutes} * * * *", spark_packages=",".join(s3a_packages()))
    spark = build_spark_session(base, app_name="bench-object-store", master="local[2]")
    server.configure(spark)
    rows = []
    try:
        runs = [Interval(T0 + timedelta(minutes=i * args.run_minutes), T0 + timedelta(minutes=(i + 1) * args.run_minutes))
                for i in range(args.runs)]
        spec = StreamSpec(start=T0, duration_s=60 * args.run_minutes * args.runs, rate=args.rate, key_domain=args.keys, seed=7)
        generate_stream(spec, work / "landing")
        for strategy in args.strategies.split(","):
            name = uuid.uuid4().hex[:8]
            local = base.replace(warehouse_root=str(work / f"local-{name}"), landing_root=str(work / "landing"),
                                 runs_root=str(work / f"local-{name}-runs"), join_strategy=strategy)
            on_s3 = local.replace(warehouse_root=f"s3a://warehouse/{name}", meta_root=str(work / f"s3-{name}-meta"),
                                  runs_root=str(work / f"s3-{name}-runs"))
            stores = {"local": (local, Path(local.warehouse_root)),
                      "s3": (on_s3, server.data_dir / "buckets" / "warehouse" / name)}
            for cfg, _ in stores.values():
                seed_direct(spark, cfg, args.keys, Interval(T0 - timedelta(minutes=args.run_minutes), T0))
            figures = {k: [] for k in stores}
            for interval in runs:
                for kind, (cfg, root) in stores.items():  # alternating: the machine's drift falls on both
                    figures[kind].append(run_once(spark, cfg, interval, root))
                    print(f"[object_store] {strategy} {kind} {interval.run_key}: {json.dumps(figures[kind][-1])}",
                          file=sys.stderr, flush=True)
            med = {k: medians(v) for k, v in figures.items()}
            ratio = {k: (round(med["s3"][k] / med["local"][k], 2) if med["s3"][k] and med["local"][k] else None)
                     for k in med["local"]}
            row = {"strategy": strategy, "median": med, "s3_over_local": ratio, "runs": figures}
            print(json.dumps({"strategy": strategy, "median": med, "s3_over_local": ratio}), flush=True)
            rows.append(row)
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out")
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"command": f"python -m benchmarks.object_store {options}",
                                              "stream": spec.described(), "server": f"S3Proxy {s3_server.S3PROXY_VERSION}",
                                              "results": rows}, indent=2) + "\n")
    finally:
        spark.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
