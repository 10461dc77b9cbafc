"""The stages of a run (ingest, load, validate, report), each usable from the CLI, a DAG or a test.

Each stage writes a JSON summary under ``runs_root/<run_key>/`` so the next stage, and the person
reading the Airflow log, can see what happened without opening Spark.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from pyspark.sql import functions as F

from etl.core.config import ConfigError, EtlConfig
from etl.core.delays import describe as describe_delays
from etl.core.faults import crash_point
from etl.core.interval import Interval
from etl.core.offsets import PREFIX
from etl.core.spark_conf import COMMIT_SQL_SETTINGS
from etl.core.stream_plan import is_window_boundary, windows_before
from etl.ingest import (
    EMPTY_SHA256,
    batch_index,
    check_kafka_ranges,
    check_landed_files,
    to_ingested,
    to_landed_files,
    to_rejected,
)
from etl.io.files import write_json
from etl.io.kafka import KafkaPlan, KnownRanges, check_broker, client_properties, plan_ranges, read_failure
from etl.io.landing import landing_file, move_tail
from etl.io.lock import LoadLock
from etl.io.runs import (
    LandingChanged,
    check_no_overlap,
    describe_changes,
    has_started,
    known_runs,
    landing_changes,
    recorded_files,
    scan_sources,
    summary_path,
)
from etl.io.sequence_store import check_sequence_definition
from etl.io.spark import sql_settings
from etl.io.tables import ensure_tables, open_tables, read
from etl.load.loader import Loader
from etl.load.results import HeldWindows
from etl.quality.gate import failed_critical, failed_warnings, run_load_gate

log = logging.getLogger(__name__)


class RejectionCeilingExceeded(RuntimeError):
    """More of the run's lines were rejected than ``max_rejected_fraction`` allows."""


class ValidationFailed(RuntimeError):
    """The quality gate failed after a load."""


class RunAlreadyLoaded(RuntimeError):
    """The run has started loading: what it loaded stays."""


def run_dir(cfg: EtlConfig, interval: Interval) -> Path:
    path = cfg.runs_path / interval.run_key
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_summary(cfg: EtlConfig, interval: Interval, stage: str, summary: dict) -> Path:
    return write_json(run_dir(cfg, interval) / f"{stage}.json", summary)


def read_summary(cfg: EtlConfig, interval: Interval, stage: str) -> dict | None:
    path = summary_path(cfg, interval.run_key, stage)
    return json.loads(path.read_text()) if path.exists() else None


def ingest(spark, cfg: EtlConfig, interval: Interval, progress=None) -> dict:
    """Landed files of the interval -> ``ingested_updates``, ``rejected_updates`` and their
    fingerprints in ``landed_files`` (replaced, not appended). Refused before any write when the
    landing zone cannot be read, when the interval overlaps another run, and when the run has
    started loading and its landing files changed since (docs/ingest.md). ``progress`` hears what
    is read and when it is written: an ingest of many files takes minutes.

    On an object store the ingest holds the entity's load lock: Delta's S3 log store lets only one
    driver commit to a table at a time (two drivers' commits of one version: one is lost), and
    maintenance compacts these tables under the lock (docs/deployment.md)."""
    with _writes_locked(cfg, f"ingest of {interval.run_key}"):
        return _ingest(spark, cfg, interval, progress)


def _writes_locked(cfg: EtlConfig, owner: str):
    """The entity's load lock where a table's commits must come from one driver at a time (an
    object store's log store); nothing on a POSIX warehouse, whose commits are atomic renames."""
    if not cfg.warehouse_on_object_store:
        return nullcontext()
    # Not recorded as a holder: an ingest writes neither the ledger nor key_map, so the always-on
    # loader keeps its state between its pieces (Loader._alone) across its own ingests.
    return LoadLock(cfg.meta_path, owner, cfg.lock_stale_seconds, records_holder=False)


