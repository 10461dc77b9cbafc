"""What naming the batch's segments in the key_map MERGE saves, side by side in one run.

    .venv/bin/python -m benchmarks.merge_pruning                 # about 5 minutes on 2 cores
    .venv/bin/python -m benchmarks.merge_pruning --rows 4000000 --segments 512

A key_map-shaped Delta table partitioned by ``segment_id``; a batch of changes (half updates of
existing keys, half new keys) in a few segments; the same MERGE with the loader's condition
(``etl.io.delta_merges.key_map_merge_condition``) and with the keys alone, alternately on fresh copies of
the table, ``--repeats`` times each. Reports the median seconds of each and their ratio, and
checks both give the same table."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from benchmarks.measures import scratch_spark
from etl.io.delta_merges import key_map_merge_condition

KEYS_ONLY = "t.source_id = s.source_id AND t.natural_key = s.natural_key"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--segments", type=int, default=256)
    ap.add_argument("--touched", type=int, default=8, help="segments the batch touches")
    ap.add_argument("--changes", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="docs/results/merge_pruning.json")
    args = ap.parse_args()
    work, spark = scratch_spark("merge")
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    def key_map_like(ids):
        return ids.select(
            (F.col("id") % 4).cast("int").alias("source_id"),
            F.format_string("K%09d", F.col("id")).alias("natural_key"),
            F.col("id").alias("surrogate_key"),
            F.sha2(F.col("id").cast("string"), 256).alias("row_hash"),
            F.col("id").alias("last_source_seq"),
            (F.col("id") % args.segments).cast("int").alias("segment_id"),
        )

    base = str(work / "base")
    print(f"[merge] writing {args.rows:,} rows in {args.segments} segments", file=sys.stderr, flush=True)
    key_map_like(spark.range(args.rows)).write.format("delta").partitionBy("segment_id").save(base)
    table_bytes = sum(p.stat().st_size for p in Path(base).rglob("*.parquet"))
    # Changes: ids whose segment is among the first `touched`; half existing, half new.
    half = args.changes // 2
    existing = spark.range(0, half * args.segments, args.segments // args.touched)
    existing = existing.where(F.col("id") % args.segments < args.touched).limit(half)
    new = spark.range(args.rows, args.rows + half * args.segments).where(F.col("id") % args.segments < args.touched).limit(half)
    changes = key_map_like(existing.unionByName(new)).withColumn("last_source_seq", F.col("last_source_seq") + 1).cache()
    changes.count()
    pruned = key_map_merge_condition(changes)

    times: dict[str, list[float]] = {"segments named": [], "keys only": []}
    tables = {}
    for rep in range(args.repeats):
        for name, condition in (("segments named", pruned), ("keys only", KEYS_ONLY)) if rep % 2 == 0 else (
            ("keys only", KEYS_ONLY), ("segments named", pruned)):
            path = str(work / f"copy-{rep}-{name.replace(' ', '_')}")
            shutil.copytree(base, path)
            t0 = time.perf_counter()
            (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("s"), condition)
             .whenMatchedUpdate(set={"last_source_seq": "s.last_source_seq"}).whenNotMatchedInsertAll().execute())
            times[name].append(time.perf_counter() - t0)
            print(f"[merge] {name}: {times[name][-1]:.2f} s", file=sys.stderr, flush=True)
            if rep == 0:
                tables[name] = spark.read.format("delta").load(path)
    same = tables["segments named"].exceptAll(tables["keys only"]).count() == 0 and \
        tables["keys only"].exceptAll(tables["segments named"]).count() == 0
    med = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "command": "python -m benchmarks.merge_pruning " + " ".join(sys.argv[1:]),
        "rows": args.rows, "segments": args.segments, "touched_segments": args.touched, "changes": args.changes,
        "table_bytes": table_bytes, "seconds": times, "median_seconds": med,
        "keys_only_over_segments_named": med["keys only"] / med["segments named"],
        "identical_tables": same,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
