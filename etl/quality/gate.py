"""Great Expectations as a hard gate after each load, with Data Docs at a known path.

The context is a file context under ``gx_root``; Data Docs are written to
``<gx_root>/gx/uncommitted/data_docs/local_site/index.html``, their pages pointed at the site's own
copies of the scripts and styles GX loads from CDNs (etl.quality.offline_docs).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from pyspark.sql import functions as F

from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.io.runs import landing_changes, scan_sources
from etl.io.tables import read
from etl.load.references import with_deleted_references
from etl.quality.offline_docs import make_site_offline
from etl.transforms.columns import ints_in
from etl.transforms.history import history_validity
from etl.transforms.outcomes import INFER

log = logging.getLogger(__name__)
DATASOURCE = "warehouse"
CRITICAL = "critical"  # GX's FailureSeverity.CRITICAL, the default of every expectation


def data_docs_index(cfg: EtlConfig) -> Path:
    return cfg.gx_path / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


def run_batch_seqs(spark, cfg: EtlConfig, interval: Interval) -> list[int]:
    """The batches the run committed (its ledger rows)."""
    ledger = read(spark, cfg, "batch_ledger").where(F.col("run_key") == interval.run_key)
    return [r[0] for r in ledger.select("batch_seq").collect()]


def references_frame(spark, cfg: EtlConfig, interval: Interval | None = None):
    """A fact's references, one row each: ``reference``, ``dimension``, ``dangling`` (its fact
    rows whose key is null or not in the dimension's ``key_map``) and ``deleted`` (the live fact
    rows the run wrote, or with ``interval`` None every live row, whose member was deleted at the
    fact's event time)."""
    fact = read(spark, cfg, cfg.entity_model.table)
    references = cfg.entity_model.references
    live = fact.where(~F.col("is_deleted"))
    if interval is not None:
        seqs = run_batch_seqs(spark, cfg, interval)
        live = live.where(ints_in("updated_batch_seq", seqs))
    flagged = with_deleted_references(spark, cfg, live)
    deleted = flagged.agg(*[F.count_if(F.col(f"{r.name}__deleted")).alias(r.name) for r in references]).first()
    rows = []
    for r in references:
        keys = read(spark, cfg.for_entity(r.dimension), "key_map").select(F.col("surrogate_key").alias(r.name))
        dangling = fact.select(r.name).join(keys, r.name, "left_anti").count()
        rows.append((r.name, r.dimension, dangling, deleted[r.name]))
    return spark.createDataFrame(rows, "reference string, dimension string, dangling long, deleted long")


def conservation_frame(spark, cfg: EtlConfig, interval: Interval | None):
    """One row per counting identity: ``check``, ``expected``, ``actual``. For one run, or (``None``)
    for the whole warehouse. A run's updates in are the lines its ingest fingerprinted
    (``landed_files``); that the landing files still match those fingerprints is a check of its own."""
    def of(name):
        df = read(spark, cfg, name)
        return df.where(F.col("run_key") == interval.run_key) if interval is not None else df

    ingested = of("ingested_updates").count()
    rejected = of("rejected_updates").count()
    log_rows = of("outcome_log")
    # A dimension's inferred members (committed for a fact, op "infer") are logged but were never
    # ingested: they are new keys, not updates in.
    logged = log_rows.where(F.col("op") != INFER).count()
    new_outcomes = log_rows.where(F.col("outcome") == "new").count()
    km = read(spark, cfg, "key_map")
    if interval is not None:
        seqs = run_batch_seqs(spark, cfg, interval)
        created = km.where(ints_in("created_batch_seq", seqs)).count() if seqs else 0
        landed = int(of("landed_files").agg(F.sum("lines")).first()[0] or 0)
        changed = len(landing_changes(spark, cfg, interval, scan_sources(cfg, interval.start, interval.end).files))
    else:
        created = km.count()
        landed = ingested + rejected
        changed = 0
    rows = [
        # Every logged outcome is matched, new, duplicate or stale (applied_changes and
        # duplicates_quarantine are the log's two parts), so the log's size is their sum.
        ("updates in = matched + new + duplicate + stale + rejected", landed, logged + rejected),
        ("landed lines = ingested + rejected", landed, ingested + rejected),
        ("landing files changed since ingest (late lines: etl late-lines)", 0, changed),
        ("ingested = outcomes logged", ingested, logged),
        ("new outcomes = key_map rows created", new_outcomes, created),
    ]
    if interval is None:
        rows = rows[3:]  # the first three need the landed files of a run
    return spark.createDataFrame(rows, "check string, expected long, actual long")


