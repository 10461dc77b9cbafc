"""The stages of a run (ingest, load, validate, report), each usable from the CLI, a DAG or a test.

Each stage writes a JSON summary under ``runs_root/<run_key>/`` so the next stage, and the person
reading the Airflow log, can see what happened without opening Spark.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import timedelta
from pathlib import Path

from pyspark.sql import functions as F

from etl.core.config import ConfigError, EtlConfig
from etl.core.faults import crash_point
from etl.core.interval import Interval
from etl.ingest import check_landed_files, to_ingested, to_landed_files, to_rejected
from etl.io.landing import landing_file, move_tail, scan_landing
from etl.io.lock import LoadLock
from etl.io.runs import (
    LandingChanged,
    check_no_overlap,
    describe_changes,
    has_started,
    known_runs,
    landing_changes,
    recorded_files,
)
from etl.io.tables import ensure_tables, read, replace_partition
from etl.load.loader import Loader
from etl.quality.gate import run_load_gate

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
    path = run_dir(cfg, interval) / f"{stage}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str))
    tmp.replace(path)
    return path


def read_summary(cfg: EtlConfig, interval: Interval, stage: str) -> dict | None:
    path = cfg.runs_path / interval.run_key / f"{stage}.json"
    return json.loads(path.read_text()) if path.exists() else None


def ingest(spark, cfg: EtlConfig, interval: Interval) -> dict:
    """Landed files of the interval -> ``ingested_updates``, ``rejected_updates`` and their
    fingerprints in ``landed_files`` (replaced, not appended). Refused before any write when the
    landing zone cannot be read, when the interval overlaps another run, and when the run has
    started loading and its landing files changed since (docs/ingest.md)."""
    scan = scan_landing(cfg.landing_path, interval.start, interval.end)
    ensure_tables(spark, cfg)
    known = known_runs(spark, cfg)
    check_no_overlap(spark, cfg, interval, known)
    # A run never ingested (by this version) cannot have started loading: skip the three reads.
    if interval.run_key in known and has_started(spark, cfg, interval.run_key):
        changes = landing_changes(spark, cfg, interval, scan.files)
        if changes:
            raise LandingChanged(describe_changes(interval, changes))
    for s in scan.skipped:
        log.warning("skipped %s: %s", s.name, s.reason)
    checked = check_landed_files(spark, cfg, scan.files).cache()
    try:
        lines = checked.where(F.col("kind") == "line")
        valid = lines.where(F.col("reject_reason").isNull())
        rejected = lines.where(F.col("reject_reason").isNotNull())
        files = checked.where(F.col("kind") == "file")
        replace_partition(to_ingested(valid, interval, cfg.micro_batch_seconds), cfg, "ingested_updates", "run_key", interval.run_key)
        crash_point("ingest.ingested_written")
        replace_partition(to_rejected(rejected, interval), cfg, "rejected_updates", "run_key", interval.run_key)
        crash_point("ingest.rejected_written")
        replace_partition(to_landed_files(files, interval), cfg, "landed_files", "run_key", interval.run_key)
        reasons = Counter({r[0]: r[1] for r in rejected.groupBy("reject_reason").count().collect()})
        totals = files.agg(F.sum("file_lines"), F.sum("file_blank_lines")).first()
    finally:
        checked.unpersist()
    n_lines, n_blank = int(totals[0] or 0), int(totals[1] or 0)
    n_rejected = sum(reasons.values())
    summary = {
        "run_key": interval.run_key,
        "interval": [interval.start.isoformat(), interval.end.isoformat()],
        "files": len(scan.files),
        "skipped": [{"name": s.name, "reason": s.reason} for s in scan.skipped],
        "lines": n_lines,
        "blank_lines": n_blank,
        "valid": n_lines - n_rejected,
        "rejected": n_rejected,
        "rejected_by_reason": dict(sorted(reasons.items())),
    }
    write_summary(cfg, interval, "ingest", summary)
    if n_lines and n_rejected / n_lines > cfg.max_rejected_fraction:
        raise RejectionCeilingExceeded(
            f"{n_rejected} of {n_lines} lines of run {interval.run_key} were rejected "
            f"({n_rejected / n_lines:.1%} > max_rejected_fraction {cfg.max_rejected_fraction:.1%}); "
            f"see the rejected_updates table, reasons: {dict(reasons)}"
        )
    return summary


def late_lines(spark, cfg: EtlConfig, interval: Interval, move_to=None) -> dict:
    """Landing files of a loaded run that changed since its ingest; with ``move_to`` (a minute no
    run has ingested), appended and added lines are moved into that minute's landing files, so
    the run's files match what was loaded again and the later run loads the late lines."""
    ensure_tables(spark, cfg)
    if not has_started(spark, cfg, interval.run_key):
        return {"run_key": interval.run_key, "changes": [], "note": "the run has not loaded: rerun `etl ingest` to read its files again"}
    scan = scan_landing(cfg.landing_path, interval.start, interval.end)
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
        moved.append(move_tail(Path(f.path), keep, landing_file(cfg.landing_path, f.source_id, move_to)))
    out["moved"] = moved
    return out


