"""Where one piece of the always-on loader's time goes: per piece, its ingest and its load step,
and inside them the calls that cost Spark jobs or Delta commits.

    .venv/bin/python -m benchmarks.stream_piece                     # about seven minutes on 2 cores
    .venv/bin/python -m benchmarks.stream_piece --strategies native --out /tmp/piece.json
    .venv/bin/python -m benchmarks.stream_piece --keys 20000000 --n-part 1024 --rate 1000 --minutes 3 \
        --piece-seconds 10 --apply-interval-seconds 60 --sizes derived --driver-memory 8g \
        --strategies partitioned-range --skew thesis --out docs/results/stream_piece_full-thesis-skew.json  # ~20 min

A warehouse seeded directly with ``--keys`` keys, then ``--minutes`` of a ``--rate`` updates/s
stream in landing files of ``--piece-seconds``, loaded by ``etl stream`` (``etl.stream.Stream``)
with a clock that passes only while it waits: every piece is ready as soon as the one before is
loaded, so nothing here is delay, only cost. The calls are timed where they are looked up from
(the stream's ``jobs.ingest_pieces`` and ``Loader.load_ready``; inside them the named calls of
``CALLS``), each with the Spark jobs it started and the Delta commits it added; a call inside
another is counted in both. Reported: medians per piece over the pieces after the first two (the
first carries the run's start-up) and before the run's last two (its flush and summaries); a
piece is a load step and the ingest before it; ``per_released_piece``: the medians over the
measured pieces whose load step released updates (a partitioned join's pieces mostly wait; a
step's time counts a coalesced MERGE pair that fell in it, as ``pieces_raw`` shows), and
``pieces_raw`` every piece's figures. The coalesced MERGEs (``CommitProtocol.apply``,
every ``--apply-interval-seconds`` of the stream's clock) are off the pieces' path: each is
reported apart, with the updates it applied. ``--sizes``: the partitioned join's wait buffer and
``n_invoke`` one trigger interval of arrivals and ``tau`` half of it (``window``, the other
benchmarks'), or the product's defaults (``derived``: both derived from the memory as a run derives
them, ``etl.core.sizing``, and ``tau`` its default)."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.measures import delta_commits, jobs_started, keymap_segment_sizes, run_sizes, seed_direct
from benchmarks.report import parse_run, partitioned_settings
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.sizing import configured_n_part
from etl.generator import SKEWS, StreamSpec, generate_stream, skew
from etl.io.spark import build_spark_session
from etl.load.protocol import CommitProtocol
from etl.stream import Stream

T0 = datetime(2026, 11, 22, 6, 0, tzinfo=timezone.utc)

# (module, attribute) of each call timed: the two steps of a piece first, then what they call.
STEPS = [("etl.stream", "jobs.ingest_pieces"), ("etl.load.loader", "Loader.load_ready")]
CALLS = [
    ("etl.jobs", "scan_sources"), ("etl.jobs", "check_sequence_definition"), ("etl.jobs", "plan_ranges"),
    ("etl.jobs", "check_landed_files"), ("etl.io.delta_tables", "DeltaTables.replace_where"),
    ("etl.load.loader", "check_sequence_definition"), ("etl.load.loader", "settle_pending_layout"),
    ("etl.load.loader", "Loader._prepare"), ("etl.load.loader", "Loader._plan"),
    ("etl.load.protocol", "CommitProtocol.decide"), ("etl.load.protocol", "CommitProtocol.log"),
    ("etl.load.protocol", "CommitProtocol.apply"), ("etl.load.protocol", "key_map_changes"),
    ("etl.load.protocol", "CommitProtocol.finish_apply"),  # a step waiting for the apply beside it
    ("etl.load.protocol", "summarise_outcomes"), ("etl.load.ledger", "Ledger.record"), ("etl.load.ledger", "Ledger.state"),
    ("etl.stream", "Stream._save"), ("etl.stream", "Stream._heartbeat"),
    # The partitioned join's side of a step: its submit, and in it the probes, the wait buffer's
    # append and the resident copy's sync (admissions); the commit's fold into the resident copy.
    ("etl.strategies.partitioned.join", "PartitionedJoin.submit"), ("etl.strategies.partitioned.join", "PartitionedJoin._probe"),
    ("etl.strategies.partitioned.join", "PartitionedJoin.keys_committed"),
    ("etl.strategies.partitioned.wait_buffer", "WaitBuffer.append"),
    ("etl.strategies.partitioned.resident", "ResidentSet.sync"), ("etl.strategies.partitioned.resident", "ResidentSet.fold"),
]


class Timer:
    """Wraps the named calls; ``piece()`` closes a piece's figures."""

    def __init__(self, spark, root: Path | None) -> None:
        """``spark`` ``None``: seconds and calls only (a session not at hand when the calls are wrapped)."""
        self.spark, self.root = spark, root
        self.current: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0, 0])
        self.pieces: list[dict] = []
        self.undo = []

    def wrap(self, module: str, attr: str, closes_piece: bool = False) -> None:
        owner = importlib.import_module(module)
        *path, name = attr.split(".")
        for p in path:
            owner = getattr(owner, p)
        real = getattr(owner, name)
        label = attr.split(".")[-1] if "." in attr and attr.split(".")[0] in ("jobs",) else attr

        @functools.wraps(real)
        def timed(*args, **kwargs):
            jobs0, commits0, t0 = *self._counts(), time.perf_counter()
            result = None
            try:
                result = real(*args, **kwargs)
                return result
            finally:
                # A call in the apply's thread (apply_concurrently) ran beside the step: apart.
                label_now = label if threading.current_thread() is threading.main_thread() else f"{label} (beside)"
                if closes_piece and result is not None:  # the updates the load step released
                    self.current["released"] = [float(sum(b.updates_in for b in result.batches)), 0, 0, len(result.batches)]
                figures = self.current[label_now]
                figures[0] += time.perf_counter() - t0
                jobs1, commits1 = self._counts()
                figures[1] += jobs1 - jobs0
                figures[2] += commits1 - commits0
                figures[3] += 1
                if closes_piece:
                    self.piece()

        setattr(owner, name, timed)
        self.undo.append((owner, name, real))

    def _counts(self) -> tuple[int, int]:
        if self.spark is None:
            return 0, 0
        return jobs_started(self.spark), delta_commits(self.root)

    def piece(self) -> None:
        self.pieces.append({k: list(v) for k, v in self.current.items()})
        self.current.clear()

    def restore(self) -> None:
        for owner, name, real in reversed(self.undo):
            setattr(owner, name, real)


