"""The always-on loader timed live, on the wall clock, beside the scheduled way on the same stream.

    .venv/bin/python -m benchmarks.stream_live             # about 3 x (minutes + 1) minutes on 2 cores
    .venv/bin/python -m benchmarks.strategies --size full --seed-only --work /tmp/fullwork   # ~5 min, once
    .venv/bin/python -m benchmarks.stream_live --work /tmp/fullwork --rate 1000 --minutes 10 --run-minutes 10 \
        --modes stream:partitioned-range,stream:meshjoin --k 16       # issue 26's always-on targets, full size

Per mode, a warehouse seeded directly (``measures.seed_direct``: ``--keys`` keys) and a stream of
``--minutes`` of arrivals at ``--rate`` updates/s stamped from the next whole minute on (written
ahead, read only once each minute has closed, as from a landing agent that has finished the
minute). Modes: ``stream:<strategy>`` is ``etl stream`` (one session, each minute's windows
loaded once the minute closes, ``--micro-batch-seconds`` windows), with settings after it as
``stream:<strategy>:piece_seconds=5:apply_interval_seconds=30`` (landing files of 5 s, each window
loaded once its pieces close; the MERGEs off the delay path, issue 46); ``scheduled:<strategy>`` loads
each run of ``--run-minutes`` after it closes, ingest then load, in the same session (a DAG run
would add a spark-submit start: this is the scheduled way's best case). Reported per mode:
per batch Spark jobs, Delta commits and seconds (medians over pieces, per batch), and the
production delay of every update (its batch's write-ahead commit minus its arrival): avg and p99.

With ``--work DIR`` holding a warehouse seeded by ``benchmarks.strategies --seed-only --work DIR``
(20 million keys at ``--size full``), each mode loads a copy of it instead of a fresh seed. The join
memory is a tenth of ``key_map``'s bytes, the partitioned join's wait buffer one window of
arrivals (``n_invoke`` an eighth of it), MESHJOIN's cycle ``--k`` segments: the settings of
``benchmarks.strategies``. A mode that falls behind is stopped ``--deadline-minutes`` after its
stream's end (the piece being loaded finishes, as on SIGTERM): its delays then cover the loaded
updates, ``unloaded_at_stop`` counts the others, and ``delay_avg_s_all_at_least`` averages over
every offered update, each unloaded one at its wait until the stop (a lower bound).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import functions as F

from benchmarks.measures import SEED_RANGE, delta_commits, jobs_started, keymap_segment_bytes, seed_direct, stored_seed
from benchmarks.report import partitioned_settings
from etl import jobs
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.spark import build_spark_session
from etl.io.tables import read
from etl.stream import Stream
from etl.transforms.delays import production_delay_s


def delays(spark, cfg: EtlConfig) -> dict:
    """Every update's delay: its batch's commit (the ledger's ``committed_at``) minus its arrival,
    as the run report measures it (``etl.transforms.delays``: an arrival after the commit is clock
    skew, counted apart and in no delay)."""
    ledger = read(spark, cfg, "batch_ledger").where("strategy != 'seed'").select("batch_seq", "committed_at")
    d = (read(spark, cfg, "outcome_log").join(ledger, "batch_seq")
         .select(production_delay_s(F.col("committed_at"), F.col("arrival_ts")).alias("s")))
    row = d.agg(F.avg("s"), F.percentile_approx("s", 0.99, 10000), F.count("s"), F.count("*")).first()
    return {"updates": int(row[2]), "delay_avg_s": row[0] or 0.0, "delay_p99_s": row[1] or 0.0,
            "clock_skew": int(row[3]) - int(row[2])}


def unloaded(spark, cfg: EtlConfig, landing: Path, stopped_at: datetime) -> dict:
    """The offered updates without an outcome when a mode was stopped at its deadline: ingested and
    waiting, or in landing files not ingested yet. Each has waited at least from its arrival to the
    stop (malformed lines of files not ingested are counted too: a few in a hundred)."""
    waiting = (read(spark, cfg, "ingested_updates")
               .join(read(spark, cfg, "outcome_log").select("update_id"), "update_id", "left_anti").select("arrival_ts"))
    landed = {r.file_name for r in read(spark, cfg, "landed_files").select("file_name").collect()}
    rest = [str(p) for p in sorted(landing.rglob("*.jsonl")) if str(p.relative_to(landing)) not in landed]
    if rest:
        waiting = waiting.unionByName(spark.read.schema("arrival_ts timestamp").json(rest).where("arrival_ts IS NOT NULL"))
    row = waiting.agg(F.count("*"), F.sum(F.unix_micros(F.lit(stopped_at)) - F.unix_micros("arrival_ts"))).first()
    return {"updates": int(row[0]), "waited_s": (row[1] or 0) / 1e6}


MODE_SETTINGS = {"piece_seconds": int, "apply_interval_seconds": float}


def mode_settings(settings: list[str]) -> dict:
    """``name=value`` settings of a mode (``MODE_SETTINGS``), with a clear error on anything else."""
    out = {}
    for setting in settings:
        name, eq, value = setting.partition("=")
        if not eq or name not in MODE_SETTINGS:
            raise SystemExit(f"bad mode setting {setting!r}: write name=value with name one of {', '.join(MODE_SETTINGS)}")
        out[name] = MODE_SETTINGS[name](value)
    return out


def run_mode(spark, base: EtlConfig, work: Path, mode: str, args) -> dict:
    kind, strategy, *settings = mode.split(":")
    name = mode.replace(":", "-").replace("=", "")
    cfg = base.replace(warehouse_root=str(work / name / "warehouse"), runs_root=str(work / name / "runs"),
                       join_strategy=strategy, **mode_settings(settings))
    shutil.rmtree(work / name, ignore_errors=True)
    if args.seed:
        shutil.copytree(Path(args.work) / SEED_RANGE, cfg.warehouse_path)
    # The first boundary of the schedule far enough away for the seeding and the stream's files.
    lead = 45 + 59 + args.rate * args.minutes * 60 / 20_000  # the generator writes about 20,000 updates/s
    start = (datetime.now(timezone.utc) + timedelta(seconds=lead)).replace(second=0, microsecond=0)
    start += timedelta(minutes=-start.minute % args.run_minutes)
    if not args.seed:
        seed_direct(spark, cfg, args.keys, Interval(start - timedelta(minutes=args.run_minutes), start))
    memory_budget = sum(keymap_segment_bytes(spark, cfg).values()) // 10
    cfg = cfg.replace(memory_budget=memory_budget, k=args.k, **partitioned_settings(args.rate, args.micro_batch_seconds))
    landing = work / f"landing-{name}"
    shutil.rmtree(landing, ignore_errors=True)
    stream_files = generate_stream(StreamSpec(start=start, duration_s=60 * args.minutes, rate=args.rate, seed=5,
                                              key_domain=args.keys), landing, piece_seconds=cfg.piece_seconds)
    offered = stream_files.lines - stream_files.kinds["malformed"]  # malformed lines are rejected at ingest
    cfg = cfg.replace(landing_root=str(landing))
    late = (datetime.now(timezone.utc) - start).total_seconds()
    if late > 0:
        print(f"  {mode}: prepared {late:.0f} s after the stream's start (its first minute is loaded late)", flush=True)
    end = start + timedelta(minutes=args.minutes)
    marks = []

    def mark(message: str = "") -> None:
        n = int(message.split(": ")[1].split(" ")[0]) if "batches committed" in message else 0
        marks.append((jobs_started(spark), delta_commits(cfg.warehouse_path), time.perf_counter(), n))
        print(f"  {mode}: {message}", flush=True)

    deadline = (end - datetime.now(timezone.utc)).total_seconds() + 60 * args.deadline_minutes
    if kind == "stream":
        stream = Stream(spark, cfg, progress=mark)
        timer = threading.Timer(deadline, stream.stop)
        timer.start()
        mark("started")
        try:
            stream.run(start=start, until=end)
        finally:
            timer.cancel()
        stopped = stream.stopping
    else:
        stopped = False
        for i in range(0, args.minutes, args.run_minutes):
            run = Interval(start + timedelta(minutes=i), start + timedelta(minutes=i + args.run_minutes))
            wait = (run.end - datetime.now(timezone.utc)).total_seconds() + cfg.stream_grace_seconds
            time.sleep(max(wait, 0))
            jobs.ingest(spark, cfg, run)
            mark("ingested")
            summary = jobs.load(spark, cfg, run)
            mark(f"run: {summary['batches_committed']} batches committed")
    pieces = [(a, b) for a, b in zip(marks, marks[1:]) if b[3]]
    per = lambda i: statistics.median((b[i] - a[i]) / b[3] for a, b in pieces) if pieces else None  # noqa: E731
    measured = delays(spark, cfg)
    if stopped:  # the average over every offered update, those left unloaded counted at their wait so far
        left = unloaded(spark, cfg, landing, datetime.now(timezone.utc))
        total = measured["delay_avg_s"] * measured["updates"] + left["waited_s"]
        measured["delay_avg_s_all_at_least"] = total / max(measured["updates"] + left["updates"], 1)
        measured["unloaded_at_stop"] = left["updates"]
    return {"mode": mode, "batches": sum(b[3] for _, b in pieces), "jobs_per_batch": per(0),
            "commits_per_batch": per(1), "seconds_per_batch": per(2), **measured,
            "offered": offered, "stopped_at_deadline": stopped,
            "settings": {k: getattr(cfg, k) for k in ("micro_batch_seconds", "piece_seconds", "apply_interval_seconds",
                                                      "memory_budget", "wait_buffer_tuples",
                                                      "n_invoke", "tau", "k", "h_mark", "n_part")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=int, default=4, help="minutes of arrivals per mode")
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--micro-batch-seconds", type=int, default=20)
    ap.add_argument("--run-minutes", type=int, default=2, help="the schedule's interval, in minutes")
    ap.add_argument("--modes", default="stream:native,stream:partitioned-range,scheduled:native")
    ap.add_argument("--k", type=int, default=16, help="MESHJOIN's key_map segments per cycle")
    ap.add_argument("--work", default="",
                    help="a directory with a seeded warehouse (benchmarks.strategies --seed-only --work DIR) to copy per mode")
    ap.add_argument("--deadline-minutes", type=float, default=10.0,
                    help="stop a mode this long after its stream's end, loaded or not")
    ap.add_argument("--out", default="docs/results/stream_live.json")
    args = ap.parse_args()
    args.seed = stored_seed(Path(args.work)) if args.work else None
    if args.work and not args.seed:
        ap.error(f"--work {args.work} holds no seeded warehouse: run benchmarks.strategies --seed-only --work {args.work}")
    if args.seed:
        args.keys = args.seed["keys"]
    work = Path(tempfile.mkdtemp(prefix="bench-stream-live-", dir=args.work or None))
    base = EtlConfig(
        warehouse_root=str(work / "wh"), gx_root=str(work / "gx"), spark_master="local[2]", spark_shuffle_partitions=2,
        micro_batch_seconds=args.micro_batch_seconds, key_domain=args.keys, schedule=f"*/{args.run_minutes} * * * *",
        n_part=args.seed["n_part"] if args.seed else EtlConfig().n_part,
    )
    spark = build_spark_session(base, app_name="bench-stream-live", master="local[2]")
    try:
        rows = []
        for mode in args.modes.split(","):
            row = run_mode(spark, base, work, mode, args)
            print(json.dumps(row), flush=True)
            rows.append(row)
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "seed") and v != "")
        result = {"command": f"python -m benchmarks.stream_live {options}", "runs": rows}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