def _ingest(spark, cfg: EtlConfig, interval: Interval, progress=None) -> dict:
    scan = scan_sources(cfg, interval.start, interval.end)
    check_broker(spark, cfg)
    check_sequence_definition(cfg, open_tables(spark, cfg))
    ensure_tables(spark, cfg)
    known = known_runs(spark, cfg)
    check_no_overlap(spark, cfg, interval, known)
    check_piece_seconds(cfg, interval)
    # A run never ingested (by this version) cannot have started loading: skip the three reads.
    started = interval.run_key in known and has_started(spark, cfg, interval.run_key)
    if started:
        changes = landing_changes(spark, cfg, interval, scan.files)
        if changes:
            raise LandingChanged(describe_changes(interval, changes))
    kafka = plan_ranges(spark, cfg, interval, interval.start, interval.end, decided=started)
    if progress is not None:
        size = sum(os.path.getsize(f.path) for f in scan.files)
        progress(f"reading {len(scan.files)} landing files ({size / 1e6:.1f} MB)"
                 + (f" and {len(kafka.ranges)} Kafka ranges" if kafka.ranges else ""))
    run = f"run_key = '{interval.run_key}'"
    tally = _write_checked(spark, cfg, interval, scan, kafka, interval.start, interval.end, run, run, run, progress)
    summary = ingest_summary(interval, len(scan.files), scan.skipped + kafka.skipped, tally.lines, tally.blank_lines,
                             tally.reasons, ranges=len(kafka.ranges), kafka_lost=kafka.lost_records,
                             piece_seconds=cfg.piece_seconds)
    write_summary(cfg, interval, "ingest", summary)
    check_rejections(cfg, interval, summary)
    return summary


def _write_checked(spark, cfg: EtlConfig, interval: Interval, scan, kafka: KafkaPlan, a, b, updates_where: str,
                   files_where: str, rejected_where: str, progress=None, fresh: bool = False,
                   hold: bool = False, known: KnownRanges | None = None) -> "Tally":
    """Check the scanned files' lines and the Kafka ranges' records, and write them over the rows
    the three predicates select (a run's partition, or the always-on loader's minutes of it):
    rerunning writes the same rows. A recorded Kafka range must read as it did (``LandingChanged``).
    ``fresh``: nothing was ever written where the predicates select (the always-on loader's first
    attempt at these pieces), so the rows are appended, without a replace's search for rows to
    remove and its check of every row written (a commit of about 0.3 s instead of 1.7-2 s), and a
    table with nothing to append is not written at all. Returns what was read, counted (``Tally``),
    and with ``hold`` the ``ingested_updates`` rows written, held in memory (``Tally.held``)."""
    for s in scan.skipped + kafka.skipped:
        log.warning("skipped %s: %s", s.name, s.reason)
    checked = check_landed_files(spark, cfg, scan.files)
    try:
        records = check_kafka_ranges(spark, cfg, kafka.ranges, kafka.markers)
        if records is not None:
            checked = checked.unionByName(records)
        checked = checked.cache()
        with sql_settings(spark, COMMIT_SQL_SETTINGS):  # a few rows out: adaptive execution made each stage a job (5, not 1)
            tally = _tally(checked, interval, cfg)  # read once: a broker that stops answering fails the run here, before any write
        if progress is not None:  # a row per line, and one per file or Kafka range
            progress(f"checked {tally.rows - len(scan.files) - len(kafka.ranges)} lines; "
                     f"writing ingested_updates, rejected_updates, landed_files")
    except Exception as exc:
        checked.unpersist()
        meaning = (read_failure(exc, [p.range for p in kafka.ranges], interval.run_key, client_properties(cfg))
                   if kafka.ranges else None)
        if meaning is None:
            raise
        raise meaning from None
    try:
        lines = checked.where(F.col("kind") == "line")
        valid = lines.where(F.col("reject_reason").isNull())
        rejected = lines.where(F.col("reject_reason").isNotNull())
        files = checked.where(F.col("kind") == "file")
        if kafka.recorded:
            _check_recorded(interval, kafka.recorded, files)
        tables = open_tables(spark, cfg)
        ingested = to_ingested(valid, interval, cfg.micro_batch_seconds, cfg.entity_model, cfg.piece_seconds)
        if hold:  # the rows the table gets, computed once: written from memory, and kept for the load step
            ingested = tally.held = tables.conform(ingested, "ingested_updates").localCheckpoint(eager=True)

        def write(rows, table: str, where: str, n_rows: int) -> None:
            if not fresh:
                tables.replace_where(rows, table, where)
            elif n_rows:
                tables.append(rows, table)

        write(ingested, "ingested_updates", updates_where, sum(tally.windows.values()))
        crash_point("ingest.ingested_written")
        write(to_rejected(rejected, interval), "rejected_updates", rejected_where, sum(tally.reasons.values()))
        crash_point("ingest.rejected_written")
        write(to_landed_files(files, interval), "landed_files", files_where, tally.files)
        if known is not None:  # what the piece recorded, carried to the next (``fresh`` only)
            known.written(tables, kafka, b, kafka_rows=tally.files - len(scan.files))
    except BaseException:
        if known is not None:
            known.forget()
        if tally.held is not None:
            tally.held.unpersist()
            tally.held = None
        raise
    finally:
        checked.unpersist()
    return tally