def discard(spark, cfg: EtlConfig, interval: Interval) -> dict:
    """Drop the ingest of a run that has not started loading (an interval ingested by mistake)."""
    ensure_tables(spark, cfg)
    with LoadLock(cfg.meta_path, f"discard of {interval.run_key}", cfg.lock_stale_seconds):
        if has_started(spark, cfg, interval.run_key):
            raise RunAlreadyLoaded(f"run {interval.run_key} has started loading; its ingest cannot be discarded")
        dropped = {}
        for table in ("ingested_updates", "rejected_updates", "landed_files"):
            rows = read(spark, cfg, table).where(f"run_key = '{interval.run_key}'").count()
            if rows:
                spark.sql(f"DELETE FROM delta.`{cfg.table_path(table)}` WHERE run_key = '{interval.run_key}'")
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
        failed = [f"{c['table']}: {c['expectation']}" for c in summary["checks"] if not c["success"]]
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
        "strategy": load_s.get("strategy"),
        "updates_in": ingest_s.get("lines", 0),
        "outcomes": outcomes,
        "outcomes_total": sum(outcomes.values()),
        "rejected_by_reason": ingest_s.get("rejected_by_reason", {}),
        "blank_lines": ingest_s.get("blank_lines", 0),
        "skipped": ingest_s.get("skipped", []),
        "keys_allocated": load_s.get("keys_allocated", 0),
        "batches_committed": load_s.get("batches_committed", 0),
        "batches_already_done": load_s.get("batches_already_done", 0),
        "delay_avg_s": load_s.get("delay_avg_s"),
        "delay_p99_s": load_s.get("delay_p99_s"),
        "validation": "passed" if validate_s.get("success") else ("failed" if validate_s else "not run"),
        "data_docs": validate_s.get("data_docs"),
    }


def format_report(rep: dict) -> str:
    lines = [
        f"run {rep['run_key']} (strategy {rep['strategy']})",
        f"  updates in          {rep['updates_in']}",
    ]
    for name in ("matched", "new", "duplicate", "stale", "rejected"):
        lines.append(f"    {name:<17} {rep['outcomes'].get(name, 0)}")
    lines.append(f"  sum of outcomes     {rep['outcomes_total']}")
    if rep["rejected_by_reason"]:
        lines.append("  rejected by reason  " + ", ".join(f"{k}={v}" for k, v in rep["rejected_by_reason"].items()))
    if rep.get("blank_lines"):
        lines.append(f"  blank lines         {rep['blank_lines']} (not updates)")
    if rep.get("skipped"):
        lines.append(f"  skipped entries     {len(rep['skipped'])} in the landing zone, not landing files (not read):")
        lines.extend(f"    {s['name']}: {s['reason']}" for s in rep["skipped"][:10])
        if len(rep["skipped"]) > 10:
            lines.append(f"    ... and {len(rep['skipped']) - 10} more (ingest summary)")
    lines.append(f"  keys allocated      {rep['keys_allocated']}")
    lines.append(
        f"  micro-batches       {rep['batches_committed']} committed, {rep['batches_already_done']} already done"
    )
    if rep["delay_avg_s"] is not None:
        lines.append(f"  production delay    avg {rep['delay_avg_s']:.1f} s, p99 {rep['delay_p99_s']:.1f} s")
    lines.append(f"  validation          {rep['validation']}")
    lines.append(f"  Data Docs           {rep['data_docs']}")
    return "\n".join(lines)
