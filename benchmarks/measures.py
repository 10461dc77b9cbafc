"""The benchmark's Spark side: seeding a warehouse in bulk, and what is measured in one after a
run (files, segment bytes, and the digest of its decisions that runs of one rate must share)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Callable

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.sizing import configured_n_part
from etl.generator import CITIES
from etl.ingest import row_hash
from etl.io.layout_store import load_layout
from etl.io.sequence_store import check_sequence_definition
from etl.io.spark import build_spark_session
from etl.io.spark_progress import spark_progress
from etl.io.tables import append, ensure_tables, open_tables, read, row_frame
from etl.load.results import FLUSH_STEP
from etl.transforms.layout import segment_column
from etl.transforms.outcomes import with_natural_keys

# Where ``benchmarks.strategies --work DIR`` keeps its seeded warehouse (range layout), and the
# marker that says what was seeded there (keys, n_part, how): written once the seed is complete.
SEED_RANGE = "seed-range"


def seed_marker(work: Path) -> Path:
    return Path(work) / f"{SEED_RANGE}.json"


def stored_seed(work: Path) -> dict | None:
    """What a finished seed under ``work`` holds (its marker), or ``None`` when there is none."""
    marker = seed_marker(work)
    return json.loads(marker.read_text()) if marker.exists() else None


def scratch_spark(name: str):
    """A scratch folder and a ``local[2]`` session for a micro-benchmark: (folder, session)."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    spark = build_spark_session(EtlConfig(warehouse_root=str(work / "wh"), spark_shuffle_partitions=2),
                                app_name=f"bench-{name}", master="local[2]")
    return work, spark


def seed_direct(spark, cfg: EtlConfig, keys: int, run: Interval, presence: float = 0.5, sources=("crm", "web"),
                progress: Callable[[str], None] | None = None) -> int:
    """Write a seeded warehouse's ``key_map``, ``customer_current`` and ledger row directly, as one
    bulk load: the stream path (1.2x the domain as JSON lines through ingest and ``native``) would
    take hours at 20 million keys on 2 cores. Each ``(source, natural key)`` of the domain is
    present with probability ``presence`` (a fixed hash, so every run seeds the same rows) with
    the generator's ``initial_content``, so the stream's "unchanged" updates are duplicates here
    too. Returns the rows seeded; ``progress`` hears the writes' tasks as they go (minutes at full size)."""
    check_sequence_definition(cfg, open_tables(spark, cfg))  # written by hand, ordered as the entity's loads order them
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
        .withColumn("is_inferred", F.lit(False))  # a customer some fact references has the column (conform drops it otherwise)
    )
    with spark_progress(spark, "seeding key_map", progress):
        append(rows.repartition(configured_n_part(cfg), "segment_id"), cfg, "key_map")
    with spark_progress(spark, "seeding customer_current", progress):
        append(rows, cfg, "customer_current")
    seeded = read(spark, cfg, "key_map").count()
    ledger = dict(run_key=run.run_key, batch_index=FLUSH_STEP, batch_seq=1, strategy="seed", updates_in=seeded,
                  keys_allocated=seeded, next_surrogate_key=keys * len(sources) + 1, committed_at=run.end.replace(tzinfo=None))
    append(row_frame(spark, "batch_ledger", ledger), cfg, "batch_ledger")
    return seeded


def jobs_started(spark) -> int:
    """Spark jobs started so far by this session (the DAG scheduler's next job id)."""
    return spark.sparkContext._jsc.sc().dagScheduler().nextJobId()


def delta_commits(root: Path) -> int:
    """Delta commits made so far to every table of the warehouse ``root`` (commit files in their
    logs). A table is a directory of the root (``EtlConfig.table_path``): only the tables' logs are
    listed. Walking the whole tree (``rglob``) went through key_map's partition directories too,
    1,024 at full size: 33.6 s over a 3-minute full-size run of ``stream_piece``, counted twice per
    timed call and so inside the calls it timed (found by profiling it, 2026-12-07)."""
    root = Path(root)
    if not root.is_dir():
        return 0
    return sum(len(list((table / "_delta_log").glob("*.json"))) for table in root.iterdir()
               if (table / "_delta_log").is_dir())


def table_files(spark, cfg: EtlConfig, table: str) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{cfg.table_path(table)}`").first().numFiles


def run_sizes(strategy) -> dict:
    """The wait buffer and n_invoke a partitioned run used (derived at its start unless set)."""
    policy = getattr(strategy, "policy", None)
    if policy is None or not hasattr(policy, "capacity"):
        return {}
    return {"wait_buffer_tuples": policy.capacity, "n_invoke": policy.n_invoke}


def keymap_segment_bytes(spark, cfg: EtlConfig) -> dict[int, int]:
    """Bytes of each key_map segment (its Delta partition's current files)."""
    files = DeltaTable.forPath(spark, cfg.table_path("key_map")).toDF().inputFiles()
    sizes: dict[int, int] = {}
    for f in files:
        path = Path(f.replace("file://", "").replace("file:", ""))
        seg = int(next(p for p in path.parts if p.startswith("segment_id=")).split("=")[1])
        sizes[seg] = sizes.get(seg, 0) + path.stat().st_size
    return sizes


def keymap_segment_sizes(spark, cfg: EtlConfig) -> dict[int, int]:
    """Each key_map segment as the join counts it: its rows times ``cfg.r_bytes``
    (docs/decisions/sizes-by-rows.md), the unit a benchmark's join memory is given in."""
    rows = DeltaTable.forPath(spark, cfg.table_path("key_map")).toDF().groupBy("segment_id").count().collect()
    return {int(r["segment_id"]): int(r["count"]) * cfg.r_bytes for r in rows}


def outcome_digest(spark, cfg: EtlConfig, run_key: str) -> dict:
    """The run's decisions as one order-free digest: per update its outcome, reason, whether it
    applies, and the natural key its surrogate key stands for (so runs that numbered new keys
    differently still agree). Two runs decided the same iff their digests are equal."""
    rows = (
        with_natural_keys(read(spark, cfg, "outcome_log").where(F.col("run_key") == run_key), read(spark, cfg, "key_map"))
        .select(F.xxhash64("update_id", "outcome", F.coalesce("reason", F.lit("")), "applies",
                           F.coalesce("stands_for", F.lit(""))).cast("decimal(38,0)").alias("h"))
    )
    row = rows.agg(F.count("*").alias("n"), F.sum("h").alias("s")).first()
    return {"rows": int(row.n), "sum_xxhash64": str(row.s or 0)}
