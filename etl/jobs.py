"""The stages of a run (ingest, load, validate, report), each usable from the CLI, a DAG or a test.

Each stage writes a JSON summary under ``runs_root/<run_key>/`` so the next stage, and the person
reading the Airflow log, can see what happened without opening Spark.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from etl.config import EtlConfig
from etl.faults import crash_point
from etl.ingest import Interval

log = logging.getLogger(__name__)


class RejectionCeilingExceeded(RuntimeError):
    """More of the run's lines were rejected than ``max_rejected_fraction`` allows."""


class ValidationFailed(RuntimeError):
    """The quality gate failed after a load."""


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
    """Landed files of the interval -> ``ingested_updates`` + ``rejected_updates`` (replaced, not appended)."""
    from pyspark.sql import functions as F

    from etl.ingest import list_landed_files, read_landed_lines, to_ingested, to_rejected, validate_lines
    from etl.tables import ensure_tables, replace_partition

    landed = list_landed_files(cfg.landing_path, interval)  # fails on a bad landing zone before any write
    ensure_tables(spark, cfg)
    for path in landed.ignored:
        log.warning("ignoring %s: not a landing file (expected updates-YYYYMMDDTHHMM.jsonl)", path)
    checked = validate_lines(read_landed_lines(spark, cfg, interval, landed.files), cfg).cache()
    try:
        valid = checked.where(F.col("reject_reason").isNull())
        rejected = checked.where(F.col("reject_reason").isNotNull())
        replace_partition(to_ingested(valid, interval, cfg.micro_batch_seconds), cfg, "ingested_updates", "run_key", interval.run_key)
        crash_point("ingest.ingested_written")
        replace_partition(to_rejected(rejected, interval, cfg.max_record_bytes), cfg, "rejected_updates", "run_key", interval.run_key)
        crash_point("ingest.rejected_written")
        reasons = Counter({r[0]: r[1] for r in rejected.groupBy("reject_reason").count().collect()})
        lines = checked.count()
    finally:
        checked.unpersist()
    n_rejected = sum(reasons.values())
    summary = {
        "run_key": interval.run_key,
        "interval": [interval.start.isoformat(), interval.end.isoformat()],
        "files": len(landed.files),
        "ignored_files": [str(p) for p in landed.ignored],
        "lines": lines,
        "valid": lines - n_rejected,
        "rejected": n_rejected,
        "rejected_by_reason": dict(sorted(reasons.items())),
    }
    write_summary(cfg, interval, "ingest", summary)
    if lines and n_rejected / lines > cfg.max_rejected_fraction:
        raise RejectionCeilingExceeded(
            f"{n_rejected} of {lines} lines of run {interval.run_key} were rejected "
            f"({n_rejected / lines:.1%} > max_rejected_fraction {cfg.max_rejected_fraction:.1%}); "
            f"see the rejected_updates table, reasons: {dict(reasons)}"
        )
    return summary


def load(spark, cfg: EtlConfig, interval: Interval, strategy: str | None = None, progress=None) -> dict:
    from etl.load import Loader

    result = Loader(spark, cfg, strategy).load(interval, progress=progress)
    ingest_summary = read_summary(cfg, interval, "ingest") or {}
    summary = result.summary()
    summary["rejected"] = ingest_summary.get("rejected", 0)
    write_summary(cfg, interval, "load", summary)
    return summary


def validate(spark, cfg: EtlConfig, interval: Interval, raise_on_failure: bool = True) -> dict:
    from etl.quality import run_load_gate

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
    lines.append(f"  keys allocated      {rep['keys_allocated']}")
    lines.append(
        f"  micro-batches       {rep['batches_committed']} committed, {rep['batches_already_done']} already done"
    )
    if rep["delay_avg_s"] is not None:
        lines.append(f"  production delay    avg {rep['delay_avg_s']:.1f} s, p99 {rep['delay_p99_s']:.1f} s")
    lines.append(f"  validation          {rep['validation']}")
    lines.append(f"  Data Docs           {rep['data_docs']}")
    return "\n".join(lines)