def failed_critical(checks: list[dict]) -> list[dict]:
    """The failed checks that fail the gate: those of severity critical (every expectation's
    unless its suite says otherwise)."""
    return [c for c in checks if not c["success"] and c.get("severity", CRITICAL) == CRITICAL]


def failed_warnings(checks: list[dict]) -> list[dict]:
    """The failed checks that only warn (severity warning or info): reported, the gate passes."""
    return [c for c in checks if not c["success"] and c.get("severity", CRITICAL) != CRITICAL]


def _checkpoint(context, name: str, expectations: list):
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction

    source = context.data_sources.add_or_update_spark(name=DATASOURCE)
    try:
        asset = source.get_asset(name)
    except LookupError:
        asset = source.add_dataframe_asset(name=name)
    try:
        batch_def = asset.get_batch_definition("whole")
    except (KeyError, LookupError, ValueError):
        batch_def = asset.add_batch_definition_whole_dataframe("whole")
    suite = context.suites.add_or_update(gx.ExpectationSuite(name=f"{name}_suite", expectations=expectations))
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=f"{name}_gate", data=batch_def, suite=suite)
    )
    return context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=f"{name}_gate",
            validation_definitions=[definition],
            actions=[UpdateDataDocsAction(name="update_data_docs")],
            result_format="SUMMARY",
        )
    )


def run_load_gate(spark, cfg: EtlConfig, interval: Interval) -> dict:
    """Run every suite of ``expectations.suites`` against the warehouse after the run's load."""
    return run_suites(spark, cfg, interval.run_key, interval)


def run_suites(spark, cfg: EtlConfig, run_name: str, interval: Interval | None) -> dict:
    """Every suite of ``expectations.suites``; the conservation suite for ``interval`` or, when it
    is ``None``, for the whole warehouse. Data Docs are rebuilt."""
    # GX writes its project files in place; a kill mid-write leaves them unreadable. They are all
    # derived from code (expectations/), so the project is rebuilt, never repaired by hand: first
    # its configuration (keeping the validation history of Data Docs), then, if a stored result
    # is what is broken, everything.
    for keep_history in (True, False):
        try:
            return _run_suites(spark, cfg, run_name, interval)
        except Exception as exc:
            if not _is_gx_store_error(exc):
                raise
            moved = rebuild_context(cfg, keep_history)
            log.warning("GX project under %s was unreadable (%s); rebuilt from expectations/, old files in %s",
                        cfg.gx_path, _first_line(exc), moved)
    return _run_suites(spark, cfg, run_name, interval)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def _is_gx_store_error(exc: BaseException) -> bool:
    """An error reading GX's own files (YAML/JSON of the project, its stores), not of the data."""
    import json

    import yaml

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError)):
            return True
        if type(exc).__module__.startswith("great_expectations") and "Spark" not in type(exc).__name__:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def rebuild_context(cfg: EtlConfig, keep_history: bool = True) -> Path | None:
    """Move the GX project's files aside (kept for inspection under ``gx.broken-<time>``) so the
    next ``get_context`` makes a fresh one. ``keep_history`` keeps ``uncommitted/`` (validation
    results and Data Docs); Data Docs are rebuilt at the next validation either way."""
    import shutil
    import time

    project = cfg.gx_path / "gx"
    if not project.exists():
        return None
    aside = cfg.gx_path / f"gx.broken-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{int(keep_history)}"
    aside.mkdir(parents=True)
    for entry in project.iterdir():
        if keep_history and entry.name == "uncommitted":
            continue
        shutil.move(str(entry), str(aside / entry.name))
    if not keep_history:
        project.rmdir()
    return aside


