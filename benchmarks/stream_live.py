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
production delays of every update, avg and p99: *logged* (its batch's write-ahead commit minus
its arrival) and *visible* (its batch's MERGE into the entity table minus its arrival).

With ``--kafka`` each mode's stream is produced live to a Kafka topic of its own (a local broker
started here, ``etl.devtools.kafka_broker``), each line when its arrival time comes and stamped
with it, and ``etl stream`` reads the topic in pieces of ``piece_seconds``; mode
``baseline:kafka`` is the hand-written baseline of ``benchmarks.handwritten`` on Spark's Kafka
source (Structured Streaming, default trigger, ``foreachBatch`` MERGEs) on its topic (issue 46):

    .venv/bin/python -m benchmarks.stream_live --kafka --minutes 3 --rate 10 --modes \
        "baseline:kafka,stream:native:piece_seconds=2:micro_batch_seconds=2:stream_grace_seconds=1:apply_interval_seconds=30"

With ``--work DIR`` holding a warehouse seeded by ``benchmarks.strategies --seed-only --work DIR``
(20 million keys at ``--size full``), each mode loads a copy of it instead of a fresh seed. The join
memory is a tenth of ``key_map`` as the join counts it (its rows, ``r_bytes`` each), or the mode setting
``memory_budget=BYTES``; the partitioned join's wait buffer one window of the
mode's arrivals (``n_invoke`` an eighth of it; before 2026-11-29 the window of
``--micro-batch-seconds``, whatever the mode's; ``tau`` half of it), or with the mode setting
``sizes=derived`` the product's defaults: both derived from the memory as a run derives them,
``tau`` its default (the sizes a run derived are in the result's settings); ``max_wait_s=S`` the
partitioned join's wait bound (docs/decisions/wait-bound.md); MESHJOIN's cycle ``--k`` segments: the
settings of ``benchmarks.strategies``. A mode that falls behind is stopped ``--deadline-minutes`` after its
stream's end (the piece being loaded finishes, as on SIGTERM): its delays then cover the loaded
updates, ``unloaded_at_stop`` counts the others, and ``delay_avg_s_all_at_least`` averages over
every offered update, each unloaded one at its wait until the stop (a lower bound). On Kafka the
lines are sent by a producer process of its own (``kafka_broker.timed_producer``); the row says
what it sent (``produced`` of ``to_produce``). ``--driver-memory``: the driver's heap (8g at 20 M
keys, as ``make benchmark-thesis-full`` runs it).
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

from benchmarks.measures import SEED_RANGE, delta_commits, jobs_started, keymap_segment_sizes, run_sizes, seed_direct, stored_seed
from benchmarks import handwritten
from benchmarks.report import partitioned_settings
from etl import jobs
from etl.core.config import EtlConfig
from etl.core.delays import Delays, run_delays
from etl.core.interval import Interval
from etl.core.model import DEFAULT_MODEL_FILE
from etl.core.spark_conf import kafka_package
from etl.core.records import parse_timestamp
from etl.core.sizing import configured_n_part
from etl.devtools import kafka_broker
from etl.devtools.cdc import create_topics
from etl.io.landing import piece_of
from etl.generator import SKEWS, StreamSpec, generate_stream, skew
from etl.io.spark import build_spark_session
from etl.io.tables import read
from etl.stream import Stream
from etl.transforms.delays import production_delay_s


def visible_after(cfg: EtlConfig) -> dict[int, float]:
    """Per batch, the seconds from its write-ahead commit to its entity table's MERGE, as the
    runs' load summaries say (``BatchResult.visible_s``)."""
    out = {}
    for path in cfg.runs_path.glob("*/load.json"):
        for b in json.loads(path.read_text()).get("batches", []):
            if b.get("batch_seq") and b.get("visible_s") is not None:
                out[int(b["batch_seq"])] = float(b["visible_s"])
    return out


