"""The thesis's tuple sizes as this product counts them (papers/004 Table 6.2's ``s`` and ``r``):
``memory_budget`` is counted in key_map's rows of ``r_bytes`` each (the stored bytes a row this
tool measures: docs/decisions/sizes-by-rows.md), so an update's size that sizes the wait buffer (``s_bytes``, etl/core/sizing.py) is
its stored bytes in ``ingested_updates``; beside them, what a waiting update takes in Spark's
block store, as the wait buffer holds it.

    .venv/bin/python -m benchmarks.tuple_sizes                 # about two minutes on 2 cores
    .venv/bin/python -m benchmarks.tuple_sizes --keys 200000 --minutes 2 --rate 200

A warehouse seeded directly with ``--keys`` keys, then ``--minutes`` of the default entity's
stream at ``--rate`` updates/s ingested; the waiting tuples are the ingested rows as the wait
buffer holds them (the update columns and the segment, locally checkpointed: Spark's block store
reports their size); ``key_map``'s are its files' bytes over its rows."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import functions as F

from benchmarks.measures import seed_direct
from etl import jobs
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.layout_store import load_layout
from etl.io.spark import build_spark_session
from etl.io.tables import open_tables, read
from etl.strategies.base import update_columns
from etl.transforms.layout import segment_column

T0 = datetime(2026, 11, 22, 6, 0, tzinfo=timezone.utc)


def stored_bytes(spark) -> int:
    return sum(info.memSize() + info.diskSize() for info in spark.sparkContext._jsc.sc().getRDDStorageInfo())


def measure(spark, root: Path, keys: int, minutes: int, rate: float) -> dict:
    cfg = EtlConfig(warehouse_root=str(root / "warehouse"), landing_root=str(root / "landing"),
                    runs_root=str(root / "runs"), gx_root=str(root / "gx"), reports_root=str(root / "reports"),
                    key_domain=keys, micro_batch_seconds=60)
    seed_direct(spark, cfg, keys, Interval(T0 - timedelta(minutes=1), T0))
    run = Interval(T0, T0 + timedelta(minutes=minutes))
    generate_stream(StreamSpec(start=T0, duration_s=minutes * 60, rate=rate, seed=3, key_domain=keys), cfg.landing_path)
    jobs.ingest(spark, cfg, run)
    segment = segment_column(load_layout(cfg, "range"))
    waiting = read(spark, cfg, "ingested_updates").withColumn(
        "segment_id", segment(F.col("source_id"), F.col("natural_key"))).select(*update_columns(cfg.entity_model), "segment_id")
    before = stored_bytes(spark)
    held = waiting.localCheckpoint(eager=True)
    tuples = held.count()
    in_memory = (stored_bytes(spark) - before) / tuples
    tables = open_tables(spark, cfg)
    key_map_rows = read(spark, cfg, "key_map").count()
    return {"keys": keys, "updates": tuples, "s_bytes": round(tables.bytes("ingested_updates") / tuples, 1),
            "r_bytes": round(tables.bytes("key_map") / key_map_rows, 1), "key_map_rows": key_map_rows,
            "s_bytes_in_memory": round(in_memory, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--minutes", type=int, default=2)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    spark = build_spark_session(EtlConfig(spark_master="local[2]", spark_shuffle_partitions=2), "tuple-sizes")
    root = Path(tempfile.mkdtemp(prefix="tuple-sizes-"))
    try:
        result = measure(spark, root, args.keys, args.minutes, args.rate)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    result["command"] = ("python -m benchmarks.tuple_sizes --keys {keys} --minutes {m} --rate {r}"
                         .format(keys=args.keys, m=args.minutes, r=args.rate))
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