def import_in_background() -> threading.Thread:
    """Import Great Expectations (about 7 s on 2 cores) on a thread while the caller starts the
    JVM, instead of in line before validating; the caller joins it once the session is built, so
    the import overlaps only the JVM's start, where the main thread imports next to nothing. An
    import that fails there fails again where the gate uses it, with its own error."""
    def load():
        try:
            import great_expectations  # noqa: F401
        except Exception:  # pragma: no cover - reported where the gate imports it
            pass

    thread = threading.Thread(target=load, name="import-great-expectations")
    thread.start()
    return thread


def open_context(cfg: EtlConfig):
    """The project's file context under ``gx_root``; rebuilt from code when its files are unreadable."""
    import great_expectations as gx

    cfg.gx_path.mkdir(parents=True, exist_ok=True)
    try:
        return gx.get_context(mode="file", project_root_dir=str(cfg.gx_path))
    except Exception as exc:
        if not _is_gx_store_error(exc):
            raise
        moved = rebuild_context(cfg)
        log.warning("GX project under %s was unreadable (%s); rebuilt, old files in %s", cfg.gx_path, _first_line(exc), moved)
        return gx.get_context(mode="file", project_root_dir=str(cfg.gx_path))


def _run_suites(spark, cfg: EtlConfig, run_name: str, interval: Interval | None) -> dict:
    import great_expectations as gx  # noqa: F401
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.expectations.metadata_types import FailureSeverity

    from expectations import suites

    context = open_context(cfg)
    # In memory only: no progress bars in task logs.
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    entity = cfg.entity_model
    references = f"{entity.table}_references"
    frames = {
        "key_map": lambda: read(spark, cfg, "key_map"),
        entity.table: lambda: read(spark, cfg, entity.table),
        f"{entity.table}_validity": lambda: history_validity(read(spark, cfg, entity.table)),
        references: lambda: references_frame(spark, cfg, interval),
        "run_conservation": lambda: conservation_frame(spark, cfg, interval),
    }
    checks = []
    collected = {}  # the small frames whose rows the summary keeps
    for name, factory in suites(entity, strict_deleted_references=cfg.strict_deleted_references).items():
        df = frames[name]()
        if name in ("run_conservation", references):
            collected[name] = [r.asDict() for r in df.collect()]
        checkpoint = _checkpoint(context, name, factory())
        try:
            result = checkpoint.run(batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=run_name))
        finally:
            # GX persists the frame it validates and leaves it cached: a later read of the table in
            # this session would then be answered from that cache, blind to commits of other drivers.
            df.unpersist()
        for validation in result.run_results.values():
            for r in validation.results:
                config = r.expectation_config
                checks.append(
                    {
                        "table": name,
                        "expectation": config.type,
                        "kwargs": {k: v for k, v in config.kwargs.items() if k != "batch_id"},
                        "success": bool(r.success),
                        "severity": FailureSeverity(config.severity).value,
                        "unexpected_count": (r.result or {}).get("unexpected_count"),
                    }
                )
    # Each checkpoint above rebuilt the index and added its result's page, with CDN links: offline
    # they render unstyled and the index's lists stay empty. The site's own copies instead.
    try:
        make_site_offline(data_docs_index(cfg).parent)
    except Exception as exc:  # noqa: BLE001 - cosmetic: never fails a gate that passed
        log.warning("Data Docs under %s keep their CDN links: %s", data_docs_index(cfg).parent, exc)
    return {
        "run_key": run_name,
        "success": not failed_critical(checks),
        "checks": checks,
        "conservation": collected.get("run_conservation", []),
        **({"references_deleted": {r["reference"]: r["deleted"] for r in collected[references]}}
           if references in collected else {}),
        "data_docs": str(data_docs_index(cfg)),
    }
