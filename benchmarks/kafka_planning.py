"""What planning an always-on loader's Kafka piece costs, side by side in one Spark session: the
query of ``landed_files`` (``etl.io.kafka.recorded_ranges``, what every piece ran before
``KnownRanges``) against the neighbours carried from the piece before (``KnownRanges``: a version
check of the table's log before and after the piece's write), each piece recorded as the stream
records it (a range per partition, a commit of ``landed_files``); the two ways take turns at going
first after each commit.

    .venv/bin/python -m benchmarks.kafka_planning                  # about two minutes on 2 cores
    .venv/bin/python -m benchmarks.kafka_planning --pieces 24 --partitions 3 --out /tmp/planning.json

Prints and writes one JSON object: per way, the median seconds and Spark jobs a piece, over the
pieces after the first (which carries the session's start-up), and whether both ways gave the same
neighbours every piece."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.measures import jobs_started
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.offsets import OffsetRange
from etl.io.kafka import KafkaPlan, KnownRanges, PlannedRange, piece_neighbours, recorded_ranges
from etl.io.spark import build_spark_session
from etl.io.tables import ensure_tables, open_tables
from warehouse.schemas import LANDED_FILES

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pieces", type=int, default=16, help="pieces planned and recorded, one after the other")
    ap.add_argument("--piece-seconds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=1, help="the topic's partitions (a range each per piece)")
    ap.add_argument("--history", type=int, default=120, help="pieces recorded before the measured ones")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-planning-"))
    cfg = EtlConfig(warehouse_root=str(work / "wh"), spark_master="local[2]", spark_shuffle_partitions=2)
    spark = build_spark_session(cfg, app_name="bench-kafka-planning", master="local[2]")
    try:
        ensure_tables(spark, cfg)
        tables = open_tables(spark, cfg)
        step = timedelta(seconds=args.piece_seconds)
        minutes = -(-args.piece_seconds * (args.history + args.pieces + 1) // 60)
        run = Interval(T0, T0 + timedelta(minutes=minutes))
        offset = dict.fromkeys(range(args.partitions), 0)

        def record(a: datetime) -> KafkaPlan:
            plan = KafkaPlan()
            for p in offset:
                plan.ranges.append(PlannedRange(None, OffsetRange("bench", p, offset[p], offset[p] + 50), a, a + step))
                offset[p] += 50
            rows = [(run.run_key, r.range.name, "crm", a.replace(tzinfo=None), 100, "x", 50, 0) for r in plan.ranges]
            tables.append(spark.createDataFrame(rows, LANDED_FILES), "landed_files")
            return plan

        history = [(run.run_key, f"kafka:bench:{p}:{i * 50}-{i * 50 + 50}", "crm",
                    (T0 + step * i).replace(tzinfo=None), 100, "x", 50, 0) for i in range(args.history) for p in offset]
        if history:
            tables.append(spark.createDataFrame(history, LANDED_FILES), "landed_files")
            offset = dict.fromkeys(offset, args.history * 50)
        known, figures, same = KnownRanges(), {"query": [], "carried": []}, True
        a = T0 + step * args.history
        for piece in range(args.pieces):
            # The two ways in turn first: the first after a commit finds the table's log to update.
            for way in (("query", "carried") if piece % 2 else ("carried", "query")):
                jobs0, t0 = jobs_started(spark), time.perf_counter()
                if way == "query":
                    queried = recorded_ranges(spark, cfg, run, a, a + step)[1]
                else:  # the table read by the first piece only
                    carried = piece_neighbours(spark, cfg, run, a, a + step, known)[1]
                figures[way].append([time.perf_counter() - t0, jobs_started(spark) - jobs0])
            same = same and sorted(carried, key=repr) == sorted(queried, key=repr)
            plan = record(a)
            jobs0, t0 = jobs_started(spark), time.perf_counter()
            known.written(tables, plan, a + step, kafka_rows=len(plan.ranges))  # the carried way's own version check
            figures["carried"][-1][0] += time.perf_counter() - t0
            figures["carried"][-1][1] += jobs_started(spark) - jobs0
            a += step
        out = {"command": f"python -m benchmarks.kafka_planning --pieces {args.pieces} --piece-seconds {args.piece_seconds} "
                          f"--partitions {args.partitions} --history {args.history}",
               "same_neighbours_every_piece": same}
        for way, xs in figures.items():
            measured = xs[1:]
            out[way] = {"seconds_median": round(statistics.median(x[0] for x in measured), 3),
                        "jobs_median": statistics.median(x[1] for x in measured), "pieces": len(measured)}
        out["ratio_carried_to_query"] = round(out["carried"]["seconds_median"] / out["query"]["seconds_median"], 3)
        print(json.dumps(out), flush=True)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