def delays(spark, cfg: EtlConfig) -> dict:
    """Every update's delays, as the run report measures them (``etl.transforms.delays``: an arrival
    after the commit is clock skew, counted apart and in no delay): *logged*, its batch's
    write-ahead commit (the ledger's ``committed_at``) minus its arrival, and *visible*, its
    batch's entity-table MERGE minus its arrival (over the updates whose batch has that time)."""
    ledger = read(spark, cfg, "batch_ledger").where("strategy != 'seed'").select("batch_seq", "committed_at")
    after = visible_after(cfg)
    shift = spark.createDataFrame(list(after.items()) or [(0, 0.0)], "batch_seq long, visible_s double")
    d = (read(spark, cfg, "outcome_log").join(ledger, "batch_seq").join(F.broadcast(shift), "batch_seq", "left")
         .select(production_delay_s(F.col("committed_at"), F.col("arrival_ts")).alias("s"), "visible_s"))
    d = d.withColumn("v", F.col("s") + F.col("visible_s"))
    row = d.agg(F.avg("s"), F.percentile_approx("s", 0.99, 10000), F.count("s"), F.count("*"),
                F.avg("v"), F.percentile_approx("v", 0.99, 10000), F.count("v")).first()
    return {"updates": int(row[2]), "delay_avg_s": row[0] or 0.0, "delay_p99_s": row[1] or 0.0,
            "clock_skew": int(row[3]) - int(row[2]),
            # a mode stopped at its deadline left its last run without a load summary: its batches have no visible time
            "visible_delay_avg_s": row[4], "visible_delay_p99_s": row[5], "visible_updates": int(row[6])}


# What a fit of the run needs per batch (benchmarks.live_costs --ledger); those an older ledger lacks are left out.
LEDGER_COLUMNS = ("batch_seq", "run_key", "batch_index", "updates_in", "batch_started_at", "committed_at", "duration_s",
                  "segments_probed", "segments_admitted", "segments_evicted", "keymap_bytes_read", "resident_bytes",
                  "wait_buffer_tuples", "delay_avg_s", "delay_p99_s")


def ledger_rows(spark, cfg: EtlConfig) -> list[dict]:
    """The mode's batches as its ledger has them (per batch its probes, its wait buffer, when it
    started and committed): kept beside the results, since the mode's warehouse is removed at the
    end, for fits that need a step's probes beside its seconds (``benchmarks.live_costs``)."""
    ledger = read(spark, cfg, "batch_ledger").where("strategy != 'seed'")
    columns = [c for c in LEDGER_COLUMNS if c in ledger.columns]
    return [{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in r.asDict().items()}
            for r in ledger.select(*columns).orderBy("batch_seq").collect()]


def unloaded(spark, cfg: EtlConfig, landing: Path | None, stopped_at: datetime) -> dict:
    """The offered updates without an outcome when a mode was stopped at its deadline: ingested and
    waiting, or in landing files not ingested yet (``landing``; on Kafka, those ingested only). Each has waited at least from its arrival to the
    stop (malformed lines of files not ingested are counted too: a few in a hundred)."""
    waiting = (read(spark, cfg, "ingested_updates")
               .join(read(spark, cfg, "outcome_log").select("update_id"), "update_id", "left_anti").select("arrival_ts"))
    landed = {r.file_name for r in read(spark, cfg, "landed_files").select("file_name").collect()}
    rest = [] if landing is None else [str(p) for p in sorted(landing.rglob("*.jsonl")) if str(p.relative_to(landing)) not in landed]
    if rest:
        waiting = waiting.unionByName(spark.read.schema("arrival_ts timestamp").json(rest).where("arrival_ts IS NOT NULL"))
    row = waiting.agg(F.count("*"), F.sum(F.unix_micros(F.lit(stopped_at)) - F.unix_micros("arrival_ts"))).first()
    return {"updates": int(row[0]), "waited_s": (row[1] or 0) / 1e6}


