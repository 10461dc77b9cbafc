"""A fact stream against a large dimension: the surrogate key pipeline of papers/004 §6.1, timed
with the dimension's lookups done by each strategy.

    .venv/bin/python -m benchmarks.facts --keys 600000 --work /tmp/factswork        # medium, minutes
    .venv/bin/python -m benchmarks.facts --keys 20000000 --work /tmp/factswork-full  # full size (make benchmark-facts)

The customer dimension (the default customer, at the warehouse root) is seeded directly with
``--keys`` keys of source ``crm`` (``benchmarks.measures.seed_direct``, every key present, so no
fact names a missing one). An orders fact (``customer_key`` -> the customer's key, source ``crm``)
streams ``--minutes`` at ``--rate`` lines/s whose references are spread over the whole key domain
(``etl.generator.FactShape``). For each strategy of ``--strategies`` the same run is ingested and
loaded into a fact of its own (``orders_<strategy>``, its own dedup join always ``native``) with the
customer's lookups done by that strategy. Reported per strategy: load seconds, the lookups'
seconds, ``key_map`` bytes read and segments probed, the fact's rows, and whether every strategy
gave the same fact table; and the ratios to ``native``. Kept out of the test run."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import functions as F

from benchmarks.measures import jobs_started, keymap_segment_sizes, seed_direct, seed_marker, stored_seed
from etl import jobs
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.model import load_model
from etl.generator import StreamSpec, generate_stream
from etl.io.spark import build_spark_session
from etl.io.tables import read

T0 = datetime(2026, 11, 22, 8, 0, tzinfo=timezone.utc)
SEED_RUN = Interval(T0 - timedelta(hours=1), T0 - timedelta(minutes=55))

MODEL = """
[entities.customer]
directory = ""
sources = ["crm"]
key = {{ natural_key = "string" }}
attributes = {{ name = "string", email = "string", city = "string", balance = "decimal(18,2)" }}
join_strategy = "{strategy}"
{settings}

{facts}
"""
FACT = """
[entities.orders_{name}]
kind = "fact"
sources = ["crm"]
key = {{ order_id = "integer" }}
attributes = {{ customer_key = "string", quantity = "integer", amount = "decimal(12,2)" }}
join_strategy = "native"

