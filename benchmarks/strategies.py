"""All four join strategies side by side in Spark, at several offered rates, on the same data.

    .venv/bin/python -m benchmarks.strategies --size small        # about 30 minutes on 2 cores
    .venv/bin/python -m benchmarks.strategies --size medium       # ten times small's key_map
    .venv/bin/python -m benchmarks.strategies --size full         # 20 million keys: hours, bigger machine

1. Seed a warehouse with most keys of the domain (a uniform stream of 1.2x the domain, loaded
   by ``native`` in the range layout; at full size, or with ``--seed direct``, one bulk write of
   half the domain's ``(source, key)`` pairs: ``seed_direct``), and, when ``partitioned-hash``
   runs, a copy of it laid out by hash (the maintenance ``relayout``); ``key_map`` is ten times
   the join-memory budget.
2. Per offered rate, one skewed, bursty stream (PQRS 0.6/0.1/0.25/0.05, b = 0.6) of ``minutes``.
3. Each strategy loads it from a copy of the same seeded warehouse with the same micro-batch
   trigger interval; the outcomes must be identical (canonical rows, ``outcome_digest``): the
   benchmark exits 1 when they differ.
4. Real-time replay: batch i's arrivals are complete at ``start + (i+1) * T``; it starts then or
   when batch i-1 is done, whichever is later, and takes its measured ``duration_s``. An
   update's production delay is the finish of the batch that committed its outcome (from
   ``outcome_log``) minus its ``arrival_ts``. A rate is sustained when the replay's lag does not
   grow (the run's batches take at most the run's length).
   Beside them runs ``handwritten`` (benchmarks/handwritten.py), the Structured Streaming job a
   user would write instead, seeded with the same keys and fed the same stream one trigger
   interval at a time; its whole batch time is the denominator of issue 26's targets
   (``batch_seconds_over_handwritten``). A strategy's batch time is its whole batch: the ledger's
   ``duration_s`` ends at the write-ahead commit, the load's summary adds the MERGEs (``applied_s``).
5. Reports per strategy and rate: capacity (updates per second of batch time), sustained or not,
   average and p99 production delay, bytes of ``key_map`` read per 1,000 updates, probes, and for
   the partitioned strategies the offline optimum of segment fetches (Belady) on the same trace
   and memory. JSON + PNG under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

from pyspark.sql import functions as F

from benchmarks.handwritten import Handwritten, seed, window_files
from benchmarks.measures import (
    SEED_RANGE,
    delta_commits,
    jobs_started,
    keymap_segment_bytes,
    keymap_segment_sizes,
    outcome_digest,
    seed_direct,
    seed_marker,
    stored_seed,
    table_files,
)
from benchmarks.report import (
    BASELINE,
    STRATEGIES,
    cost_model,
    identical_outcomes,
    parse_run,
    partitioned_settings,
    progress,
    refit,
    replay,
    summarise,
    write_report,
)
from etl import jobs
from etl.core import registry
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.policy import load_batches
from etl.generator import SKEWS, StreamSpec, generate_stream, skew
from etl.io.layout_store import load_layout
from etl.io.spark import build_spark_session
from etl.io.spark_progress import spark_progress
from etl.io.tables import read
from etl.maintenance import relayout
from etl.simulator.belady import belady_fetches
from etl.transforms.layout import segment_column

SIZES = {
    # keys: the natural-key domain, all loaded first; rates: offered updates/s; minutes per rate.
    "small": dict(keys=60_000, rates=(10, 40), minutes=6, micro_batch_seconds=30, n_part=64, k=16),
    # Ten times small's key_map (about 55 MB): the trend with the relation's size, in under an hour here.
    "medium": dict(keys=600_000, rates=(40,), minutes=8, micro_batch_seconds=30, n_part=256, k=16),
    "tiny": dict(keys=3_000, rates=(10,), minutes=2, micro_batch_seconds=30, n_part=16, k=4),  # a smoke run
    "full": dict(keys=20_000_000, rates=(200, 1000, 5000), minutes=20, micro_batch_seconds=60, n_part=1024, k=64,
                 seed="direct"),
}
T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)


def run_baseline(spark, seed_cfg: EtlConfig, landing: Path, work: Path, run: Interval, t: int) -> dict:
    """The hand-written baseline (benchmarks/handwritten.py) seeded like the strategies and fed the
    same stream one trigger interval at a time, each timed; replayed like theirs."""
    windows = int((run.end - run.start).total_seconds() // t)
    fed = window_files(landing, run.start, t, windows, work / "windows")
    seed(spark, read(spark, seed_cfg, "key_map"), read(spark, seed_cfg, "customer_current"), work / "tables")
    hand = Handwritten(spark, work / "tables")
    spark_jobs, commits = jobs_started(spark), delta_commits(work / "tables")
    metrics, outcomes = [], []
    try:
        for w, (files, arrivals) in enumerate(fed):
            seconds = hand.feed(files)
            metrics.append(SimpleNamespace(batch_index=w, batch_seq=w + 1, duration_s=seconds, updates_in=len(arrivals)))
            outcomes += [SimpleNamespace(batch_index=w, arrival_ts=a) for a in arrivals]
    finally:
        hand.stop()
    updates = sum(m.updates_in for m in metrics)
    return {
        "updates": updates,
        "rows": hand.rows(),
        "capacity_updates_per_s": updates / max(sum(m.duration_s for m in metrics), 1e-9),
        "batches": len(metrics),
        "spark_jobs_per_batch": (jobs_started(spark) - spark_jobs) / max(len(metrics), 1),
        "delta_commits_per_batch": (delta_commits(work / "tables") - commits) / max(len(metrics), 1),
        "per_batch": [{"index": m.batch_index, "updates": m.updates_in, "duration_s": round(m.duration_s, 2)} for m in metrics],
        **replay(metrics, outcomes, run, t),
    }


def whole_batches(metrics, summary: dict) -> list:
    """The run's ``join_metrics`` rows with each batch's whole time: its ``duration_s`` ends at the
    write-ahead commit, the load's summary adds the MERGEs after it (``applied_s``)."""
    applied = {(b["batch_index"], b["batch_seq"]): b.get("applied_s") or 0.0 for b in summary["batches"]}
    return [SimpleNamespace(**{**m.asDict(), "duration_s": m.duration_s + applied.get((m.batch_index, m.batch_seq), 0.0)})
            for m in metrics]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--rates", default="", help="comma-separated offered rates (default: the size's)")
    ap.add_argument("--minutes", type=int, default=0, help="minutes of stream per rate (default: the size's)")
    ap.add_argument("--skew", choices=sorted(SKEWS), default="thesis", help="the stream's PQRS skew (etl.generator.SKEWS)")
    ap.add_argument("--seed", choices=("stream", "direct"), default="",
                    help="seed key_map through a loaded stream, or by one bulk write (default: direct for full, else stream)")
    ap.add_argument("--max-wait-s", type=float, default=0.0,
                    help="the partitioned strategies' wait bound max_wait_s (default 0: none, the thesis's policy)")
    ap.add_argument("--seed-only", action="store_true",
                    help="seed the range-layout warehouse under --work and stop; later runs with that --work reuse it")
    ap.add_argument("--trigger", type=int, default=0,
                    help="micro-batch trigger interval in seconds, the same for every strategy (default: the size's)")
    ap.add_argument("--strategies", default=",".join((*STRATEGIES, BASELINE)),
                    help="comma-separated runs: a strategy, or strategy:name=value (max_wait_s, h_mark, n_invoke, deletion_vectors) for a variant beside it")
    ap.add_argument("--k", type=int, default=0, help="MESHJOIN's relation segments per cycle (default: the size's)")
    ap.add_argument("--h-mark", type=int, default=0,
                    help="the partitioned strategies' block-granularity mark h_mark in tuples (default: the product's)")
    ap.add_argument("--work", default="", help="working directory (default: a temporary one, removed)")
    ap.add_argument("--out", default="docs/results/strategies")
    ap.add_argument("--refit", default="", help="a report JSON: add the per-batch cost model to it and rewrite it; runs nothing")
    args = ap.parse_args()
    if args.refit:
        refit(Path(args.refit))
        return
    size = dict(SIZES[args.size])
    rates = [float(r) for r in args.rates.split(",")] if args.rates else list(size["rates"])
    minutes = args.minutes or size["minutes"]
    labels = [s.strip() for s in args.strategies.split(",") if s.strip()]
    runs = {label: parse_run(label) for label in labels}
    strategies = [strategy for strategy, _ in runs.values()]
    if len(set(labels)) != len(labels):
        ap.error("--strategies names a run twice")
    if args.k < 0:
        ap.error("--k must be a positive number of segments")
    k = args.k or size["k"]
    if args.seed_only and not args.work:
        ap.error("--seed-only needs --work (where the seeded warehouse is kept)")
    if args.trigger < 0:
        ap.error("--trigger must be a positive number of seconds")
    t = args.trigger or size["micro_batch_seconds"]
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-strategies-"))
    started = time.time()

    base = EtlConfig(
        warehouse_root=str(work / SEED_RANGE), landing_root=str(work / "landing-seed"), gx_root=str(work / "gx"),
        runs_root=str(work / "runs-seed"), spark_shuffle_partitions=2, key_domain=size["keys"], n_part=size["n_part"],
        micro_batch_seconds=t, n_invoke=200, wait_buffer_tuples=2000, tau=500, k=k, d=1,
        split_segments_per_run=0,  # as the recorded runs, before the split at a run's end
    )
    spark = build_spark_session(base, app_name="bench-strategies", master="local[2]")
    seed_run = Interval(T0, T0 + timedelta(minutes=5))
    seed_mode = args.seed or size.get("seed", "stream")
    layouts = ["range"] + (["hash"] if "partitioned-hash" in strategies and not args.seed_only else [])
    progress(f"seeding {size['keys']} keys ({seed_mode}; {' and '.join(layouts)} layouts) under {work}")
    seeds = {"range": base.replace(warehouse_root=str(work / SEED_RANGE), micro_batch_seconds=300)}
    marker = seed_marker(work)  # a finished seed under --work is reused (seed once, run many times)
    wanted = {"keys": size["keys"], "n_part": size["n_part"], "seed": seed_mode}
    if stored_seed(work) == wanted:
        progress(f"reusing the seeded warehouse {seeds['range'].warehouse_path}")
    else:
        marker.unlink(missing_ok=True)
        shutil.rmtree(seeds["range"].warehouse_path, ignore_errors=True)
        if seed_mode == "direct":
            rows = seed_direct(spark, seeds["range"], size["keys"], seed_run, progress=progress)
            progress(f"seeded {rows} key_map rows directly in {time.time() - started:.0f} s")
        else:
            shutil.rmtree(base.landing_path, ignore_errors=True)
            generate_stream(
                StreamSpec(start=seed_run.start, duration_s=300, rate=size["keys"] / 300 * 1.2, key_domain=size["keys"],
                           **skew("uniform"), b=0.5, new_key_share=0, duplicate_share=0,
                           unchanged_share=0, malformed_share=0, delete_share=0, seed=1),
                base.landing_path, progress=progress,
            )
            load_layout(seeds["range"], "range")
            with spark_progress(spark, "seed: ingest", progress):
                jobs.ingest(spark, seeds["range"], seed_run, progress=progress)
            with spark_progress(spark, "seed: load", progress):
                jobs.load(spark, seeds["range"], seed_run, strategy="native", progress=progress)
        marker.write_text(json.dumps(wanted))
    if args.seed_only:
        progress(f"seeded under {work} in {time.time() - started:.0f} s; run again with --work {work} to use it")
        spark.stop()
        return
    if "hash" in layouts:
        shutil.rmtree(work / "seed-hash", ignore_errors=True)
        # The hash layout: the same warehouse, key_map's segment_id rewritten (the maintenance relayout).
        seeds["hash"] = base.replace(warehouse_root=str(work / "seed-hash"), micro_batch_seconds=300)
        shutil.copytree(seeds["range"].warehouse_path, seeds["hash"].warehouse_path)
        relayout(spark, seeds["hash"].replace(join_strategy="partitioned-hash"))
        assert load_layout(seeds["hash"]).kind == "hash"
    key_map_bytes = {k: sum(keymap_segment_bytes(spark, c).values()) for k, c in seeds.items()}
    key_map_files = {k: table_files(spark, c, "key_map") for k, c in seeds.items()}
    # A tenth of key_map as the join counts it (its rows of r_bytes each), not of its files.
    memory_budget = min(sum(keymap_segment_sizes(spark, c).values()) for c in seeds.values()) // 10
    progress(f"key_map: {key_map_bytes} bytes stored; join memory budget {memory_budget} bytes (1/10 of its rows)")

    results: dict[str, dict] = {}

    def stream_at(start, rate: float) -> StreamSpec:
        """The offered stream of one rate (``--skew``: one of ``etl.generator.SKEWS``)."""
        return StreamSpec(start=start, duration_s=60 * minutes, rate=rate, key_domain=size["keys"], **skew(args.skew),
                          b=0.6, seed=2)

    def write_so_far(complete: bool) -> dict:
        report = {
            "command": "python -m benchmarks.strategies " + " ".join(a for a in sys.argv[1:]),
            "size": args.size, "keys": size["keys"], "rates": rates, "minutes": minutes, "micro_batch_seconds": t,
            "seed": seed_mode, "meshjoin_k": k, "partitioned": "wait_buffer_tuples = rate x trigger; n_invoke = wait_buffer_tuples / 8",
            "key_map_bytes": key_map_bytes, "memory_budget": memory_budget,
            "stream": {**stream_at(T0, rates[0]).described(), "rate": rates},
            "results": results, "complete": complete,
            "wall_seconds": time.time() - started,
        }
        summarise(report)
        write_report(report, Path(args.out) / f"strategies-{args.size}.json")
        return report

    for rate in rates:
        run = Interval(T0 + timedelta(minutes=5), T0 + timedelta(minutes=5 + minutes))
        landing = work / f"landing-{rate:g}"
        shutil.rmtree(landing, ignore_errors=True)
        generate_stream(
            stream_at(run.start, rate),
            landing,
        )
        per_rate = {}
        for label, (strategy, variant) in runs.items():
            kind = "hash" if strategy == "partitioned-hash" else "range"
            name = re.sub(r"[^A-Za-z0-9.-]+", "-", label) + f"-{rate:g}"
            for leftover in (work / name, work / f"runs-{name}"):  # of an earlier run under this --work
                shutil.rmtree(leftover, ignore_errors=True)
            if strategy == BASELINE:
                t1 = time.time()
                row = run_baseline(spark, seeds["range"], landing, work / name, run, t)
                row["wall_seconds"] = time.time() - t1
                per_rate[label] = row
                progress(f"rate {rate:g} {label}: {row['updates']} updates in {row['wall_seconds']:.0f} s; "
                         f"avg delay {row['avg_delay_s']:.1f} s, {'sustained' if row['sustained'] else 'NOT sustained'}")
                shutil.rmtree(work / name, ignore_errors=True)
                results[f"{rate:g}"] = per_rate
                write_so_far(complete=False)
                continue
            shutil.copytree(seeds[kind].warehouse_path, work / name)
            # The granularity marks keep the product's defaults. Scaled with the rate (h_mark = 4 rate T,
            # tried 2026-11-24 at full size) they kept range in one-window batches that did not keep
            # up (166 updates/s of capacity at 200/s offered): block granularity is what sustains it.
            marks = dict(h_mark=args.h_mark) if args.h_mark else {}
            cfg = seeds[kind].replace(
                warehouse_root=str(work / name), runs_root=str(work / f"runs-{name}"), landing_root=str(landing),
                micro_batch_seconds=t, memory_budget=memory_budget,
                # A variant's setting wins over the rate's.
                **{**partitioned_settings(rate, t), "max_wait_s": args.max_wait_s, **marks, **variant},
            )
            t1 = time.time()
            said = lambda line, at=f"rate {rate:g} {label}": progress(f"{at}: {line}")  # noqa: E731
            jobs.ingest(spark, cfg, run, progress=said)
            spark_jobs, commits = jobs_started(spark), delta_commits(cfg.warehouse_path)
            summary = jobs.load(spark, cfg, run, strategy=strategy, progress=said)
            spark_jobs, commits = jobs_started(spark) - spark_jobs, delta_commits(cfg.warehouse_path) - commits
            wall = time.time() - t1
            where = f"run_key = '{run.run_key}'"
            metrics = whole_batches(read(spark, cfg, "join_metrics").where(where).collect(), summary)
            outcomes = read(spark, cfg, "outcome_log").where(where).select("batch_index", "arrival_ts").collect()
            updates = sum(m.updates_in for m in metrics)
            counts = {int(r[0]): int(r[1]) for r in
                      read(spark, cfg, "ingested_updates").where(where).groupBy("batch_index").count().collect()}
            groups = load_batches(strategy, counts, cfg)  # the loader's plan, recomputed
            row = {
                "updates": updates,
                "outcomes": summary["outcomes"],
                "outcome_digest": outcome_digest(spark, cfg, run.run_key),
                "wall_seconds": wall,
                "capacity_updates_per_s": updates / max(sum(m.duration_s for m in metrics), 1e-9),
                "keymap_bytes_read": sum(m.keymap_bytes_read for m in metrics),
                "keymap_bytes_per_1000_updates": 1000 * sum(m.keymap_bytes_read for m in metrics) / max(updates, 1),
                "probes": sum(m.segments_probed for m in metrics),
                "batches": len(metrics),
                # The load's whole cost in Spark jobs and Delta commits (start-up and flush included),
                # per step of the run (benchmarks.batch_jobs measures the steady state alone).
                "spark_jobs_per_batch": spark_jobs / max(len(metrics), 1),
                "delta_commits_per_batch": commits / max(len(metrics), 1),
                # Per batch, in commit order: whether batch times drift over a long run.
                "per_batch": [
                    {"index": m.batch_index, "updates": m.updates_in, "probes": m.segments_probed,
                     "wait_buffer_tuples": m.wait_buffer_tuples, "keymap_bytes_read": m.keymap_bytes_read,
                     "admitted": m.segments_admitted, "evicted": m.segments_evicted,
                     "resident_bytes": m.resident_bytes, "duration_s": round(m.duration_s, 2)}
                    for m in sorted(metrics, key=lambda r: r.batch_seq)
                ],
                "keymap_files_before": key_map_files[kind],
                # Files the run left per table: small files and deletion vectors accumulate per MERGE.
                "files_after": {
                    table: table_files(spark, cfg, table) for table in ("key_map", "customer_current", "batch_ledger")
                },
                "block_batches": sum(len(g) > 1 for g in groups),
                **replay(metrics, outcomes, run, t, {g[0]: g[-1] for g in groups}),
            }
            row.update(cost_model(row, t))
            if registry.spec(strategy).layout is not None:  # a strategy that fetches segments
                layout = load_layout(cfg)
                seg = segment_column(layout)
                rows = (
                    read(spark, cfg, "ingested_updates").where(where)
                    .select(((F.unix_timestamp("arrival_ts") - int(run.start.timestamp())) / t).cast("int").alias("b"),
                            seg(F.col("source_id"), F.col("natural_key")).alias("s"))
                    .distinct().collect()
                )
                batches: dict[int, list[int]] = {}
                for r in rows:
                    batches.setdefault(r.b, []).append(r.s)
                sizes = keymap_segment_sizes(spark, seeds[kind])  # as the policy counts them
                row["belady_fetches"] = belady_fetches([batches[b] for b in sorted(batches)], sizes, memory_budget)
                row["fetches_over_belady"] = row["probes"] / max(row["belady_fetches"], 1)
            row["settings"] = {"max_wait_s": cfg.max_wait_s, "h_mark": cfg.h_mark, "l_mark": cfg.l_mark, "k": cfg.k,
                               "deletion_vectors": cfg.deletion_vectors}
            per_rate[label] = row
            progress(f"rate {rate:g} {label}: {updates} updates in {wall:.0f} s; avg delay {row['avg_delay_s']:.1f} s, "
                     f"{row['keymap_bytes_per_1000_updates'] / 1e6:.2f} MB/1000 updates, "
                     f"{'sustained' if row['sustained'] else 'NOT sustained'}")
            shutil.rmtree(work / name, ignore_errors=True)
            per_rate["identical_outcomes"] = identical_outcomes(per_rate)
            results[f"{rate:g}"] = per_rate
            # The report so far after every run: a long run stopped midway keeps what it measured.
            write_so_far(complete=False)

    report = write_so_far(complete=True)
    print(json.dumps(report["targets"], indent=1))
    spark.stop()
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    differing = [rate for rate, per in results.items() if not per["identical_outcomes"]]
    if differing:
        raise SystemExit(f"the strategies decided differently at rate(s) {', '.join(differing)}: see outcome_digest in the report")


if __name__ == "__main__":
    main()