def stream_of(args) -> StreamSpec:
    """The stream every strategy loads (``--skew``: one of ``etl.generator.SKEWS``)."""
    return StreamSpec(start=T0, duration_s=60 * args.minutes, rate=args.rate, seed=5, key_domain=args.keys,
                      **skew(args.skew))


def run_strategy(spark, base: EtlConfig, work: Path, strategy: str, args) -> dict:
    name = strategy.replace(":", "-").replace("=", "")
    join_strategy, settings = parse_run(strategy)  # a variant: ``partitioned-range:h_mark=100000``
    cfg = base.replace(warehouse_root=str(work / name / "warehouse"), runs_root=str(work / name / "runs"),
                       landing_root=str(work / name / "landing"), join_strategy=join_strategy, **settings)
    run = Interval(T0, T0 + timedelta(minutes=args.minutes))
    seeding = time.perf_counter()
    seed_direct(spark, cfg, args.keys, Interval(T0 - timedelta(minutes=args.minutes), T0), progress=note)
    note(f"{strategy}: {args.keys} keys seeded in {time.perf_counter() - seeding:.0f} s")
    sizes = partitioned_settings(args.rate, cfg.micro_batch_seconds) if args.sizes == "window" else {}
    sizes = {"memory_budget": sum(keymap_segment_sizes(spark, cfg).values()) // 10, **sizes}  # a tenth of its rows
    cfg = cfg.replace(**{k: v for k, v in sizes.items() if k not in settings})  # a variant's own setting wins
    generate_stream(stream_of(args), cfg.landing_path, piece_seconds=cfg.piece_seconds)
    timer = Timer(spark, cfg.warehouse_path)
    clock = [T0]

    def sleep(seconds: float) -> None:
        clock[0] += timedelta(seconds=max(seconds, 0.001))

    for module, attr in STEPS + CALLS:
        timer.wrap(module, attr, closes_piece=attr == "Loader.load_ready")
    applies = wrap_applies(spark, cfg.warehouse_path, timer)
    try:
        started = time.perf_counter()
        stream = Stream(spark, cfg, clock=lambda: clock[0], sleep=sleep, progress=note)
        stream.run(start=run.start, until=run.end)
        whole = time.perf_counter() - started
    finally:
        timer.restore()
    steady = timer.pieces[2:-2]
    labels = [a.split(".")[-1] if a.startswith("jobs.") else a for _, a in STEPS + CALLS]
    per_piece = {label: medians(steady, label) for label in labels}
    totals = [sum(p.get(s, [0.0])[0] for s in ("ingest_pieces", "Loader.load_ready")) for p in steady]
    released = [p for p in steady if p.get("released", [0])[0] > 0]
    per_release = {label: medians(released, label)
                   for label in ("Loader.load_ready", "CommitProtocol.decide", "CommitProtocol.log", "PartitionedJoin.submit",
                                 "PartitionedJoin._probe", "PartitionedJoin.keys_committed", "ResidentSet.sync",
                                 "ResidentSet.fold", "WaitBuffer.append")} if released else {}
    return {"strategy": strategy, "pieces": len(timer.pieces), "pieces_measured": len(steady),
            "released_pieces": len(released), "per_released_piece": per_release,
            "pieces_raw": [{k: [round(v[0], 3), *v[1:]] for k, v in p.items() if v[3]} for p in timer.pieces],
            "seconds_whole_run": round(whole, 1), "seconds_per_piece": round(statistics.median(totals), 3),
            "settings": {**{k: getattr(cfg, k) for k in ("memory_budget", "tau")}, "n_part": configured_n_part(cfg),
                         **run_sizes(stream.loader.strategy)},
            "per_piece": per_piece, "coalesced_applies": applies}


def medians(pieces: list[dict], label: str) -> dict:
    """The medians over ``pieces`` of one call's figures (a piece that did not call it counts 0)."""
    rows = [p.get(label, [0.0, 0, 0, 0]) for p in pieces]
    return {"seconds": round(statistics.median(r[0] for r in rows), 3), "jobs": statistics.median(r[1] for r in rows),
            "commits": statistics.median(r[2] for r in rows), "calls": statistics.median(r[3] for r in rows)}


def note(message: str) -> None:
    print(f"[stream_piece] {message}", file=sys.stderr, flush=True)


def wrap_applies(spark, root: Path, timer: Timer) -> list[dict]:
    """Each coalesced MERGE pair of a logged tail (``CommitProtocol._apply_rows``, in turn or in
    the thread beside the decisions: ``beside``), with the updates and batches it applied, its
    seconds, Spark jobs and Delta commits (beside, the jobs and commits of the decisions that ran
    meanwhile are counted too)."""
    real, applies = CommitProtocol._apply_rows, []

    @functools.wraps(real)
    def timed(self, tail, *args, **kwargs):
        batches = list(tail.batches)
        if not batches:
            return real(self, tail, *args, **kwargs)
        jobs0, commits0, t0 = jobs_started(spark), delta_commits(root), time.perf_counter()
        try:
            return real(self, tail, *args, **kwargs)
        finally:
            applies.append({"batches": len(batches), "updates": sum(b.result.updates_in for b in batches),
                            "seconds": round(time.perf_counter() - t0, 3), "jobs": jobs_started(spark) - jobs0,
                            "commits": delta_commits(root) - commits0,
                            "beside": threading.current_thread() is not threading.main_thread()})

    CommitProtocol._apply_rows = timed
    timer.undo.append((CommitProtocol, "_apply_rows", real))
    return applies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=int, default=2, help="minutes of arrivals: one run of the schedule")
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--skew", choices=sorted(SKEWS), default="default", help="the stream's PQRS skew (etl.generator.SKEWS)")
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--piece-seconds", type=int, default=5)
    ap.add_argument("--micro-batch-seconds", type=int, default=10)
    ap.add_argument("--apply-interval-seconds", type=int, default=30)
    ap.add_argument("--strategies", default="native,partitioned-range",
                    help="strategies, or variants strategy:name=value (e.g. partitioned-range:h_mark=1000000: one-window "
                         "batches; the names of benchmarks.report.VARIANT_SETTINGS), one run each on the same stream")
    ap.add_argument("--n-part", type=int, default=64, help="key_map's segments (full size: 1024)")
    ap.add_argument("--sizes", choices=("window", "derived"), default="window",
                    help="the partitioned join's wait buffer and n_invoke: one trigger interval, or derived from the memory")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--out", default="docs/results/stream_piece.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-stream-piece-"))
    base = EtlConfig(warehouse_root=str(work / "wh"), gx_root=str(work / "gx"), spark_master="local[2]",
                     spark_shuffle_partitions=2, key_domain=args.keys, schedule=f"*/{args.minutes} * * * *",
                     piece_seconds=args.piece_seconds, micro_batch_seconds=args.micro_batch_seconds,
                     apply_interval_seconds=args.apply_interval_seconds, stream_grace_seconds=0,
                     n_part=args.n_part, spark_driver_memory=args.driver_memory,
                     split_segments_per_run=0)  # as the recorded runs, before the split at a run's end
    spark = build_spark_session(base, app_name="bench-stream-piece", master="local[2]")
    try:
        rows = []
        for strategy in args.strategies.split(","):
            row = run_strategy(spark, base, work, strategy, args)
            print(json.dumps(row), flush=True)
            rows.append(row)
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out")
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"command": f"python -m benchmarks.stream_piece {options}",
                                              "stream": stream_of(args).described(), "runs": rows}, indent=2) + "\n")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