[entities.orders_{name}.references.customer_sk]
dimension = "customer"
by = ["customer_key"]
"""


def model_file(work: Path, strategy: str, strategies: list[str], memory_budget: int) -> Path:
    """One model per strategy under test: the customer's lookups by ``strategy``; every strategy's
    fact declared (each has its own directory), so the customer's table has the same columns."""
    facts = "".join(FACT.format(name=s.replace("-", "_")) for s in strategies)
    settings = f"[entities.customer.settings]\nmemory_budget = {memory_budget}\n" if memory_budget else ""
    path = work / f"model-{strategy}.toml"
    path.write_text(MODEL.format(strategy=strategy, settings=settings, facts=facts))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=600_000, help="customer keys seeded (full size: 20000000)")
    parser.add_argument("--rate", type=float, default=500, help="fact lines per second")
    parser.add_argument("--minutes", type=int, default=4)
    parser.add_argument("--strategies", default="native,partitioned-range")
    parser.add_argument("--work", type=Path, required=True, help="kept between runs: the seeded dimension is reused")
    parser.add_argument("--out", type=Path, default=None, help="write facts-<keys>.json and .md here")
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    roots = {r: str(args.work / r) for r in ("warehouse", "landing", "gx", "runs", "reports")}
    base = EtlConfig(**{f"{r}_root": v for r, v in roots.items()}, spark_master="local[2]", micro_batch_seconds=60,
                     spark_shuffle_partitions=8, spark_driver_memory="8g", n_part=64)
    spark = build_spark_session(base, app_name="bench-facts", master="local[2]")
    started = time.time()

    seeded = stored_seed(args.work)
    models = {s: model_file(args.work, s, strategies, 0) for s in strategies}
    dimension = base.replace(model_file=str(models[strategies[0]]), entity="customer")
    if not seeded or seeded.get("keys") != args.keys:
        shutil.rmtree(args.work / "warehouse", ignore_errors=True)
        t = time.time()
        rows = seed_direct(spark, dimension, args.keys, SEED_RUN, presence=1.0, sources=("crm",),
                           progress=lambda line: print(line, flush=True))
        seed_marker(args.work).write_text(json.dumps({"keys": args.keys, "rows": rows, "seconds": time.time() - t}))
        print(f"seeded {rows} customer keys in {time.time() - t:.0f} s", flush=True)
    keymap_bytes = int(spark.sql(f"DESCRIBE DETAIL delta.`{dimension.table_path('key_map')}`").first().sizeInBytes)
    # As benchmarks.strategies: a tenth of key_map fits in memory, counted as the join counts it.
    budget = sum(keymap_segment_sizes(spark, dimension).values()) // 10
    models = {s: model_file(args.work, s, strategies, budget) for s in strategies}

    run = Interval(T0, T0 + timedelta(minutes=args.minutes))
    results = {}
    for s in strategies:
        cfg = base.replace(model_file=str(models[s]), entity=f"orders_{s.replace('-', '_')}")
        if not any(cfg.landing_path.rglob("*.jsonl")):
            generate_stream(StreamSpec(start=T0, duration_s=60 * args.minutes, rate=args.rate, seed=11, key_domain=args.keys,
                                       sources=("crm",)), cfg.landing_path, entity=cfg.entity_model, model=load_model(models[s]))
        shutil.rmtree(cfg.warehouse_path, ignore_errors=True)
        shutil.rmtree(cfg.runs_path, ignore_errors=True)
        t = time.time()
        ingested = jobs.ingest(spark, cfg, run)
        ingest_s = time.time() - t
        j, t = jobs_started(spark), time.time()
        summary = jobs.load(spark, cfg, run)
        load_s = time.time() - t
        fact = read(spark, cfg, cfg.entity_model.table)
        cols = fact.drop("updated_batch_seq").columns  # an order-free digest: the sum of the row hashes
        digest = fact.select(F.sum(F.xxhash64(*cols).cast("decimal(38,0)")).alias("d")).first().d
        lookups = summary.get("reference_lookups", {}).get("customer", {})
        results[s] = {
            "ingest_s": round(ingest_s, 1), "load_s": round(load_s, 1), "spark_jobs": jobs_started(spark) - j,
            "lines": ingested.get("lines"), "fact_rows": fact.count(), "dangling": fact.where(F.col("customer_sk").isNull()).count(),
            "inferred_members": summary.get("inferred_members", {}), "lookup": lookups, "batches": summary["batches_committed"],
            "fact_digest": str(digest),
        }
        print(s, json.dumps(results[s]), flush=True)

    native = results.get("native")
    ratios = {s: {"load_s_over_native": r["load_s"] / native["load_s"],
                  "lookup_s_over_native": (r["lookup"].get("lookup_s", 0) / native["lookup"]["lookup_s"]) if native["lookup"].get("lookup_s") else None,
                  "keymap_bytes_over_native": (r["lookup"].get("keymap_bytes_read", 0) / native["lookup"]["keymap_bytes_read"])
                  if native["lookup"].get("keymap_bytes_read") else None}
              for s, r in results.items()} if native else {}
    command = "python -m benchmarks.facts " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)
    out = {"command": command, "keys": args.keys, "keymap_bytes": keymap_bytes, "memory_budget": budget, "rate": args.rate,
           "minutes": args.minutes, "results": results, "ratios": ratios,
           "same_fact_tables": len({r["fact_digest"] for r in results.values()}) == 1, "wall_seconds": round(time.time() - started)}
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"facts-{args.keys}.json").write_text(json.dumps(out, indent=1))
        lines = [f"`{command}`: {args.keys:,} customer keys (key_map {keymap_bytes:,} bytes, memory budget {budget:,}), "
                 f"{args.rate:g} order lines/s for {args.minutes} min, one load run.", "",
                 "| strategy of the lookups | load s | lookups s | key_map bytes read | segments probed | Spark jobs | fact rows | dangling | load / native |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for s, r in results.items():
            lk = r["lookup"]
            lines.append(f"| {s} | {r['load_s']} | {lk.get('lookup_s', 0):.1f} | {lk.get('keymap_bytes_read', 0):,} | "
                         f"{lk.get('segments_probed', 0)} | {r['spark_jobs']} | {r['fact_rows']} | {r['dangling']} | "
                         f"{ratios.get(s, {}).get('load_s_over_native', 0):.2f} |")
        lines.append(f"\nSame fact table from every strategy: {'yes' if out['same_fact_tables'] else 'NO'}.")
        (args.out / f"facts-{args.keys}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
