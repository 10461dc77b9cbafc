"""All four join strategies side by side in Spark, at several offered rates, on the same data.

    .venv/bin/python benchmarks/strategies.py --size small        # about 30 minutes on 2 cores
    .venv/bin/python benchmarks/strategies.py --size medium       # ten times small's key_map
    .venv/bin/python benchmarks/strategies.py --size full         # 20 million keys: hours, bigger machine

1. Seed a warehouse with most keys of the domain (a uniform stream of 1.2x the domain, loaded
   by ``native`` in the range layout; at full size, or with ``--seed direct``, one bulk write of
   half the domain's ``(source, key)`` pairs: ``seed_direct``), and, when ``partitioned-hash``
   runs, a copy of it laid out by hash (the maintenance ``relayout``); ``key_map`` is ten times
   the join-memory budget.
2. Per offered rate, one skewed, bursty stream (PQRS 0.6/0.1/0.25/0.05, b = 0.6) of ``minutes``.
3. Each strategy loads it from a copy of the same seeded warehouse with the same micro-batch
   trigger interval; the outcomes must be identical.
4. Real-time replay: batch i's arrivals are complete at ``start + (i+1) * T``; it starts then or
   when batch i-1 is done, whichever is later, and takes its measured ``duration_s``. An
   update's production delay is the finish of the batch that committed its outcome (from
   ``outcome_log``) minus its ``arrival_ts``. A rate is sustained when the replay's lag does not
   grow (the run's batches take at most the run's length).
5. Reports per strategy and rate: capacity (updates per second of batch time), sustained or not,
   average and p99 production delay, bytes of ``key_map`` read per 1,000 updates, probes, and for
   the partitioned strategies the offline optimum of segment fetches (Belady) on the same trace
   and memory. JSON + PNG under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from etl import jobs  # noqa: E402
from etl.batch_cost import MIN_BATCHES, fit_batch_cost, steps  # noqa: E402
from etl.config import EtlConfig  # noqa: E402
from etl.generator import StreamSpec, generate_stream  # noqa: E402
from etl.interval import Interval  # noqa: E402
from etl.maintenance import relayout  # noqa: E402
from etl.load import load_batches  # noqa: E402
from etl.segments import load_layout, segment_column  # noqa: E402
from etl.simulator.belady import belady_fetches  # noqa: E402
from etl.spark import build_spark_session  # noqa: E402
from etl.tables import read  # noqa: E402

STRATEGIES = ("native", "meshjoin", "partitioned-range", "partitioned-hash")
# Settings a run of --strategies may override, as ``strategy:name=value`` (a variant run beside the
# plain one on the same stream and seed, e.g. ``partitioned-range:max_wait_s=180``).
VARIANT_SETTINGS = {"max_wait_s": float, "h_mark": int}


def parse_run(spec: str) -> tuple[str, dict]:
    """``strategy[:name=value]`` -> (strategy, settings), with a clear error on anything else."""
    strategy, _, setting = spec.strip().partition(":")
    if strategy not in STRATEGIES:
        raise SystemExit(f"unknown strategy {strategy!r} in --strategies; choose from {', '.join(STRATEGIES)}")
    if not setting:
        return strategy, {}
    name, eq, value = setting.partition("=")
    if not eq or name not in VARIANT_SETTINGS:
        raise SystemExit(f"bad run {spec!r}: write strategy:name=value with name one of {', '.join(VARIANT_SETTINGS)}")
    try:
        return strategy, {name: VARIANT_SETTINGS[name](value)}
    except ValueError:
        raise SystemExit(f"bad run {spec!r}: {value!r} is not a valid {VARIANT_SETTINGS[name].__name__}") from None


def run_labels(per_rate: dict) -> list[str]:
    """The runs of one rate in the report (strategy names and variants), plain strategies first."""
    labels = [k for k in per_rate if k != "identical_outcomes"]
    return sorted(labels, key=lambda k: (STRATEGIES.index(k.partition(":")[0]), k))


def report_labels(results: dict) -> list[str]:
    """The runs of any rate in the report's ``results``, in ``run_labels``'s order."""
    return run_labels({s: None for per in results.values() for s in run_labels(per)})


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


def seed_direct(spark, cfg: EtlConfig, keys: int, run: Interval, presence: float = 0.5, sources=("crm", "web")) -> int:
    """Write a seeded warehouse's ``key_map``, ``customer_current`` and ledger row directly, as one
    bulk load: the stream path (1.2x the domain as JSON lines through ingest and ``native``) would
    take hours at 20 million keys on 2 cores. Each ``(source, natural key)`` of the domain is
    present with probability ``presence`` (a fixed hash, so every run seeds the same rows) with
    the generator's ``initial_content``, so the stream's "unchanged" updates are duplicates here
    too. Returns the rows seeded."""
    from pyspark.sql import functions as F

    from etl.generator import CITIES
    from etl.ingest import row_hash
    from etl.load import FLUSH_STEP
    from etl.tables import append_once, ensure_tables
    from warehouse.schemas import TABLES

    ensure_tables(spark, cfg)
    seg = segment_column(load_layout(cfg, "range"))
    n = F.col("id")
    parts = []
    for i, source in enumerate(sources):
        parts.append(spark.range(keys).select(
            F.lit(source).alias("source_id"), n.cast("string").alias("natural_key"),
            (n * len(sources) + i + 1).alias("surrogate_key"), F.lit("upsert").alias("op"),
            F.format_string("Customer %s-%d", F.lit(source), n).alias("name"),
            F.format_string("c%d@%s.example", n, F.lit(source)).alias("email"),
            F.element_at(F.array(*map(F.lit, CITIES)), ((n * 7 + len(source)) % len(CITIES) + 1).cast("int")).alias("city"),
            (((n * 37) % 100000) / 10).cast("decimal(18,2)").alias("balance"),
        ))
    rows = parts[0]
    for p in parts[1:]:
        rows = rows.unionByName(p)
    ts = F.lit(run.start.replace(tzinfo=None)).cast("timestamp")
    rows = (
        rows.where(F.pmod(F.xxhash64("source_id", "natural_key"), F.lit(1_000_000)) < int(presence * 1_000_000))
        .withColumn("row_hash", row_hash())
        .withColumn("segment_id", seg(F.col("source_id"), F.col("natural_key")))
        .withColumn("last_source_seq", F.lit(0).cast("long"))
        .withColumn("first_arrival_ts", ts).withColumn("last_arrival_ts", ts).withColumn("event_ts", ts)
        .withColumn("arrival_ts", ts).withColumn("created_batch_seq", F.lit(1).cast("long"))
        .withColumn("updated_batch_seq", F.lit(1).cast("long")).withColumn("is_deleted", F.lit(False))
    )
    append_once(rows.repartition(cfg.n_part, "segment_id"), cfg, "key_map", 1)
    append_once(rows, cfg, "customer_current", 1)
    seeded = read(spark, cfg, "key_map").count()
    ledger = [(run.run_key, FLUSH_STEP, 1, "seed", seeded, seeded, keys * len(sources) + 1, run.end.replace(tzinfo=None))]
    append_once(spark.createDataFrame(ledger, TABLES["batch_ledger"].schema), cfg, "batch_ledger", 1)
    return seeded


def table_files(spark, cfg: EtlConfig, table: str) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{cfg.table_path(table)}`").first().numFiles


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def keymap_segment_bytes(spark, cfg: EtlConfig) -> dict[int, int]:
    """Bytes of each key_map segment (its Delta partition's current files)."""
    from delta.tables import DeltaTable

    files = DeltaTable.forPath(spark, cfg.table_path("key_map")).toDF().inputFiles()
    sizes: dict[int, int] = {}
    for f in files:
        path = Path(f.replace("file://", "").replace("file:", ""))
        seg = int(next(p for p in path.parts if p.startswith("segment_id=")).split("=")[1])
        sizes[seg] = sizes.get(seg, 0) + path.stat().st_size
    return sizes


def replay(metrics, outcomes, interval: Interval, t: int, last_window: dict[int, int] | None = None) -> dict:
    """Delays and lag of the run as if each batch started when its arrivals were complete.
    ``last_window``: batch index -> its last arrival window, for batches spanning several windows
    (block granularity names a batch by its first window); others span their own window."""
    import numpy as np

    windows = int((interval.end - interval.start).total_seconds() // t)
    last_window = last_window or {}
    finish: dict[int, float] = {}
    clock = 0.0
    lags = []
    for m in sorted(metrics, key=lambda r: (r.batch_index < 0, r.batch_index, r.batch_seq)):
        last = last_window.get(m.batch_index, m.batch_index) if m.batch_index >= 0 else windows
        ready = min(last + 1, windows) * t
        clock = max(clock, ready) + m.duration_s
        finish[m.batch_index] = clock
        lags.append(clock - ready)
    base = interval.start.timestamp()
    delays = np.array([finish[o.batch_index] - (o.arrival_ts.timestamp() - base) for o in outcomes])
    busy = sum(m.duration_s for m in metrics)
    run_len = windows * t
    return {
        "avg_delay_s": float(delays.mean()) if len(delays) else math.nan,
        "p99_delay_s": float(np.percentile(delays, 99)) if len(delays) else math.nan,
        "batch_seconds": busy,
        "final_lag_s": lags[-1] if lags else 0.0,
        "sustained": busy <= run_len,
    }


def cost_model(row: dict, t: int) -> dict:
    """The per-batch cost fitted on the run's batches, and the rate it predicts sustainable at the
    trigger ``t`` (the measured capacity at one offered rate tracks that rate; etl/batch_cost.py)."""
    batches = steps(row.get("per_batch", []))
    if len(batches) < MIN_BATCHES:
        return {}
    cost = fit_batch_cost(row["per_batch"])
    probes_per_update = sum(b["probes"] for b in batches) / max(sum(b["updates"] for b in batches), 1)
    return {
        "batch_cost": cost.as_dict(),
        # One offered rate identifies the terms poorly (two medium runs of the same stream gave 86
        # and 187 updates/s for range): a diagnostic, not a capacity; measure several rates.
        "extrapolated_sustainable_rate": cost.sustainable_rate(t, probes_per_update, batch_index=batches[-1]["index"]),
    }


def summarise(report: dict) -> None:
    """Cross-strategy figures of ``report`` (from its results), in place."""
    results = report["results"]
    strategies = report_labels(results)

    def ratio(rate_key, a, b, metric):
        r = results[rate_key]
        return r[a][metric] / r[b][metric] if a in r and b in r and r[b][metric] else None

    sustained = {s: max([float(k) for k, v in results.items() if s in v and v[s]["sustained"]], default=0.0) for s in strategies}
    capacity = {s: max(v[s]["capacity_updates_per_s"] for v in results.values() if s in v) for s in strategies}
    report["targets"] = {
        rk: {
            # One entry per range run (the plain strategy and any variants of it).
            label: {
                "delay_over_meshjoin": ratio(rk, label, "meshjoin", "avg_delay_s"),
                "bytes_over_native": ratio(rk, label, "native", "keymap_bytes_per_1000_updates"),
                "fetches_over_belady": results[rk][label].get("fetches_over_belady"),
                "capacity_over_native": ratio(rk, label, "native", "capacity_updates_per_s"),
            }
            for label in run_labels(results[rk]) if label.partition(":")[0] == "partitioned-range"
        }
        for rk in results
    }
    report["highest_sustained_rate"] = sustained
    report["capacity_updates_per_s"] = capacity
    # None unless both ran: a ratio against a strategy that did not run is no measurement.
    both = capacity.get("partitioned-range") and capacity.get("native")
    report["capacity_range_over_native"] = capacity["partitioned-range"] / capacity["native"] if both else None


def write_report(report: dict, json_path: Path) -> None:
    """The report's JSON at ``json_path``, its plot and Markdown table beside it (same stem)."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    plot(report, json_path.with_suffix(".png"))
    json_path.with_suffix(".md").write_text(table(report))


def refit(path: Path) -> None:
    """Add the cost model to a report written before it existed (its ``per_batch`` series is
    needed), and rewrite the report's JSON, Markdown and plot beside it."""
    report = json.loads(path.read_text())
    for per in report["results"].values():
        for s in run_labels(per):
            per[s].update(cost_model(per[s], report["micro_batch_seconds"]))
    summarise(report)
    write_report(report, path)
    fitted = [f"{s} at {rk}/s: {per[s]['batch_cost']}" for rk, per in report["results"].items() for s in run_labels(per)
              if "batch_cost" in per[s]]
    progress(f"refitted {path}: " + (", ".join(fitted) or f"no run has a per_batch series of {MIN_BATCHES} batches or more"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--rates", default="", help="comma-separated offered rates (default: the size's)")
    ap.add_argument("--minutes", type=int, default=0, help="minutes of stream per rate (default: the size's)")
    ap.add_argument("--seed", choices=("stream", "direct"), default="",
                    help="seed key_map through a loaded stream, or by one bulk write (default: direct for full, else stream)")
    ap.add_argument("--max-wait-s", type=float, default=0.0,
                    help="the partitioned strategies' wait bound max_wait_s (default 0: none, the thesis's policy)")
    ap.add_argument("--seed-only", action="store_true",
                    help="seed the range-layout warehouse under --work and stop; later runs with that --work reuse it")
    ap.add_argument("--trigger", type=int, default=0,
                    help="micro-batch trigger interval in seconds, the same for every strategy (default: the size's)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES),
                    help="comma-separated runs: a strategy, or strategy:name=value (max_wait_s, h_mark) for a variant beside it")
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
        warehouse_root=str(work / "seed-range"), landing_root=str(work / "landing-seed"), gx_root=str(work / "gx"),
        runs_root=str(work / "runs-seed"), spark_shuffle_partitions=2, key_domain=size["keys"], n_part=size["n_part"],
        micro_batch_seconds=t, n_invoke=200, wait_buffer_tuples=2000, tau=500, k=k, d=1,
    )
    spark = build_spark_session(base, app_name="bench-strategies", master="local[2]")
    seed_run = Interval(T0, T0 + timedelta(minutes=5))
    seed_mode = args.seed or size.get("seed", "stream")
    layouts = ["range"] + (["hash"] if "partitioned-hash" in strategies and not args.seed_only else [])
    progress(f"seeding {size['keys']} keys ({seed_mode}; {' and '.join(layouts)} layouts) under {work}")
    seeds = {"range": base.replace(warehouse_root=str(work / "seed-range"), micro_batch_seconds=300)}
    marker = work / "seed-range.json"  # a finished seed under --work is reused (seed once, run many times)
    wanted = {"keys": size["keys"], "n_part": size["n_part"], "seed": seed_mode}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        progress(f"reusing the seeded warehouse {seeds['range'].warehouse_path}")
    else:
        marker.unlink(missing_ok=True)
        shutil.rmtree(seeds["range"].warehouse_path, ignore_errors=True)
        if seed_mode == "direct":
            rows = seed_direct(spark, seeds["range"], size["keys"], seed_run)
            progress(f"seeded {rows} key_map rows directly in {time.time() - started:.0f} s")
        else:
            shutil.rmtree(base.landing_path, ignore_errors=True)
            generate_stream(
                StreamSpec(start=seed_run.start, duration_s=300, rate=size["keys"] / 300 * 1.2, key_domain=size["keys"],
                           p=0.25, q=0.25, r=0.25, s=0.25, b=0.5, new_key_share=0, duplicate_share=0,
                           unchanged_share=0, malformed_share=0, delete_share=0, seed=1),
                base.landing_path,
            )
            load_layout(seeds["range"], "range")
            jobs.ingest(spark, seeds["range"], seed_run)
            jobs.load(spark, seeds["range"], seed_run, strategy="native")
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
    memory_budget = min(key_map_bytes.values()) // 10
    progress(f"key_map: {key_map_bytes} bytes; join memory budget {memory_budget} bytes (1/10)")

    results: dict[str, dict] = {}

    def write_so_far(complete: bool) -> dict:
        report = {
            "command": "python benchmarks/strategies.py " + " ".join(a for a in sys.argv[1:]),
            "size": args.size, "keys": size["keys"], "rates": rates, "minutes": minutes, "micro_batch_seconds": t,
            "seed": seed_mode, "meshjoin_k": k, "partitioned": "wait_buffer_tuples = rate x trigger; n_invoke = wait_buffer_tuples / 8",
            "key_map_bytes": key_map_bytes, "memory_budget": memory_budget,
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
            StreamSpec(start=run.start, duration_s=60 * minutes, rate=rate, key_domain=size["keys"],
                       p=0.6, q=0.1, r=0.25, s=0.05, b=0.6, seed=2),
            landing,
        )
        per_rate = {}
        for label, (strategy, variant) in runs.items():
            kind = "hash" if strategy == "partitioned-hash" else "range"
            name = re.sub(r"[^A-Za-z0-9.-]+", "-", label) + f"-{rate:g}"
            for leftover in (work / name, work / f"runs-{name}"):  # of an earlier run under this --work
                shutil.rmtree(leftover, ignore_errors=True)
            shutil.copytree(seeds[kind].warehouse_path, work / name)
            # The partitioned join's wait buffer holds one trigger interval of arrivals; a segment
            # is probed once it has an eighth of that pending (the thesis's 3000 of 65536 is 1/22).
            wait_buffer = max(100, int(rate * t))
            # The granularity marks keep the product's defaults. Scaled with the rate (h_mark = 4 rate T,
            # tried 2026-11-24 at full size) they kept range in one-window batches that did not keep
            # up (166 updates/s of capacity at 200/s offered): block granularity is what sustains it.
            marks = dict(h_mark=args.h_mark) if args.h_mark else {}
            cfg = seeds[kind].replace(
                warehouse_root=str(work / name), runs_root=str(work / f"runs-{name}"), landing_root=str(landing),
                micro_batch_seconds=t, memory_budget=memory_budget, wait_buffer_tuples=wait_buffer,
                n_invoke=max(10, wait_buffer // 8), tau=max(50, wait_buffer // 2),
                **{"max_wait_s": args.max_wait_s, **marks, **variant},
            )
            t1 = time.time()
            jobs.ingest(spark, cfg, run)
            summary = jobs.load(spark, cfg, run, strategy=strategy)
            wall = time.time() - t1
            where = f"run_key = '{run.run_key}'"
            metrics = read(spark, cfg, "join_metrics").where(where).collect()
            outcomes = read(spark, cfg, "outcome_log").where(where).select("batch_index", "arrival_ts").collect()
            updates = sum(m.updates_in for m in metrics)
            counts = {int(r[0]): int(r[1]) for r in
                      read(spark, cfg, "ingested_updates").where(where).groupBy("batch_index").count().collect()}
            groups = load_batches(strategy, counts, cfg)  # the loader's plan, recomputed
            row = {
                "updates": updates,
                "outcomes": summary["outcomes"],
                "wall_seconds": wall,
                "capacity_updates_per_s": updates / max(sum(m.duration_s for m in metrics), 1e-9),
                "keymap_bytes_read": sum(m.keymap_bytes_read for m in metrics),
                "keymap_bytes_per_1000_updates": 1000 * sum(m.keymap_bytes_read for m in metrics) / max(updates, 1),
                "probes": sum(m.segments_probed for m in metrics),
                "batches": len(metrics),
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
                    table: table_files(spark, cfg, table) for table in ("key_map", "customer_current", "wait_buffer", "outcome_log")
                },
                "block_batches": sum(len(g) > 1 for g in groups),
                **replay(metrics, outcomes, run, t, {g[0]: g[-1] for g in groups}),
            }
            row.update(cost_model(row, t))
            if strategy.startswith("partitioned"):
                layout = load_layout(cfg)
                seg = segment_column(layout)
                from pyspark.sql import functions as F

                rows = (
                    read(spark, cfg, "ingested_updates").where(where)
                    .select(((F.unix_timestamp("arrival_ts") - int(run.start.timestamp())) / t).cast("int").alias("b"),
                            seg(F.col("source_id"), F.col("natural_key")).alias("s"))
                    .distinct().collect()
                )
                batches: dict[int, list[int]] = {}
                for r in rows:
                    batches.setdefault(r.b, []).append(r.s)
                sizes = keymap_segment_bytes(spark, seeds[kind])
                row["belady_fetches"] = belady_fetches([batches[b] for b in sorted(batches)], sizes, memory_budget)
                row["fetches_over_belady"] = row["probes"] / max(row["belady_fetches"], 1)
            row["settings"] = {"max_wait_s": cfg.max_wait_s, "h_mark": cfg.h_mark, "l_mark": cfg.l_mark, "k": cfg.k}
            per_rate[label] = row
            progress(f"rate {rate:g} {label}: {updates} updates in {wall:.0f} s; avg delay {row['avg_delay_s']:.1f} s, "
                     f"{row['keymap_bytes_per_1000_updates'] / 1e6:.2f} MB/1000 updates, "
                     f"{'sustained' if row['sustained'] else 'NOT sustained'}")
            shutil.rmtree(work / name, ignore_errors=True)
            outcomes_set = {json.dumps(per_rate[s]["outcomes"], sort_keys=True) for s in run_labels(per_rate)}
            per_rate["identical_outcomes"] = len(outcomes_set) == 1
            results[f"{rate:g}"] = per_rate
            # The report so far after every run: a long run stopped midway keeps what it measured.
            write_so_far(complete=False)

    report = write_so_far(complete=True)
    print(json.dumps(report["targets"], indent=1))
    spark.stop()
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


def table(report: dict) -> str:
    """The results as the Markdown table docs/benchmark.md shows."""
    lines = [
        f"`{report['command']}`: {report['keys']:,} keys, key_map {min(report['key_map_bytes'].values()):,} bytes, "
        f"join memory {report['memory_budget']:,} bytes, trigger {report['micro_batch_seconds']} s, "
        f"{report['minutes']} minutes per rate, {report['wall_seconds'] / 60:.0f} minutes in all"
        + ("." if report.get("complete", True) else " (stopped before the end: the runs below are all it finished)."),
        "",
        "| rate /s | strategy | avg delay s | p99 delay s | capacity updates/s | sustained | key_map MB / 1k updates | probes | Belady fetches |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rate, per in report["results"].items():
        for s in run_labels(per):
            r = per[s]
            if r:
                lines.append(
                    f"| {rate} | {s} | {r['avg_delay_s']:.1f} | {r['p99_delay_s']:.1f} | {r['capacity_updates_per_s']:.0f} "
                    f"| {'yes' if r['sustained'] else 'no'} | {r['keymap_bytes_per_1000_updates'] / 1e6:.2f} | {r['probes']} "
                    f"| {r.get('belady_fetches', '')} |"
                )
        lines.append(f"| {rate} | identical outcomes | {'yes' if per.get('identical_outcomes') else '**no**'} | | | | | | |")
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    rates = [float(r) for r in report["results"]]
    for s in report_labels(report["results"]):
        rows = [report["results"][f"{r:g}"].get(s) for r in rates]
        if not any(rows):
            continue
        for ax, metric, label in zip(
            axes,
            ("avg_delay_s", "keymap_bytes_per_1000_updates", "capacity_updates_per_s"),
            ("average production delay (s)", "key_map bytes read per 1,000 updates", "capacity (updates / batch second)"),
        ):
            ax.plot(rates, [r[metric] if r else math.nan for r in rows], "o-", label=s)
            ax.set_xlabel("offered rate (updates/s)")
            ax.set_ylabel(label)
            ax.set_yscale("log")
    # Below the plots, not on them: inside, it hid the highest point (MESHJOIN's delay).
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, min(len(labels), 4)), fontsize=8)
    fig.suptitle(f"Spark, {report['keys']} keys, join memory {report['memory_budget']} bytes, "
                 f"trigger {report['micro_batch_seconds']} s")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
