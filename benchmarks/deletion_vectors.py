"""What deletion vectors save on the loader's MERGE into ``customer_current``, side by side in one run.

    .venv/bin/python -m benchmarks.deletion_vectors               # about 20 minutes on 2 cores (--batches 0: about 5)
    .venv/bin/python -m benchmarks.deletion_vectors --rows 4000000 --changes 5000

A ``customer_current`` table (the warehouse's schema, unpartitioned, one row per surrogate key)
and one batch of changes: updates of existing keys spread over the whole table, as a stream's
cold tail gives, and new keys. The loader's MERGE (``etl.io.delta_merges``: keyed by ``surrogate_key``,
guarded by ``updated_batch_seq``) runs on fresh copies of the table with and without
``delta.enableDeletionVectors``, alternately, ``--repeats`` times each. Without deletion vectors
Delta rewrites every file holding a changed row (with keys spread out: nearly all of the table);
with them it writes the changed rows and a small vector per touched file. Reports the median
seconds of each, the bytes written, their ratios, and checks both give the same table.

Then the sustained part: ``--batches`` successive MERGEs into one table per variant (rewrite,
deletion vectors, deletion vectors with Delta's auto compaction), each batch's updates drawn at
random from the table. Reports the MERGE times, the files left and the time of a full read: what
the small files and old row versions that deletion vectors leave behind cost later."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from benchmarks.measures import scratch_spark
from etl.io.tables import DELETION_VECTORS
from etl.io.delta_merges import CUSTOMER_CURRENT_MERGE_CONDITION
from warehouse.schemas import CUSTOMER_CURRENT

AUTO_COMPACT = "delta.autoOptimize.autoCompact"  # measured here, not set by the product (docs/benchmark.md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=16, help="data files the table starts with")
    ap.add_argument("--changes", type=int, default=2000, help="changed rows in the batch (a quarter of them new)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=40, help="successive MERGEs of the sustained part (0: skip it)")
    ap.add_argument("--out", default="docs/results/deletion_vectors.json")
    args = ap.parse_args()
    work, spark = scratch_spark("dv")
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    def current_like(ids, batch_seq):
        return ids.select(
            F.col("id").alias("surrogate_key"),
            (F.col("id") % 4).cast("string").alias("source_id"),
            F.format_string("K%09d", F.col("id")).alias("natural_key"),
            F.format_string("customer %d", F.col("id")).alias("name"),
            F.format_string("c%d@example.com", F.col("id")).alias("email"),
            F.element_at(F.array(*[F.lit(c) for c in ("Dublin", "Lisbon", "Oslo", "Riga")]),
                         (F.col("id") % 4 + 1).cast("int")).alias("city"),
            ((F.col("id") * 7919) % 1_000_000 / 100).cast("decimal(18,2)").alias("balance"),
            F.lit(False).alias("is_deleted"),
            F.sha2(F.concat(F.col("id").cast("string"), F.lit(batch_seq)), 256).alias("row_hash"),
            F.lit(batch_seq).cast("long").alias("last_source_seq"),
            F.timestamp_seconds(F.lit(1_790_000_000 + batch_seq)).alias("event_ts"),
            F.timestamp_seconds(F.lit(1_790_000_000 + batch_seq)).alias("arrival_ts"),
            F.lit(batch_seq).cast("long").alias("updated_batch_seq"),
        )

    base = str(work / "base")
    print(f"[dv] writing {args.rows:,} rows in {args.files} files", file=sys.stderr, flush=True)
    (current_like(spark.range(args.rows), 1).select(CUSTOMER_CURRENT.fieldNames())
     .repartition(args.files).write.format("delta").save(base))
    table_bytes = sum(p.stat().st_size for p in Path(base).rglob("*.parquet"))
    # Changes: existing keys spread evenly over the key range (so over every file), and new keys.
    new = args.changes // 4
    step = args.rows // (args.changes - new)
    changes = current_like(
        spark.range(0, args.rows, step).limit(args.changes - new).unionByName(spark.range(args.rows, args.rows + new)), 2
    ).select(CUSTOMER_CURRENT.fieldNames()).cache()
    changes.count()

    def written_bytes(path, before):
        return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and "_delta_log" not in p.parts
                   and str(p) not in before)

    names = ("deletion vectors", "rewrite files")
    times: dict[str, list[float]] = {n: [] for n in names}
    written: dict[str, list[int]] = {n: [] for n in names}
    tables = {}
    for rep in range(args.repeats):
        for name in names if rep % 2 == 0 else tuple(reversed(names)):
            path = str(work / f"copy-{rep}-{name.replace(' ', '_')}")
            shutil.copytree(base, path)
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                      f"('{DELETION_VECTORS}' = '{str(name == 'deletion vectors').lower()}')")
            before = {str(p) for p in Path(path).rglob("*")}
            t0 = time.perf_counter()
            (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("s"), CUSTOMER_CURRENT_MERGE_CONDITION)
             .whenMatchedUpdateAll(condition="t.updated_batch_seq < s.updated_batch_seq")
             .whenNotMatchedInsertAll().execute())
            times[name].append(time.perf_counter() - t0)
            written[name].append(written_bytes(path, before))
            print(f"[dv] {name}: {times[name][-1]:.2f} s, {written[name][-1]:,} bytes written", file=sys.stderr, flush=True)
            if rep == 0:
                tables[name] = spark.read.format("delta").load(path)
    a, b = (tables[n] for n in names)
    same = a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0 and a.count() == args.rows + new

    # Sustained: many batches into one table. Deletion vectors leave new small files and old row
    # versions behind; this shows what that costs later MERGEs and a full read, and what Delta's
    # auto compaction (after a commit, a partition's small files are compacted) gives back.
    variants = {
        "rewrite files": {DELETION_VECTORS: "false"},
        "deletion vectors": {DELETION_VECTORS: "true"},
        "deletion vectors + auto compaction": {DELETION_VECTORS: "true", AUTO_COMPACT: "true"},
    }
    sustained = {}
    for name, props in variants.items() if args.batches else ():
        path = str(work / f"sustained-{name.replace(' ', '_').replace('+', 'and')}")
        shutil.copytree(base, path)
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ("
                  + ", ".join(f"'{k}' = '{v}'" for k, v in props.items()) + ")")
        per_batch = []
        for i in range(args.batches):
            ids = spark.range(args.changes - new).select(
                (F.abs(F.xxhash64(F.col("id"), F.lit(i))) % args.rows).alias("id")).distinct()
            ids = ids.unionByName(spark.range(args.rows + (i + 1) * new, args.rows + (i + 2) * new))
            batch = current_like(ids, 3 + i).select(CUSTOMER_CURRENT.fieldNames())
            t0 = time.perf_counter()
            (DeltaTable.forPath(spark, path).alias("t").merge(batch.alias("s"), CUSTOMER_CURRENT_MERGE_CONDITION)
             .whenMatchedUpdateAll(condition="t.updated_batch_seq < s.updated_batch_seq")
             .whenNotMatchedInsertAll().execute())
            per_batch.append(time.perf_counter() - t0)
        detail = DeltaTable.forPath(spark, path).detail().first()
        reads = []
        for _ in range(3):
            t0 = time.perf_counter()
            spark.read.format("delta").load(path).agg(F.sum("balance"), F.count(F.lit(1))).collect()
            reads.append(time.perf_counter() - t0)
        sustained[name] = {
            "merge_seconds": per_batch, "total_merge_seconds": sum(per_batch),
            "median_merge_seconds_last_10": statistics.median(per_batch[-10:]),
            "files": detail.numFiles, "bytes": detail.sizeInBytes, "median_full_read_seconds": statistics.median(reads),
        }
        print(f"[dv] sustained, {name}: {args.batches} MERGEs in {sum(per_batch):.1f} s, {detail.numFiles} files, "
              f"full read {statistics.median(reads):.2f} s", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_written = {k: statistics.median(v) for k, v in written.items()}
    report = {
        "command": "python -m benchmarks.deletion_vectors " + " ".join(sys.argv[1:]),
        "rows": args.rows, "files": args.files, "changes": args.changes, "new_keys": new,
        "table_bytes": table_bytes, "seconds": times, "median_seconds": med,
        "bytes_written": written, "median_bytes_written": med_written,
        "rewrite_over_deletion_vectors_seconds": med["rewrite files"] / med["deletion vectors"],
        "rewrite_over_deletion_vectors_bytes": med_written["rewrite files"] / max(med_written["deletion vectors"], 1),
        "identical_tables": same,
        "sustained_batches": args.batches,
        "sustained": sustained,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
