"""A partitioned step's join with the resident copy, and a commit's fold into it, at the size of the
full-size run's copy (issues 46 and 47), side by side in one session, the ways alternating:

- ``overlay`` (the product): the copy as a base and an overlay (``ResidentSet``), held by key; a
  fold rewrites the overlay only, compacted into the base every ``MAX_OVERLAY_FOLDS`` folds;
- ``whole_copy_refolded``: the same, each fold compacted at once (``max_overlay_folds=1``), so
  each step holds the whole copy again, as the product did before 2026-12-08;
- ``unpartitioned_sort_merge``: the copy as held before 2026-12-03 (a plain local checkpoint, a
  sort-merge join each time).

    .venv/bin/python -m benchmarks.resident_copy [--copy-rows 1300000] [--batch 28000] [--steps 10] \
        [--rounds 3] [--ways overlay,whole_copy_refolded] [--out docs/results/resident_overlay/resident_copy.json]

1.3 million rows is the copy of the full-size run (20 million keys, 152 MB of join memory, about
102 segments of 19,531 rows resident); 28,000 tuples a step is a releasing step of it under the
product's marks. Per round and way, a fresh copy and ``--steps`` steps: a step's join (its rows
counted: the job that also computes the previous fold, held lazily, as the product does), then a
commit's fold of its keys. The seconds of every step, their medians and the ratios are written
to ``--out``; the ways' last joins must be equal.
"""

from __future__ import annotations

import argparse
import statistics
import time

from pyspark.sql import functions as F

from benchmarks.report import progress, write_result
from etl.core.config import EtlConfig
from etl.io.spark import build_spark_session
from etl.strategies.base import KEY, committed_lookup_columns
from etl.strategies.partitioned.resident import MAX_OVERLAY_FOLDS, ResidentSet

SEGMENT_ROWS = 19_531  # a full-size segment: 20 million keys over 1,024


class UnpartitionedCopy:
    """The copy as held before: a plain local checkpoint, joined and folded by sort-merge joins."""

    def __init__(self, rows) -> None:
        self.df = rows.localCheckpoint(eager=True)

    def join(self, tuples):
        return tuples.join(self.df.drop("segment_id"), KEY, "left")

    def fold(self, changes) -> None:
        old = self.df
        updated = changes.join(old.drop("segment_id"), KEY, "left").select(*KEY, *committed_lookup_columns(), "segment_id")
        self.df = old.join(changes.select(*KEY), KEY, "left_anti").unionByName(updated).localCheckpoint(eager=False)


WAYS = ("overlay", "whole_copy_refolded", "unpartitioned_sort_merge")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copy-rows", type=int, default=1_300_000)
    ap.add_argument("--batch", type=int, default=28_000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ways", default="overlay,whole_copy_refolded", help=f"comma-separated, of {', '.join(WAYS)}")
    ap.add_argument("--out", default="docs/results/resident_overlay/resident_copy.json")
    args = ap.parse_args()
    ways_wanted = [w.strip() for w in args.ways.split(",") if w.strip()]
    if args.copy_rows <= 0 or args.batch <= 0 or args.rounds <= 0 or args.steps <= 1:
        ap.error("--copy-rows, --batch and --rounds must be positive, --steps at least 2")
    if not ways_wanted or set(ways_wanted) - set(WAYS):
        ap.error(f"--ways: one or more of {', '.join(WAYS)}; got {args.ways!r}")

    cfg = EtlConfig(spark_shuffle_partitions=2)
    spark = build_spark_session(cfg, app_name="bench-resident-copy", master="local[2]")
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # as the commit that computes a step's join
    segments = -(-args.copy_rows // SEGMENT_ROWS)
    rows = spark.range(args.copy_rows).select(
        F.when(F.col("id") % 2 == 0, "crm").otherwise("erp").alias("source_id"),
        F.format_string("C%010d", F.col("id")).alias("natural_key"),
        F.col("id").alias("km_surrogate_key"), F.sha2(F.col("id").cast("string"), 256).alias("km_row_hash"),
        F.lit(1).cast("long").alias("km_last_source_seq"), (F.col("id") / SEGMENT_ROWS).cast("int").alias("segment_id"),
    ).localCheckpoint(eager=True)

    def batch(n: int):
        """A step's tuples: keys of the copy spread over it, one in ten unknown (a new key)."""
        spread = max(1, args.copy_rows // args.batch)
        ids = spark.range(args.batch).select(
            F.when(F.col("id") % 10 == 9, F.col("id") + args.copy_rows + n * args.batch)  # past the copy: new
            .otherwise((F.col("id") * spread + n) % args.copy_rows).alias("k"))
        return ids.select(
            F.when(F.col("k") % 2 == 0, "crm").otherwise("erp").alias("source_id"),
            F.format_string("C%010d", F.col("k")).alias("natural_key"), F.col("k").alias("source_seq"),
        ).localCheckpoint(eager=True)

    def changes_of(tuples):
        """A commit's key_map changes of the step's keys (the new ones in the copy's first segment)."""
        return tuples.select(*KEY, (F.col("source_seq") + 1).alias("surrogate_key"), F.lit("changed").alias("applied_row_hash"),
                             F.col("source_seq").alias("max_source_seq"),
                             F.when(F.col("source_seq") < args.copy_rows, (F.col("source_seq") / SEGMENT_ROWS).cast("int"))
                             .otherwise(0).alias("segment_id")).localCheckpoint(eager=True)

    def resident(max_overlay_folds: int):
        copy = ResidentSet(lambda segs: rows.where(F.col("segment_id").isin(segs)), max_overlay_folds=max_overlay_folds)
        copy.sync(set(range(segments)))
        return copy

    make = {"overlay": lambda: resident(MAX_OVERLAY_FOLDS), "whole_copy_refolded": lambda: resident(1),
            "unpartitioned_sort_merge": lambda: UnpartitionedCopy(rows)}
    batches = [batch(n) for n in range(args.steps + 1)]
    changes = [changes_of(b) for b in batches]
    seconds: dict[str, list[float]] = {w: [] for w in ways_wanted}
    for n in range(args.rounds):
        got = {}
        for way in (ways_wanted if n % 2 == 0 else list(reversed(ways_wanted))):
            copy = make[way]()
            for step in range(args.steps):
                t = time.time()
                copy.join(batches[step]).count()
                copy.fold(changes[step])
                seconds[way].append(time.time() - t)
            got[way] = sorted(copy.join(batches[args.steps]).collect())
        if any(got[w] != got[ways_wanted[0]] for w in ways_wanted):
            raise SystemExit(f"round {n}: the ways joined different rows")
        progress(f"round {n + 1}: " + ", ".join(
            f"{w} median step {statistics.median(s[-args.steps:]):.2f} s" for w, s in seconds.items()))
    medians = {w: round(statistics.median(s), 3) for w, s in seconds.items()}
    first = ways_wanted[0]
    write_result(args.out, "benchmarks.resident_copy", {
        "copy_rows": args.copy_rows, "batch": args.batch, "steps": args.steps, "rounds": args.rounds,
        "max_overlay_folds": MAX_OVERLAY_FOLDS,
        "seconds_a_step_join_and_fold": {w: [round(x, 3) for x in s] for w, s in seconds.items()},
        "median_step_seconds": medians,
        f"over_{first}": {w: round(medians[w] / medians[first], 3) for w in ways_wanted},
    })
    progress(f"median step {medians}; written to {args.out}")
    spark.stop()


if __name__ == "__main__":
    main()
