"""A partitioned step's join with the resident copy, and a commit's fold into it, at the size of the
full-size run's copy (issue 47): the copy as the product holds it (``ResidentSet``: partitioned by
the key, joined and folded by hash joins built on the small side) beside the copy as it was held
before (unpartitioned, a sort-merge join each time), side by side in one session, alternating.

    .venv/bin/python -m benchmarks.resident_copy [--copy-rows 1300000] [--batch 37000] [--rounds 5] \
        [--out docs/results/resident_copy.json]

1.3 million rows is the copy of the full-size run (20 million keys, 152 MB of join memory, about
102 segments of 19,531 rows resident); 37,000 tuples a step of it once behind. Per round and way:
a step's join (its rows counted), a commit's fold of the step's keys, and the next step's join,
which computes the fold (held lazily, as the product does). The seconds of both steps, their
medians and the ratio are written to ``--out``; the two ways' joined rows must be equal.
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
from etl.strategies.partitioned.resident import ResidentSet

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copy-rows", type=int, default=1_300_000)
    ap.add_argument("--batch", type=int, default=37_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="docs/results/resident_copy.json")
    args = ap.parse_args()
    if args.copy_rows <= 0 or args.batch <= 0 or args.rounds <= 0:
        ap.error("--copy-rows, --batch and --rounds must be positive")

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
        return tuples.select(*KEY, F.lit(-1).cast("long").alias("surrogate_key"), F.lit("changed").alias("applied_row_hash"),
                             F.col("source_seq").alias("max_source_seq"),
                             F.lit(0).alias("segment_id")).localCheckpoint(eager=True)

    def held_by_key():
        copy = ResidentSet(lambda segs: rows.where(F.col("segment_id").isin(segs)))
        copy.sync(set(range(segments)))
        return copy

    ways = {"held_by_key": held_by_key, "unpartitioned_sort_merge": lambda: UnpartitionedCopy(rows)}
    seconds: dict[str, list[float]] = {w: [] for w in ways}
    for n in range(args.rounds):
        first, second = batch(2 * n), batch(2 * n + 1)
        changes = changes_of(first)
        got = {}
        for way in (list(ways) if n % 2 == 0 else list(reversed(ways))):
            copy = ways[way]()
            t = time.time()
            copy.join(first).count()
            copy.fold(changes)
            got[way] = sorted(copy.join(second).collect())
            seconds[way].append(time.time() - t)
        if got["held_by_key"] != got["unpartitioned_sort_merge"]:
            raise SystemExit(f"round {n}: the two ways joined different rows")
        progress(f"round {n + 1}: " + ", ".join(f"{w} {s[-1]:.2f} s" for w, s in seconds.items()))
    medians = {w: round(statistics.median(s), 2) for w, s in seconds.items()}
    write_result(args.out, "benchmarks.resident_copy", {
        "copy_rows": args.copy_rows, "batch": args.batch, "rounds": args.rounds,
        "seconds_two_steps_and_a_fold": {w: [round(x, 2) for x in s] for w, s in seconds.items()},
        "medians": medians,
        "held_by_key_over_unpartitioned": round(medians["held_by_key"] / medians["unpartitioned_sort_merge"], 3),
    })
    progress(f"medians {medians}; written to {args.out}")
    spark.stop()


if __name__ == "__main__":
    main()