def _flag(value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise SystemExit(f"bad mode setting value {value!r}: true or false")
    return value.lower() == "true"


MODE_SETTINGS = {"piece_seconds": int, "apply_interval_seconds": float, "micro_batch_seconds": int,
                 "stream_grace_seconds": float, "block_factor": int, "sizes": str, "apply_concurrently": _flag,
                 "max_wait_s": float, "split_segments_per_run": int, "memory_budget": int}
# ``sizes``: the partitioned join's wait buffer and n_invoke, one trigger interval of arrivals
# (``window``, the default: benchmarks.report.partitioned_settings) or derived from the memory as a
# run derives them unless set (``derived``: etl.core.sizing).
SIZES = ("window", "derived")


def mode_settings(settings: list[str]) -> dict:
    """``name=value`` settings of a mode (``MODE_SETTINGS``), with a clear error on anything else."""
    out = {}
    for setting in settings:
        name, eq, value = setting.partition("=")
        if not eq or name not in MODE_SETTINGS:
            raise SystemExit(f"bad mode setting {setting!r}: write name=value with name one of {', '.join(MODE_SETTINGS)}")
        out[name] = MODE_SETTINGS[name](value)
    if out.get("sizes", "window") not in SIZES:
        raise SystemExit(f"bad mode setting sizes={out['sizes']}: one of {', '.join(SIZES)}")
    return out


def kafka_model(path: Path, topic: str) -> Path:
    """The default customer model with its source ``crm`` read from ``topic`` (JSON lines)."""
    path.write_text(DEFAULT_MODEL_FILE.read_text() + f'\n[entities.customer.inputs.crm]\nformat = "lines"\ntopics = ["{topic}"]\n')
    return path


class LiveProducer(threading.Thread):
    """A producer sending each line of a generated stream to ``topic`` when its arrival time comes,
    stamped with it (the record's timestamp is its arrival: docs/sources.md), from a process of its
    own (``kafka_broker.timed_producer``): in the driver's process it fell behind 1,000 lines/s."""

    def __init__(self, bootstrap: str, topic: str, landing: Path) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        lines = []  # written to the records file the producer reads, not kept in the driver's memory
        for f in sorted(landing.rglob("*.jsonl")):
            piece = piece_of(f.name)  # a malformed line has no arrival of its own: its file's
            for line in f.read_text().splitlines():
                if line.strip():
                    lines.append((_arrival(line, piece.timestamp() + 0.5), line))
        lines.sort(key=lambda x: x[0])
        self.records = landing.with_name(landing.name + ".records")
        self.records.write_text("".join(f"{int(at * 1000)}\t{line}\n" for at, line in lines))
        self.offered = len(lines)
        self.sent = 0
        self.error: str | None = None  # the producer's failure, for the mode's row
        self.stopped = threading.Event()  # a mode stopped at its deadline stops its producer too

    def run(self) -> None:
        process = kafka_broker.timed_producer(self.bootstrap, self.topic, self.records)
        counts = threading.Thread(target=self._count, args=(process,), daemon=True)
        counts.start()
        terminated = False
        try:
            while process.poll() is None and not self.stopped.wait(0.5):
                pass
        finally:
            if process.poll() is None:
                process.terminate()
                terminated = True
            process.wait()
            counts.join(timeout=5)
        if not terminated and process.returncode != 0:
            self.error = f"the producer failed ({process.returncode}): {process.stderr.read()[-2000:]}"
            print(f"  {self.topic}: {self.error}", flush=True)

    def report(self) -> dict:
        """What the mode's row says of its producer: records sent of those offered, and a failure."""
        return {"produced": self.sent, "to_produce": self.offered} | ({"producer_error": self.error} if self.error else {})

    def _count(self, process) -> None:
        for line in process.stdout:
            if line.strip().isdigit():
                self.sent = int(line)


def _arrival(line: str, default: float) -> float:
    try:
        return parse_timestamp(json.loads(line).get("arrival_ts")).timestamp()
    except (ValueError, OverflowError, AttributeError):  # not JSON, not an object, no time
        return default


def run_baseline(spark, cfg: EtlConfig, work: Path, bootstrap: str, topic: str, producer: LiveProducer,
                 deadline_s: float) -> dict:
    """The hand-written Kafka baseline on the mode's topic: Structured Streaming's Kafka source with
    its default trigger (the next micro-batch as soon as the last is done), ``foreachBatch`` doing
    ``benchmarks.handwritten``'s lookup, key allocation and two MERGEs, its tables seeded from the
    mode's warehouse. An update's delay is its batch's last MERGE commit minus its record's
    timestamp: for the baseline the logged and the visible delay are one."""
    root = work / "baseline"
    handwritten.seed(spark, read(spark, cfg, "key_map"), read(spark, cfg, cfg.entity_model.table), root)
    apply = handwritten.upsert(spark, root)
    batches, seconds = [], []  # per micro-batch: its delays (all its records measured), its time

    def timed(records, batch_id: int) -> None:
        lines = records.select(F.from_json(F.col("value").cast("string"), handwritten.LINE_SCHEMA).alias("l"),
                               F.unix_micros("timestamp").alias("arrival_us")).select("l.*", "arrival_us").localCheckpoint()
        n, avg, p01 = lines.agg(F.count("*"), F.avg("arrival_us"), F.percentile_approx("arrival_us", 0.01, 10000)).first()
        apply(lines.drop("arrival_us"), batch_id)
        done = time.time()
        if n:
            batches.append(Delays(done - avg / 1e6, done - p01 / 1e6, n))
            seconds.append(time.time() - started[0])
        started[0] = time.time()

    started = [time.time()]
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").load()
             .writeStream.foreachBatch(timed).option("checkpointLocation", str(root / "checkpoint")).start())
    stop_at = time.monotonic() + deadline_s
    producer.join(timeout=max(deadline_s, 0))
    stopped = producer.is_alive() or time.monotonic() > stop_at
    producer.stopped.set()
    if not stopped:
        query.processAllAvailable()
    query.stop()
    run = run_delays(batches)  # weighted by updates, the worst batch's p99: as a load's summary
    steady = seconds[1:]  # the first batch's includes the query's start-up
    return {**producer.report(), "batches": len(batches), "seconds_per_batch": statistics.median(steady) if steady else None,
            "updates": run.measured, "delay_avg_s": run.avg_s, "delay_p99_s": run.p99_s, "visible_delay_avg_s": run.avg_s,
            "visible_delay_p99_s": run.p99_s, "stopped_at_deadline": stopped,
            "note": "records read, malformed lines dropped without a trace (benchmarks.handwritten)"}


