"""The baseline: what a data engineer would write instead of this project, to measure against.

Spark Structured Streaming over the landing files, ``foreachBatch`` doing the lookup, the key
allocation and two Delta MERGEs; its own two tables, seeded from the same warehouse as the
strategies. Used by ``benchmarks.batch_jobs`` (``--strategies ...,handwritten``), which feeds it
the same arrival minutes, one micro-batch each, and times it the same way.

What it does not do that the product does (DESIGN.md §3), so its time is a floor, not a rival:
- no outcome per update: only each key's last update of a batch is kept; the others, duplicates
  and stale updates leave no trace (no outcome log, no quarantine with reasons, no ledger);
- no validation with reasons: a line that does not parse or lacks its key is dropped silently, and
  one the product rejects for its content (an unknown op, a bad value) is loaded (on the
  benchmark's stream, with 2% malformed lines, it ended with 24 more keys than the product, of
  10,957);
- unchanged content is written again (no row hash comparison); deletes only flag the row;
- a crash between its two MERGEs is retried by the engine with the same batch id but without
  Delta's ``txnAppId`` on the MERGEs; the second try sees the first MERGE's keys (no key is given
  twice), but nothing checks that; no run intervals, so no rerun or backfill of an interval, no
  late-line check, no lock against a second writer, no data-quality gate, no join strategy other
  than a full join with ``key_map`` (every batch reads all of it).
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime, timedelta
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from etl.io.landing import scan_landing

LINE_SCHEMA = (
    "source_id string, natural_key string, op string, source_seq long, event_ts timestamp, arrival_ts timestamp, "
    "attributes struct<name: string, email: string, city: string, balance: decimal(18,2)>"
)
KEY = ["source_id", "natural_key"]


def seed(spark, key_map: DataFrame, current: DataFrame, root: Path) -> None:
    """The baseline's two tables, holding what ``key_map`` and ``current`` hold (with deletion
    vectors, as a user tuning MERGEs would set them)."""
    key_map.select(*KEY, "surrogate_key", "last_source_seq").write.format("delta") \
        .option("delta.enableDeletionVectors", "true").save(str(root / "key_map"))
    current.select("surrogate_key", *KEY, "name", "email", "city", "balance", "is_deleted", "last_source_seq",
                   "event_ts").write.format("delta").option("delta.enableDeletionVectors", "true") \
        .save(str(root / "customer_current"))


def upsert(spark, root: Path):
    """The ``foreachBatch`` function: one micro-batch of landing lines into the two tables."""
    key_map, current = DeltaTable.forPath(spark, str(root / "key_map")), DeltaTable.forPath(spark, str(root / "customer_current"))

    def apply(lines: DataFrame, batch_id: int) -> None:
        updates = lines.where(F.col("natural_key").isNotNull() & F.col("source_seq").isNotNull()) \
            .select(*KEY, "op", "source_seq", "event_ts", "attributes.*")
        last = Window.partitionBy(*KEY).orderBy(F.col("source_seq").desc())
        # Held once: each action below would read the batch's files again.
        latest = updates.withColumn("n", F.row_number().over(last)).where("n = 1").drop("n").localCheckpoint()
        # Aliased: columns of the MERGE target's own plan in the source confuse the MERGE's resolution.
        known = key_map.toDF().select(*[F.col(c).alias(c) for c in (*KEY, "surrogate_key", "last_source_seq")])
        joined = latest.join(known, KEY, "left")
        top = known.agg(F.max("surrogate_key")).first()[0] or 0
        new = joined.where(F.col("surrogate_key").isNull()) \
            .withColumn("surrogate_key", F.lit(top) + F.row_number().over(Window.orderBy(*KEY)))
        changed = joined.where(F.col("source_seq") > F.col("last_source_seq"))
        # Held before the first MERGE: computed again after it, against the new key_map, the new
        # keys would be found there and no current row written.
        resolved = changed.unionByName(new).drop("last_source_seq").localCheckpoint()
        try:
            key_map.alias("t").merge(resolved.alias("s"), "t.source_id = s.source_id AND t.natural_key = s.natural_key") \
                .whenMatchedUpdate(set={"last_source_seq": "s.source_seq"}) \
                .whenNotMatchedInsert(values={"source_id": "s.source_id", "natural_key": "s.natural_key",
                                              "surrogate_key": "s.surrogate_key", "last_source_seq": "s.source_seq"}) \
                .execute()
            row = resolved.select("surrogate_key", *KEY, "name", "email", "city", "balance",
                                  (F.col("op") == "delete").alias("is_deleted"),
                                  F.col("source_seq").alias("last_source_seq"), "event_ts")
            current.alias("t").merge(row.alias("s"), "t.surrogate_key = s.surrogate_key") \
                .whenMatchedUpdateAll(condition="s.last_source_seq > t.last_source_seq") \
                .whenNotMatchedInsertAll().execute()
        finally:
            resolved.unpersist()

    return apply


class Handwritten:
    """The streaming query over ``root/incoming``, fed one arrival minute at a time."""

    def __init__(self, spark, root: Path) -> None:
        self.spark, self.root = spark, root
        self.incoming = root / "incoming"
        self.incoming.mkdir(parents=True, exist_ok=True)
        lines = spark.readStream.schema(LINE_SCHEMA).json(str(self.incoming))
        self.query = (lines.writeStream.foreachBatch(upsert(spark, root))
                      .option("checkpointLocation", str(root / "checkpoint")).start())

    def feed(self, files: list[Path]) -> float:
        """Land ``files`` (one window of ``window_files``) where the query watches and wait until it
        has applied them: seconds."""
        staging = self.root / "staging"
        staging.mkdir(exist_ok=True)
        started = time.perf_counter()
        for f in files:  # whole files appear at once, as a landing agent's rename makes them
            name = f"{f.parent.name}-{f.name}"
            shutil.copy(f, staging / name)
            (staging / name).rename(self.incoming / name)
        self.query.processAllAvailable()
        return time.perf_counter() - started

    def stop(self) -> None:
        self.query.stop()

    def rows(self) -> dict[str, int]:
        return {t: self.spark.read.format("delta").load(str(self.root / t)).count() for t in ("key_map", "customer_current")}


def window_files(landing: Path, start: datetime, t: int, windows: int, out: Path) -> list[tuple[list[Path], list[datetime]]]:
    """The landing files of ``windows`` trigger intervals of ``t`` seconds from ``start``, as the
    baseline is fed them: per window its files (a minute's file cut by arrival second when ``t``
    is under a minute; ``t`` must divide 60 or be whole minutes) and its updates' arrival times."""
    if not (60 % t == 0 or t % 60 == 0):
        raise ValueError(f"the baseline is fed whole landing files: a trigger of {t} s does not divide a minute")
    fed: list[tuple[list[Path], list[datetime]]] = [([], []) for _ in range(windows)]
    end = start + timedelta(minutes=(windows * t + 59) // 60)
    for landed in scan_landing(landing, start, end).files:
        parts: dict[int, list[str]] = {}
        for line in Path(landed.path).read_text().splitlines():
            try:
                arrival = datetime.fromisoformat(json.loads(line)["arrival_ts"].replace("Z", "+00:00"))
            except (ValueError, KeyError, TypeError, AttributeError):
                arrival = None  # a line the stream cannot read goes with its file's first window
            since = (arrival if t < 60 and arrival is not None else landed.minute) - start
            w = max(0, min(int(since.total_seconds() // t), windows - 1))
            parts.setdefault(w, []).append(line)
            if arrival is not None:
                fed[w][1].append(arrival)
        for w, lines in parts.items():
            part = out / f"w{w:05d}" / f"{landed.source_id}-{landed.minute:%Y%m%dT%H%M}.jsonl"
            part.parent.mkdir(parents=True, exist_ok=True)
            part.write_text("\n".join(lines) + "\n")
            fed[w][0].append(part)
    return fed