@dataclass
class Tally:
    """The checked rows of an ingest, counted: all of them, the valid ones per window, the
    rejected ones per reason, and the files' rows with their line counts."""

    rows: int = 0
    windows: dict[int, int] = field(default_factory=dict)
    reasons: Counter = field(default_factory=Counter)
    files: int = 0
    lines: int = 0
    blank_lines: int = 0
    held: object = None  # with ``hold``: the ingested_updates rows written, in memory


def _tally(checked, interval: Interval, cfg: EtlConfig) -> Tally:
    """Everything the ingest reports and the load step plans from, in one aggregate: the pass that
    reads the input (one job where four counted it before)."""
    valid = (F.col("kind") == "line") & F.col("reject_reason").isNull()
    window = F.when(valid, batch_index(interval, cfg.micro_batch_seconds, cfg.piece_seconds))
    groups = checked.groupBy("kind", "reject_reason", "reject_field", window.alias("window")).agg(
        F.count(F.lit(1)).alias("n"), F.sum("file_lines").alias("lines"), F.sum("file_blank_lines").alias("blank"))
    out = Tally()
    for g in groups.collect():
        out.rows += g.n
        if g.kind == "file":
            out.files += g.n
            out.lines += int(g.lines or 0)
            out.blank_lines += int(g.blank or 0)
        elif g.kind == "line" and g.reject_reason is None:
            out.windows[int(g.window)] = out.windows.get(int(g.window), 0) + g.n
        elif g.kind == "line":
            out.reasons[(g.reject_reason, g.reject_field)] += g.n
    return out


def _check_recorded(interval: Interval, recorded: dict[str, tuple[int, str]], files) -> None:
    """A recorded Kafka range reads as it did: the broker deleted or rewrote records otherwise."""
    read_now = {r.file_name: (r.file_bytes, r.file_sha256)
                for r in files.where(F.col("file_name").isin(list(recorded))).select("file_name", "file_bytes", "file_sha256").collect()}
    differ = sorted(name for name, fp in recorded.items() if read_now.get(name, (0, EMPTY_SHA256)) != fp)
    if differ:
        raise LandingChanged(
            f"Kafka ranges of run {interval.run_key} no longer read as they did when the run was ingested "
            f"(records deleted by retention or compaction, or a topic recreated): {', '.join(differ)}")


def check_piece_seconds(cfg: EtlConfig, interval: Interval) -> None:
    """A run is read again with the piece length it was read with: a line stamped outside its
    piece keeps its window only so, and its batches are in the ledger by window."""
    earlier = (read_summary(cfg, interval, "ingest") or {}).get("piece_seconds")
    if earlier is not None and earlier != cfg.piece_seconds:
        raise ConfigError(
            f"run {interval.run_key} was ingested with piece_seconds = {earlier}, not {cfg.piece_seconds}: rerun it with "
            f"--set piece_seconds={earlier} (or, if it has not loaded, etl discard it first)")


