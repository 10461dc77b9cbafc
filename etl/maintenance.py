"""Maintenance: rebalance ``key_map``'s segments, OPTIMIZE and VACUUM the Delta tables.

Every step holds the warehouse's load lock (it fails fast while a load runs). Rebalancing
(range layout only; the hash layout has a fixed ``n_part``) is ``etl.io.rebalance``'s, which the
loader also runs at a run's end for splits alone (``split_segments_per_run``); here it merges too.
"""

from __future__ import annotations

import logging

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from etl.core import registry
from etl.core.config import ConfigError, EtlConfig
from etl.io.layout_store import PENDING, configured_layout, load_layout, settle_pending_layout, write_layout
from etl.io.rebalance import RebalanceBlocked, check_no_owed_run_ends, check_no_unfinished_runs, rebalance
from etl.io.lock import LoadLock
from etl.io.tables import ensure_tables, open_tables, read
from etl.transforms.layout import segment_column
from warehouse.schemas import tables

log = logging.getLogger(__name__)
STEPS = ("rebalance", "optimize", "vacuum")
ON_DEMAND = ("relayout",)  # run only when asked for: it rewrites all of key_map


# Raised when an unfinished run depends on the current layout (the name maintenance's callers use).
MaintenanceBlocked = RebalanceBlocked


def relayout(spark, cfg: EtlConfig) -> dict:
    """Lay ``key_map`` out for the configured join strategy: by hash into ``n_part`` segments for
    ``partitioned-hash``, by key range (an even slot array over ``key_domain``, then rebalanced
    to theta..2*theta) for ``partitioned-range``. One Delta commit rewrites ``segment_id`` and
    nothing else; the layout is staged and promoted like a rebalance's."""
    settle_pending_layout(spark, cfg)
    current = load_layout(cfg)
    wanted = registry.spec(cfg.join_strategy).layout
    if wanted is None:
        return {"step": "relayout", "skipped": f"{cfg.join_strategy} works with either layout (kept: {current.kind})"}
    if current.kind == wanted:
        return {"step": "relayout", "skipped": f"key_map is already laid out by {wanted}"}
    check_no_unfinished_runs(cfg, "relayout")
    check_no_owed_run_ends(cfg, "relayout")
    layout = configured_layout(cfg, wanted)
    seg = segment_column(layout)
    km = read(spark, cfg, "key_map")
    rows = km.count()
    write_layout(cfg, layout, PENDING)
    open_tables(spark, cfg).replace_where(km.withColumn("segment_id", seg(F.col("source_id"), F.col("natural_key"))), "key_map", "true")
    settle_pending_layout(spark, cfg)
    result = {"step": "relayout", "from": current.kind, "to": wanted, "rows": rows, "segments": len(set(layout.segments))}
    if wanted == "range":
        result["rebalance"] = rebalance(spark, cfg)
    log.info("relayout of key_map: %s", result)
    return result


def optimize(spark, cfg: EtlConfig) -> dict:
    out = {}
    for name in tables(cfg.entity_model):
        metrics = DeltaTable.forPath(spark, cfg.table_path(name)).optimize().executeCompaction().first()
        m = metrics["metrics"] if metrics is not None else None
        out[name] = {"files_removed": int(m["numFilesRemoved"]), "files_added": int(m["numFilesAdded"])} if m else {}
    return {"step": "optimize", "tables": out}


def vacuum(spark, cfg: EtlConfig) -> dict:
    names = list(tables(cfg.entity_model))
    for name in names:
        DeltaTable.forPath(spark, cfg.table_path(name)).vacuum(float(cfg.vacuum_retention_hours))
    return {"step": "vacuum", "retention_hours": cfg.vacuum_retention_hours, "tables": names}


def check_steps(steps) -> list[str]:
    unknown = [s for s in steps if s not in STEPS + ON_DEMAND]
    if unknown:
        raise ConfigError(f"--steps: unknown step(s) {', '.join(unknown)}; valid: {', '.join(STEPS + ON_DEMAND)}")
    return list(steps)


def maintain(spark, cfg: EtlConfig, steps=STEPS, progress=None) -> dict:
    check_steps(steps)
    ensure_tables(spark, cfg)
    results = []
    with LoadLock(cfg.meta_path, f"maintenance ({', '.join(steps)})", cfg.lock_stale_seconds):
        for step in (s for s in ON_DEMAND + STEPS if s in steps):
            if progress:
                progress(f"maintenance: {step} ...")
            run = {"relayout": relayout, "rebalance": rebalance, "optimize": optimize, "vacuum": vacuum}[step]
            results.append(run(spark, cfg))
    return {"steps": results}
