"""Great Expectations as a hard gate after each load, with Data Docs at a known path.

The context is a file context under ``gx_root``; Data Docs are written to
``<gx_root>/gx/uncommitted/data_docs/local_site/index.html``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from etl.config import EtlConfig
from etl.ingest import Interval

log = logging.getLogger(__name__)
DATASOURCE = "warehouse"


def data_docs_index(cfg: EtlConfig) -> Path:
    return cfg.gx_path / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


def conservation_frame(spark, cfg: EtlConfig, interval: Interval | None):
    """One row per counting identity: ``check``, ``expected``, ``actual``. For one run, or (``None``)
    for the whole warehouse, where the landed files are not re-read."""
    from pyspark.sql import functions as F

    from etl.ingest import list_landed_files, read_landed_lines
    from etl.tables import read

    def of(name):
        df = read(spark, cfg, name)
        return df.where(F.col("run_key") == interval.run_key) if interval is not None else df

    ingested = of("ingested_updates").count()
    rejected = of("rejected_updates").count()
    log_rows = of("outcome_log")
    logged = log_rows.count()
    new_outcomes = log_rows.where(F.col("outcome") == "new").count()
    applied = of("applied_changes").count()
    quarantined = of("duplicates_quarantine").count()
    km = read(spark, cfg, "key_map")
    if interval is not None:
        seqs = [r[0] for r in of("batch_ledger").select("batch_seq").collect()]
        created = km.where(F.col("created_batch_seq").isin(seqs)).count() if seqs else 0
        landed = read_landed_lines(spark, cfg, interval, list_landed_files(cfg.landing_path, interval).files).count()
    else:
        created = km.count()
        landed = ingested + rejected
    rows = [
        ("updates in = matched + new + duplicate + stale + rejected", landed, applied + quarantined + rejected),
        ("landed lines = ingested + rejected", landed, ingested + rejected),
        ("ingested = outcomes logged", ingested, logged),
        ("outcomes logged = applied + quarantined", logged, applied + quarantined),
        ("new outcomes = key_map rows created", new_outcomes, created),
    ]
    if interval is None:
        rows = rows[2:]  # the first two need the landed files of a run
    return spark.createDataFrame(rows, "check string, expected long, actual long")


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
    """Run every suite of ``expectations.SUITES`` against the warehouse after the run's load."""
    return run_suites(spark, cfg, interval.run_key, interval)


def run_suites(spark, cfg: EtlConfig, run_name: str, interval: Interval | None) -> dict:
    """Every suite of ``expectations.SUITES``; the conservation suite for ``interval`` or, when it
    is ``None``, for the whole warehouse. Data Docs are rebuilt."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    from etl.tables import read
    from expectations import SUITES

    cfg.gx_path.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(cfg.gx_path))
    # In memory only: no progress bars in task logs.
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    frames = {
        "key_map": lambda: read(spark, cfg, "key_map"),
        "customer_current": lambda: read(spark, cfg, "customer_current"),
        "run_conservation": lambda: conservation_frame(spark, cfg, interval),
    }
    checks = []
    conservation_rows = []
    for name, factory in SUITES.items():
        df = frames[name]()
        if name == "run_conservation":
            conservation_rows = [r.asDict() for r in df.collect()]
        checkpoint = _checkpoint(context, name, factory())
        result = checkpoint.run(batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=run_name))
        for validation in result.run_results.values():
            for r in validation.results:
                config = r.expectation_config
                checks.append(
                    {
                        "table": name,
                        "expectation": config.type,
                        "kwargs": {k: v for k, v in config.kwargs.items() if k != "batch_id"},
                        "success": bool(r.success),
                        "unexpected_count": (r.result or {}).get("unexpected_count"),
                    }
                )
    return {
        "run_key": run_name,
        "success": all(c["success"] for c in checks),
        "checks": checks,
        "conservation": conservation_rows,
        "data_docs": str(data_docs_index(cfg)),
    }