def stream_of(args, start: datetime) -> StreamSpec:
    """Every mode's stream (``--skew``: one of ``etl.generator.SKEWS``); a Kafka topic carries one
    source."""
    return StreamSpec(start=start, duration_s=60 * args.minutes, rate=args.rate, seed=5, key_domain=args.keys,
                      sources=("crm",) if args.kafka else ("crm", "web"), **skew(args.skew))


def run_mode(spark, base: EtlConfig, work: Path, mode: str, args) -> dict:
    kind, strategy, *settings = mode.split(":")
    if kind == "baseline":  # baseline:kafka: its warehouse is seeded as native's
        strategy = "native"
    name = mode.replace(":", "-").replace("=", "")
    chosen = mode_settings(settings)
    sizes = chosen.pop("sizes", "window")
    cfg = base.replace(warehouse_root=str(work / name / "warehouse"), runs_root=str(work / name / "runs"),
                       join_strategy=strategy, **chosen)
    shutil.rmtree(work / name, ignore_errors=True)
    if args.seed:
        shutil.copytree(Path(args.work) / SEED_RANGE, cfg.warehouse_path)
    # The first boundary of the schedule far enough away for the seeding and the stream's files.
    lead = 45 + 59 + args.rate * args.minutes * 60 / 20_000  # the generator writes about 20,000 updates/s
    start = (datetime.now(timezone.utc) + timedelta(seconds=lead)).replace(second=0, microsecond=0)
    start += timedelta(minutes=-start.minute % args.run_minutes)
    if not args.seed:
        seed_direct(spark, cfg, args.keys, Interval(start - timedelta(minutes=args.run_minutes), start))
    # A tenth of key_map's rows, as the join counts them, unless the mode sets its own.
    memory_budget = chosen.get("memory_budget") or sum(keymap_segment_sizes(spark, cfg).values()) // 10
    cfg = cfg.replace(memory_budget=memory_budget, k=args.k,
                      **(partitioned_settings(args.rate, cfg.micro_batch_seconds) if sizes == "window" else {}))
    landing = work / f"landing-{name}"
    shutil.rmtree(landing, ignore_errors=True)
    on_kafka = args.broker is not None
    stream_files = generate_stream(stream_of(args, start), landing, piece_seconds=cfg.piece_seconds)
    offered = stream_files.lines - stream_files.kinds["malformed"]  # malformed lines are rejected at ingest
    producer = None
    if on_kafka:  # the same lines, produced live to a topic of the mode's own as they arrive
        topic = f"bench.{name}"
        cfg = cfg.replace(model_file=str(kafka_model(work / f"{name}.toml", topic)), kafka_bootstrap_servers=args.broker,
                          landing_root=str(work / f"empty-{name}"))
        create_topics(spark, args.broker, [topic], partitions=1)  # the baseline's reader starts before the first record
        producer = LiveProducer(args.broker, topic, landing)
        producer.start()
    else:
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
    if kind == "baseline":
        if producer is None:
            raise SystemExit("the baseline modes run on Kafka: add --kafka")
        row = run_baseline(spark, cfg, work / name, args.broker, topic, producer, deadline)
        return {"mode": mode, **row, "offered": offered}
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
        derived = run_sizes(stream.loader.strategy)
    else:
        stopped, derived = False, {}
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
    if producer is not None:
        producer.stopped.set()
        producer.join(timeout=60)
        measured |= producer.report()
    if stopped:  # the average over every offered update, those left unloaded counted at their wait so far
        left = unloaded(spark, cfg, None if on_kafka else landing, datetime.now(timezone.utc))
        total = measured["delay_avg_s"] * measured["updates"] + left["waited_s"]
        measured["delay_avg_s_all_at_least"] = total / max(measured["updates"] + left["updates"], 1)
        measured["unloaded_at_stop"] = left["updates"]
    return {"mode": mode, "batches": sum(b[3] for _, b in pieces), "jobs_per_batch": per(0),
            "commits_per_batch": per(1), "seconds_per_batch": per(2), **measured, "ledger": ledger_rows(spark, cfg),
            "offered": offered, "stopped_at_deadline": stopped,
            "settings": {k: getattr(cfg, k) for k in ("micro_batch_seconds", "piece_seconds", "apply_interval_seconds",
                                                      "memory_budget", "wait_buffer_tuples",
                                                      "n_invoke", "tau", "k", "h_mark")}
                         | {"n_part": configured_n_part(cfg)} | derived}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=int, default=4, help="minutes of arrivals per mode")
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--skew", choices=sorted(SKEWS), default="default",
                    help="the stream's PQRS skew (etl.generator.SKEWS; runs recorded before 2026-11-29 used default)")
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--micro-batch-seconds", type=int, default=20)
    ap.add_argument("--run-minutes", type=int, default=2, help="the schedule's interval, in minutes")
    ap.add_argument("--modes", default="stream:native,stream:partitioned-range,scheduled:native")
    ap.add_argument("--k", type=int, default=16, help="MESHJOIN's key_map segments per cycle")
    ap.add_argument("--work", default="",
                    help="a directory with a seeded warehouse (benchmarks.strategies --seed-only --work DIR) to copy per mode")
    ap.add_argument("--deadline-minutes", type=float, default=10.0,
                    help="stop a mode this long after its stream's end, loaded or not")
    ap.add_argument("--kafka", action="store_true",
                    help="each mode's stream produced live to a Kafka topic (a local broker started here) and read from it; "
                         "mode baseline:kafka is the hand-written Structured Streaming baseline on its topic")
    ap.add_argument("--driver-memory", default="2g", help="the driver's heap (20 M keys: 8g, as benchmarks.stream_piece)")
    ap.add_argument("--spark-properties", default="",
                    help="a Java properties file of Spark settings (setting spark_properties_file), e.g. "
                         "spark.eventLog.enabled=true and spark.eventLog.dir to see each job")
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
        n_part=args.seed["n_part"] if args.seed else 64,  # the count every recorded run used (derived: 2 at 20,000 keys)
        split_segments_per_run=0,  # as the recorded runs, before the split at a run's end (a mode may set it)
        spark_driver_memory=args.driver_memory, spark_properties_file=args.spark_properties,
    )
    broker = None
    args.broker = None
    if args.kafka:
        broker = kafka_broker.start(work / "kafka")
        args.broker = broker.bootstrap
        base = base.replace(spark_packages=kafka_package())
    spark = build_spark_session(base, app_name="bench-stream-live", master="local[2]")
    try:
        rows = []
        ledgers = {}  # beside the results: <out>.ledger.json, per mode its batches (``ledger_rows``)
        for mode in args.modes.split(","):
            row = run_mode(spark, base, work, mode, args)
            if "ledger" in row:  # a strategy's mode; the hand-written baseline keeps no ledger
                ledgers[mode] = row.pop("ledger")
            print(json.dumps(row), flush=True)
            rows.append(row)
        options = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in vars(args).items()
                           if k not in ("out", "seed", "broker") and v not in ("", False))
        result = {"command": f"python -m benchmarks.stream_live {options}",
                  "stream": stream_of(args, datetime.now(timezone.utc)).described(), "runs": rows}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        if ledgers:
            Path(args.out + ".ledger.json").write_text(json.dumps(ledgers, indent=1) + "\n")
    finally:
        spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
