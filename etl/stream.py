"""The always-on loader (``etl stream``): one Spark session and one loader for as long as it runs.

It loads the runs a scheduled DAG would (the schedule's data intervals, ``stream_plan``), each
piece of a run as soon as its input pieces (``piece_seconds``) have closed: ingest them, then load the
batches their arrival windows settle, keeping the join strategy's state (resident segments, wait
buffer, MESHJOIN queue) from one piece to the next. At the run's end it flushes and writes the
run's summaries, as ``etl ingest`` and ``etl load`` would have, so the DAG run of that interval only
validates and reports it. The same landed input gives the same tables whichever loaded it.

Between pieces it holds no lock (maintenance and backfills can run; on an object store its
ingest takes the lock for its writes, as every ingest does there); it records how far it has
ingested the open run in ``<meta_root>/stream/<run_key>.json``, so a restart resumes there, and
its liveness in ``<meta_root>/stream/heartbeat.json`` (the DAG waits for a live stream instead of
loading the interval itself). ``stop()`` (SIGTERM) ends it after the piece being loaded.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from etl import jobs
from etl.core.config import ConfigError, EtlConfig
from etl.core.interval import Interval, overlapping, run_intervals
from etl.core.stream_plan import (
    granularity_problem,
    first_run,
    fresh_attempt,
    misaligned,
    next_wake,
    ready_through,
    schedule_interval,
    stream_overlap_advice,
    windows_before,
)
from etl.io.files import write_json
from etl.io.kafka import KafkaUnavailable, KnownRanges, check_broker
from etl.io.landing import Skipped
from etl.io.lock import WarehouseLocked
from etl.io.runs import OverlappingRunError, check_no_overlap, has_started, known_runs, run_finished, snapshot_runs
from etl.io.stream_status import HEARTBEAT, hold_stream_lock, stream_dir
from etl.io.tables import ensure_tables
from etl.load.loader import Loader
from etl.load.results import BatchResult, LoadResult

log = logging.getLogger(__name__)


class RunStartedElsewhere(RuntimeError):
    """The stream's next run was started by another loader (a DAG run, ``etl ingest`` or ``etl load``)."""


def open_runs(cfg: EtlConfig) -> list[Path]:
    """The stream's run state files: a run it opened and has not finished (resumed first)."""
    return sorted(p for p in stream_dir(cfg).glob("*.json") if p.name != HEARTBEAT)


def runs_on_record(cfg: EtlConfig) -> set[str]:
    """The runs loaded (or being loaded) as the warehouse's files say, read without Spark: load
    summaries under runs_root and run snapshots under meta_root. A run only ingested is left to the
    check on the tables once Spark is up, which says to load or discard it."""
    keys = set(snapshot_runs(cfg))
    if cfg.runs_path.is_dir():
        keys |= {p.name for p in cfg.runs_path.iterdir() if (p / "load.json").is_file()}
    return keys


def check_stream_start(cfg: EtlConfig, start: datetime | None, now: datetime | None = None) -> None:
    """Before Spark starts (minutes on 2 cores): refuse a first run that overlaps a run on record,
    saying what to do, and a second stream on the warehouse. A stream with an open run resumes it."""
    hold_stream_lock(cfg).close()
    if open_runs(cfg):
        return
    if not cfg.warehouse_on_object_store and not (Path(cfg.table_path("batch_ledger")) / "_delta_log").is_dir():
        return  # no warehouse (made anew since those runs): nothing is loaded
    known = run_intervals(runs_on_record(cfg))
    planned = first_run(cfg.schedule, start, list(known.values()), lambda: now or datetime.now(timezone.utc))
    others = [known[k] for k in overlapping(planned, known)]
    if others:
        raise OverlappingRunError(stream_overlap_advice(cfg.schedule, planned, others, list(known.values())))