def ingest_summary(interval: Interval, files: int, skipped, n_lines: int, n_blank: int, reasons: Counter,
                   ranges: int = 0, kafka_lost: int = 0, piece_seconds: int | None = None) -> dict:
    """``reasons``: rejected lines per (reason, field), the field ``None`` for a reason about the
    whole line."""
    n_rejected = sum(reasons.values())
    by_reason: Counter = Counter()
    by_field: dict[str, dict[str, int]] = {}
    for (reason, column), n in sorted(reasons.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        by_reason[reason] += n
        if column is not None:
            by_field.setdefault(reason, {})[column] = n
    return {
        "run_key": interval.run_key,
        "interval": [interval.start.isoformat(), interval.end.isoformat()],
        "files": files,
        "kafka_ranges": ranges,
        "kafka_records_lost": kafka_lost,  # deleted by the broker before any run read them (skipped names them)
        "skipped": [{"name": s.name, "reason": s.reason} for s in skipped],
        "lines": n_lines,
        "blank_lines": n_blank,
        "valid": n_lines - n_rejected,
        "rejected": n_rejected,
        "rejected_by_reason": dict(sorted(by_reason.items())),
        "rejected_by_field": by_field,  # reason -> field of the line -> lines
        **({"piece_seconds": piece_seconds} if piece_seconds is not None else {}),
    }


def check_rejections(cfg: EtlConfig, interval: Interval, summary: dict) -> None:
    n_rejected, n_lines = summary["rejected"], summary["lines"]
    if n_lines and n_rejected / n_lines > cfg.max_rejected_fraction:
        raise RejectionCeilingExceeded(
            f"{n_rejected} of {n_lines} lines of run {interval.run_key} were rejected "
            f"({n_rejected / n_lines:.1%} > max_rejected_fraction {cfg.max_rejected_fraction:.1%}); "
            f"see the rejected_updates table, reasons: {summary['rejected_by_reason']}"
        )


def ingest_pieces(spark, cfg: EtlConfig, interval: Interval, start, end, fresh: bool = False,
                  hold: bool = False, known: KnownRanges | None = None) -> dict:
    """The always-on loader's ingest: the input pieces of ``[start, end)`` of the run (landing
    files, Kafka ranges decided now), whole arrival windows, written over the run's rows of those
    windows and pieces (a restart writes the same rows again), or, when ``fresh`` (the caller
    knows no earlier attempt wrote any of them), appended. Together the pieces are the rows
    ``ingest`` writes at once. The summary's ``batch_counts`` are the valid rows per window, for
    the load step (``Loader.load_ready``'s ``counts``); with ``hold``, its ``held`` the rows
    written, held in memory (``HeldWindows``: the load step's ``held``), which the caller
    releases. ``known``: the Kafka neighbours the caller carries from its last piece
    (``etl.io.kafka.KnownRanges``), used and carried on for a ``fresh`` piece, forgotten otherwise.
    On an object store it holds the entity's load lock, as ``ingest`` does."""
    with _writes_locked(cfg, f"ingest of pieces of {interval.run_key}"):
        return _ingest_pieces(spark, cfg, interval, start, end, fresh, hold, known)


def _ingest_pieces(spark, cfg: EtlConfig, interval: Interval, start, end, fresh: bool, hold: bool,
                   known: KnownRanges | None = None) -> dict:
    mbs = cfg.micro_batch_seconds
    if not (is_window_boundary(interval, mbs, start) and is_window_boundary(interval, mbs, end)):
        raise ValueError(f"[{start}, {end}) splits an arrival window of run {interval.run_key}")
    scan = scan_sources(cfg, start, end)
    check_sequence_definition(cfg, open_tables(spark, cfg))
    if known is not None and not fresh:
        known.forget()  # rows may be written over: read the table, carry nothing
        known = None
    kafka = plan_ranges(spark, cfg, interval, start, end, known=known)
    run = f"run_key = '{interval.run_key}'"
    lo, hi = windows_before(interval, mbs, start), windows_before(interval, mbs, end)
    pieces = (f"{run} AND unix_micros(arrival_minute) >= {int(start.timestamp() * 1e6)} "
              f"AND unix_micros(arrival_minute) < {int(end.timestamp() * 1e6)}")
    tally = _write_checked(
        spark, cfg, interval, scan, kafka, start, end, f"{run} AND batch_index >= {lo} AND batch_index < {hi}", pieces, pieces,
        fresh=fresh, hold=hold, known=known)
    summary = ingest_summary(interval, len(scan.files), scan.skipped + kafka.skipped, tally.lines, tally.blank_lines,
                             tally.reasons, ranges=len(kafka.ranges), kafka_lost=kafka.lost_records)
    summary["batch_counts"] = tally.windows
    if hold:
        summary["held"] = HeldWindows(lo, hi, tally.held)
    return summary


def run_ingest_summary(spark, cfg: EtlConfig, interval: Interval, skipped, kafka_lost: int = 0) -> dict:
    """The summary ``ingest`` writes, made from the run's rows (the always-on loader ingested it in
    pieces)."""
    run = f"run_key = '{interval.run_key}'"
    kafka = F.startswith(F.col("file_name"), F.lit(PREFIX))
    files = read(spark, cfg, "landed_files").where(run).agg(
        F.count(F.when(~kafka, 1)), F.count(F.when(kafka & F.col("file_name").rlike(":[0-9]+-[0-9]+$"), 1)),
        F.sum("lines"), F.sum("blank_lines")).first()
    reasons = Counter({(r[0], r[1]): r[2]
                       for r in read(spark, cfg, "rejected_updates").where(run).groupBy("reason", "reason_detail").count().collect()})
    return ingest_summary(interval, int(files[0]), skipped, int(files[2] or 0), int(files[3] or 0), reasons,
                          ranges=int(files[1]), kafka_lost=kafka_lost, piece_seconds=cfg.piece_seconds)


def late_lines(spark, cfg: EtlConfig, interval: Interval, move_to=None) -> dict:
    """Landing files of a loaded run that changed since its ingest; with ``move_to`` (a minute no
    run has ingested), appended and added lines are moved into that minute's landing files, so
    the run's files match what was loaded again and the later run loads the late lines."""
    ensure_tables(spark, cfg)
    if not has_started(spark, cfg, interval.run_key):
        return {"run_key": interval.run_key, "changes": [],
                "note": "the run has not loaded: rerun `etl ingest` to read its files again"}
    scan = scan_sources(cfg, interval.start, interval.end)
    changes = landing_changes(spark, cfg, interval, scan.files)
    out = {"run_key": interval.run_key, "changes": [c.__dict__ for c in changes]}
    if move_to is None or not changes:
        return out
    target = Interval(move_to, move_to + timedelta(minutes=1))
    if target.overlaps(interval):
        raise ConfigError(f"--move-to {move_to:%Y-%m-%dT%H:%M} lies in the run's own interval")
    check_no_overlap(spark, cfg, target)
    stuck = [c for c in changes if c.kind in ("changed", "removed")]
    if stuck:
        raise LandingChanged(
            "cannot move lines of files that were changed or removed (not appended to): "
            + ", ".join(f"{c.name} ({c.kind})" for c in stuck)
            + "; restore them to what was loaded (landed_files has their size and SHA-256)"
        )
    by_name = {f.name: f for f in scan.files}
    recorded = recorded_files(spark, cfg, interval.run_key)
    moved = []
    for c in changes:
        f = by_name[c.name]
        keep = recorded[c.name].bytes if c.kind == "appended" else 0
        moved.append(move_tail(Path(f.path), keep, landing_file(cfg.landing_path, f.source_id, move_to, cfg.piece_seconds)))
    out["moved"] = moved
    return out


def discard(spark, cfg: EtlConfig, interval: Interval) -> dict:
    """Drop the ingest of a run that has not started loading (an interval ingested by mistake)."""
    tables = open_tables(spark, cfg)
    tables.ensure()
    with LoadLock(cfg.meta_path, f"discard of {interval.run_key}", cfg.lock_stale_seconds):
        if has_started(spark, cfg, interval.run_key):
            raise RunAlreadyLoaded(f"run {interval.run_key} has started loading; its ingest cannot be discarded")
        dropped = {}
        for table in ("ingested_updates", "rejected_updates", "landed_files"):
            rows = tables.read(table).where(f"run_key = '{interval.run_key}'").count()
            if rows:
                tables.delete_where(table, f"run_key = '{interval.run_key}'")
            dropped[table] = rows
    for stage in ("ingest", "load", "validate"):
        (cfg.runs_path / interval.run_key / f"{stage}.json").unlink(missing_ok=True)
    return {"run_key": interval.run_key, "rows_dropped": dropped}


def load(spark, cfg: EtlConfig, interval: Interval, strategy: str | None = None, progress=None) -> dict:
    result = Loader(spark, cfg, strategy).load(interval, progress=progress)
    ingest_summary = read_summary(cfg, interval, "ingest") or {}
    summary = result.summary()
    summary["rejected"] = ingest_summary.get("rejected", 0)
    write_summary(cfg, interval, "load", summary)
    return summary


def validate(spark, cfg: EtlConfig, interval: Interval, raise_on_failure: bool = True) -> dict:
    summary = run_load_gate(spark, cfg, interval)
    write_summary(cfg, interval, "validate", summary)
    if raise_on_failure and not summary["success"]:
        failed = [check_label(c) for c in failed_critical(summary["checks"])]
        raise ValidationFailed(f"quality gate failed for run {interval.run_key}: {failed}; Data Docs: {summary['data_docs']}")
    return summary


def report(cfg: EtlConfig, interval: Interval) -> dict:
    """What happened in the run, from the stage summaries (no Spark needed)."""
    ingest_s = read_summary(cfg, interval, "ingest") or {}
    load_s = read_summary(cfg, interval, "load") or {}
    validate_s = read_summary(cfg, interval, "validate") or {}
    outcomes = dict(load_s.get("outcomes", {}))
    outcomes["rejected"] = ingest_s.get("rejected", 0)
    return {
        "run_key": interval.run_key,
        "entity": cfg.entity_model.name,
        "strategy": load_s.get("strategy"),
        "updates_in": ingest_s.get("lines", 0),
        "outcomes": outcomes,
        "outcomes_total": sum(outcomes.values()),
        "rejected_by_reason": ingest_s.get("rejected_by_reason", {}),
        "rejected_by_field": ingest_s.get("rejected_by_field", {}),
        "blank_lines": ingest_s.get("blank_lines", 0),
        "skipped": ingest_s.get("skipped", []),
        "kafka_records_lost": ingest_s.get("kafka_records_lost", 0),
        "keys_allocated": load_s.get("keys_allocated", 0),
        "inferred_members": load_s.get("inferred_members", {}),  # a fact's: per dimension
        "batches_committed": load_s.get("batches_committed", 0),
        "batches_already_done": load_s.get("batches_already_done", 0),
        "delay_avg_s": load_s.get("delay_avg_s"),  # logged: arrival to the write-ahead commit
        "delay_p99_s": load_s.get("delay_p99_s"),
        "visible_delay_avg_s": load_s.get("visible_delay_avg_s"),  # visible: to the entity table's MERGE
        "visible_delay_p99_s": load_s.get("visible_delay_p99_s"),
        "batches_visible_unknown": load_s.get("batches_visible_unknown", 0),
        "clock_skew": load_s.get("clock_skew", 0),  # arrivals after their commit: not in the delays
        "sequence_conflicts": load_s.get("sequence_conflicts", 0),
        "references_deleted": validate_s.get("references_deleted", {}),  # a fact's: per reference
        # Whether the gate failed on them, as it ran (the setting may have changed since); the
        # column's not-null check is critical too, but fails only on a missing count.
        "references_deleted_strict": any(c["table"].endswith("_references") and c.get("kwargs", {}).get("column") == "deleted"
                                         for c in failed_critical(validate_s.get("checks", []))),
        "validation": "passed" if validate_s.get("success") else ("failed" if validate_s else "not run"),
        "validation_warnings": [check_label(c) for c in failed_warnings(validate_s.get("checks", []))],
        "data_docs": validate_s.get("data_docs"),
    }


def check_label(check: dict) -> str:
    """A check of the gate as the summary and the error name it: its frame, expectation and column."""
    column = check["kwargs"].get("column")
    return f"{check['table']}: {check['expectation']}" + (f" ({column})" if column else "")


def format_report(rep: dict, cfg: EtlConfig | None = None) -> str:
    # The entity is named unless it is the one at the roots (the default customer's demo output).
    of = f" of {rep['entity']}" if cfg is not None and cfg.entity_model.directory else ""
    lines = [
        f"run {rep['run_key']}{of} (strategy {rep['strategy']})",
        f"  updates in          {rep['updates_in']}",
    ]
    for name in ("matched", "new", "duplicate", "stale", "rejected"):
        lines.append(f"    {name:<17} {rep['outcomes'].get(name, 0)}")
    lines.append(f"  sum of outcomes     {rep['outcomes_total']}")
    if rep.get("sequence_conflicts"):
        lines.append(f"  SEQUENCE CONFLICTS  {rep['sequence_conflicts']} duplicates at a log position already seen, with "
                     f"other content: not applied (duplicates_quarantine, reason sequence_conflict)")
    if rep["rejected_by_reason"]:
        lines.append("  rejected by reason  " + ", ".join(f"{k}={v}" for k, v in rep["rejected_by_reason"].items()))
        for reason, fields in rep.get("rejected_by_field", {}).items():
            lines.append(f"    {reason:<17} " + ", ".join(f"{f}={n}" for f, n in fields.items()))
    if rep.get("blank_lines"):
        lines.append(f"  blank lines         {rep['blank_lines']} (not updates)")
    if rep.get("kafka_records_lost"):
        lines.append(f"  KAFKA RECORDS LOST  {rep['kafka_records_lost']} (deleted by the broker before any run read them)")
    landing = [s for s in rep.get("skipped", []) if not s["name"].startswith(PREFIX)]
    kafka = [s for s in rep.get("skipped", []) if s["name"].startswith(PREFIX)]
    for entries, what in ((kafka, "of Kafka, not read by this run:"),
                          (landing, "in the landing zone, not landing files (not read):")):
        if entries:
            lines.append(f"  skipped entries     {len(entries)} {what}")
            lines.extend(f"    {s['name']}: {s['reason']}" for s in entries[:10])
            if len(entries) > 10:
                lines.append(f"    ... and {len(entries) - 10} more (ingest summary)")
    lines.append(f"  keys allocated      {rep['keys_allocated']}")
    if rep.get("inferred_members"):
        lines.append("  inferred members    " + ", ".join(f"{d}={n}" for d, n in rep["inferred_members"].items())
                     + " (keys the dimensions had not loaded yet)")
    lines.append(
        f"  micro-batches       {rep['batches_committed']} committed, {rep['batches_already_done']} already done"
    )
    delays = describe_delays(rep["delay_avg_s"], rep["delay_p99_s"], rep.get("clock_skew", 0))
    if delays:
        # Logged: to the batch's write-ahead commit (decided and durable); visible: to the entity
        # table's MERGE, what its readers see (later with apply_interval_seconds).
        lines.append(f"  production delay    logged {delays}")
        visible = describe_delays(rep.get("visible_delay_avg_s"), rep.get("visible_delay_p99_s"))
        pending = rep.get("batches_visible_unknown", 0)
        if visible or pending:  # a summary written before the visible delay was measured has neither
            lines.append(f"                      visible {visible or 'not measured'}"
                         + (f" ({pending} batch{'es' if pending != 1 else ''} without a visible time: not applied yet, or "
                            f"applied by a restart's recovery)" if pending else ""))
    deleted = {r: n for r, n in rep.get("references_deleted", {}).items() if n}
    if deleted:
        strict = rep.get("references_deleted_strict", False)
        lines.append("  facts referencing deleted members  " + ", ".join(f"{r}={n}" for r, n in deleted.items())
                     + " (the run's live facts whose member was deleted at their event time, flagged <reference>__deleted; "
                     + ("strict_deleted_references: the gate fails)" if strict else "a warning unless strict_deleted_references)"))
    warnings = rep.get("validation_warnings", [])
    lines.append(f"  validation          {rep['validation']}"
                 + (f", {len(warnings)} warning{'s' if len(warnings) != 1 else ''}" if warnings and rep["validation"] == "passed" else ""))
    lines.extend(f"    WARNING           {w}" for w in warnings)
    lines.append(f"  Data Docs           {rep['data_docs']}")
    return "\n".join(lines)