class Stream:
    """Runs until ``stop()`` or ``until``; ``clock`` and ``sleep`` are injectable for tests."""

    def __init__(self, spark, cfg: EtlConfig, strategy: str | None = None, clock=None, sleep=None, progress=None) -> None:
        problem = granularity_problem(cfg.piece_seconds, cfg.micro_batch_seconds)
        if problem:
            raise ConfigError(problem)
        self.spark, self.cfg = spark, cfg
        self.loader = Loader(spark, cfg, strategy)
        self._stop = threading.Event()
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.sleep = sleep or self._stop.wait
        self.progress = progress or (lambda message: log.info(message))
        self.finished: list[dict] = []  # load summaries of the runs finished by this process
        self.known = KnownRanges()  # the Kafka neighbours of the next piece, carried from the last

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------------ the loop

    def run(self, start: datetime | None = None, until: datetime | None = None) -> list[dict]:
        """Load run after run from ``start`` (default: the open run, else the one after the last
        run loaded, else the one now) until ``stop()``, or until the runs before ``until`` are done."""
        one_stream = hold_stream_lock(self.cfg)
        try:
            if not self._waiting_for_kafka("the stream starts", lambda: check_broker(self.spark, self.cfg)):
                return self.finished
            ensure_tables(self.spark, self.cfg)
            interval = self._first_run(start)
            while not self.stopping and (until is None or interval.start < until):
                if self._load_run(interval):
                    interval = schedule_interval(self.cfg.schedule, interval.end)
        finally:
            try:
                self._heartbeat(None, stopped=True)
            finally:
                one_stream.close()
        return self.finished

    def _first_run(self, start: datetime | None) -> Interval:
        opened = open_runs(self.cfg)
        if opened:
            return Interval.from_run_key(opened[0].stem)
        known = run_intervals(known_runs(self.spark, self.cfg)) if start is None else {}
        return first_run(self.cfg.schedule, start, list(known.values()), self.clock)

    def _state_path(self, interval: Interval) -> Path:
        return stream_dir(self.cfg) / f"{interval.run_key}.json"

    def _open(self, interval: Interval) -> dict | None:
        """The run's stream state; a new run is claimed (``None``: it is finished already)."""
        path = self._state_path(interval)
        if path.exists():
            return json.loads(path.read_text())
        known = known_runs(self.spark, self.cfg)
        if interval.run_key in known:
            if self._finished(interval):
                self.progress(f"run {interval.run_key} is loaded already: next")
                return None
            raise RunStartedElsewhere(
                f"run {interval.run_key} was started by another loader (a DAG run, etl ingest or etl load); "
                f"finish it (etl run --start {interval.start:%Y-%m-%dT%H:%M} --end {interval.end:%Y-%m-%dT%H:%M}) "
                f"and start the stream again")
        others = overlapping(interval, known)
        ingested_only = {k for k in others if not has_started(self.spark, self.cfg, k)}
        if ingested_only:  # load it or discard it: check_no_overlap's advice, about one of these
            check_no_overlap(self.spark, self.cfg, interval, ingested_only)
        if others:
            runs = run_intervals(known)
            raise OverlappingRunError(stream_overlap_advice(self.cfg.schedule, interval, [runs[k] for k in others], list(runs.values())))
        # ``attempted_through``: the furthest end any attempt at an ingest of the run reached, saved
        # before it writes (a state an older version wrote has none: no piece of it is fresh).
        state = {"run_key": interval.run_key, "ingested_through": interval.start.isoformat(), "skipped": [],
                 "batches": [], "skipped_batches": 0, "recovered_batches": 0, "piece_seconds": self.cfg.piece_seconds,
                 "attempted_through": interval.start.isoformat()}
        write_json(path, state)
        return state

    def _save(self, interval: Interval, state: dict, result: LoadResult) -> None:
        """On disk when it returns: a host's crash must not leave the run's state empty, nor lose
        ``attempted_through`` while the rows it protects survive."""
        state.update(batches=[asdict(b) for b in result.batches], skipped_batches=result.skipped_batches,
                     recovered_batches=result.recovered_batches)
        write_json(self._state_path(interval), state, durable=True)

    def _finished(self, interval: Interval) -> bool:
        """Loaded by anyone: its load summary is written (at a load's end) or its flush committed."""
        return jobs.read_summary(self.cfg, interval, "load") is not None or run_finished(self.spark, self.cfg, interval.run_key)

    def _load_run(self, interval: Interval) -> bool:
        """Load the run piece by piece; ``True`` once it is finished, ``False`` when stopped first."""
        state = self._open(interval)
        if state is None:
            return True
        mbs, piece_s = self.cfg.micro_batch_seconds, self.cfg.piece_seconds
        through = datetime.fromisoformat(state["ingested_through"])
        started_with = state.get("piece_seconds", 60)
        if through < interval.end and (started_with != piece_s or misaligned(through, piece_s)):
            raise ConfigError(
                f"run {interval.run_key} was read up to {through:%H:%M:%S} with piece_seconds = {started_with}, not "
                f"{piece_s}: finish it with --set piece_seconds={started_with}, then change the setting")
        # What the run's load did so far, kept with its state: a restart's summary counts it all.
        result = LoadResult(interval.run_key, self.loader.spec.name, [BatchResult(**b) for b in state["batches"]],
                            state["skipped_batches"], state["recovered_batches"])
        counts: dict[int, int] = {}  # updates per window ingested since the last load step
        held: list = []  # and those windows' rows, in memory as written (the loader releases them)
        while True:
            if self.stopping:
                return False
            if through < interval.end:
                now = self.clock()
                ready = ready_through(interval, mbs, through, now, self.cfg.stream_grace_seconds, piece_s)
                if ready is None:
                    self._heartbeat(state)
                    wake = next_wake(interval, mbs, through, self.cfg.stream_grace_seconds, piece_s)
                    self.sleep(min(max((wake - now).total_seconds(), 0.0), self.cfg.stream_heartbeat_seconds))
                    continue
                piece = self._waiting_for_kafka(
                    f"{_span(through, ready, piece_s)} of run {interval.run_key} is read",
                    self._ingest(interval, state, result, through, ready), state)
                if piece is None:
                    return False
                state["skipped"] += piece["skipped"]
                state["kafka_records_lost"] = state.get("kafka_records_lost", 0) + piece.get("kafka_records_lost", 0)
                state["ingested_through"] = ready.isoformat()
                self._save(interval, state, result)
                counts.update(piece["batch_counts"])
                held.append(piece.pop("held"))
                self.progress(f"run {interval.run_key}: {_span(through, ready, piece_s)} ingested "
                              f"({piece['valid']} valid, {piece['rejected']} rejected)")
                through = ready
            step = self._load_ready(interval, windows_before(interval, mbs, through), counts, held)
            if step is None:
                return False
            counts, held = {}, []
            result.batches += step.batches
            result.skipped_batches += step.skipped_batches
            result.recovered_batches += step.recovered_batches
            self._save(interval, state, result)
            self._heartbeat(state)
            if through >= interval.end:  # the last piece: the run is flushed and ended
                break
        self._finish(interval, state, result)
        return True

    def _ingest(self, interval: Interval, state: dict, result: LoadResult, start: datetime, end: datetime):
        """The ingest of ``[start, end)``, as an action to try until Kafka answers. Only a first
        attempt that starts where every earlier attempt ended (``attempted_through``, saved to disk
        before it writes) appends the pieces' rows: a retry, or a restart after a crash in the middle
        of an attempt, writes them over whatever that attempt left, including a later restart whose
        pieces end before that attempt's did."""
        fresh, state["attempted_through"] = fresh_attempt(state.get("attempted_through"), start, end, interval.end)
        attempts = [fresh]
        self._save(interval, state, result)

        def attempt() -> dict:
            fresh = attempts.pop() if attempts else False
            return jobs.ingest_pieces(self.spark, self.cfg, interval, start, end, fresh=fresh, hold=True, known=self.known)

        return attempt

    def _waiting_for_kafka(self, what: str, action, state: dict | None = None):
        """``action()``; while the Kafka cluster does not answer, or, on an object store, a load or
        maintenance holds the lock the ingest takes there, said, then tried again after a pause, as
        a service waits for a dependency (``None``: stopped while waiting)."""
        while True:
            try:
                return action() or True
            except (KafkaUnavailable, WarehouseLocked) as exc:
                if self.stopping:
                    return None
                pause = min(30.0, max(1.0, self.cfg.stream_heartbeat_seconds))
                self.progress(f"{exc}; retrying in {pause:.0f} s until {what}")
                self._heartbeat(state)
                self.sleep(pause)
                if self.stopping:
                    return None

    def _load_ready(self, interval: Interval, closed: int, counts: dict[int, int], held: list) -> LoadResult | None:
        """The loader's step, waiting while another load or maintenance holds the lock."""
        while True:
            try:
                started = time.monotonic()
                step = self.loader.load_ready(interval, closed, counts=counts, held=held)
            except WarehouseLocked as exc:
                if self.stopping:
                    return None
                self.progress(f"waiting for the load lock: {exc}")
                self.sleep(min(5.0, self.cfg.stream_heartbeat_seconds))
                continue
            if step.batches:
                self.progress(f"run {interval.run_key}: {len(step.batches)} batches committed "
                              f"({sum(b.updates_in for b in step.batches)} updates) in {time.monotonic() - started:.1f} s")
            return step

    def _finish(self, interval: Interval, state: dict, result: LoadResult) -> None:
        """The run's summaries, as ``etl ingest`` and ``etl load`` write them, then forget its state."""
        skipped = [Skipped(s["name"], s["reason"]) for s in state["skipped"]]
        ingest_summary = jobs.run_ingest_summary(self.spark, self.cfg, interval, skipped, state.get("kafka_records_lost", 0))
        jobs.write_summary(self.cfg, interval, "ingest", ingest_summary)
        summary = result.summary()
        summary["rejected"] = ingest_summary["rejected"]
        summary["loaded_by"] = "stream"
        jobs.write_summary(self.cfg, interval, "load", summary)
        self._state_path(interval).unlink(missing_ok=True)
        self.finished.append(summary)
        self.progress(f"run {interval.run_key} finished: {summary['outcomes']}, {summary['keys_allocated']} keys allocated")
        try:
            jobs.check_rejections(self.cfg, interval, ingest_summary)
        except jobs.RejectionCeilingExceeded as exc:
            log.error("%s (loaded by the stream: the DAG run of this interval reports it)", exc)

    def _heartbeat(self, state: dict | None, stopped: bool = False) -> None:
        write_json(stream_dir(self.cfg) / HEARTBEAT, {
            "pid": os.getpid(), "host": socket.gethostname(), "at_epoch": time.time(),
            "run_key": state["run_key"] if state else None,
            "ingested_through": state["ingested_through"] if state else None,
            "stopped": stopped,
        })


def _span(start: datetime, end: datetime, piece_seconds: int) -> str:
    """``minutes 10:00-10:05``, or ``10:00:05-10:00:10`` when a piece is shorter than a minute."""
    if piece_seconds < 60:
        return f"{start:%H:%M:%S}-{end:%H:%M:%S}"
    return f"minutes {start:%H:%M}-{end:%H:%M}"
