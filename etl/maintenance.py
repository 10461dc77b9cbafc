"""Maintenance: rebalance ``key_map``'s segments, OPTIMIZE and VACUUM the Delta tables.

Every step holds the warehouse's load lock (it fails fast while a load runs). Rebalancing
(range layout only; the hash layout has a fixed ``n_part``) follows ``etl.core.layout.plan_rebalance``:
it rewrites only the touched partitions of ``key_map``, in one Delta commit, and changes nothing
but ``segment_id``. The new layout is written next to the current one first and promoted after
the commit; a crash in between is settled on the next start by checking which layout the table
follows (``settle_pending_layout``). A run that has not finished (a partitioned join's wait
buffer or a MESHJOIN snapshot under ``_meta/runs``) blocks rebalancing, since its pending work
is keyed by the old segments.
"""

from __future__ import annotations

import logging

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from etl.core import registry
from etl.core.config import ConfigError, EtlConfig
from etl.core.layout import SlotArray, needs_refinement, plan_rebalance
from etl.io.layout_store import PENDING, configured_layout, load_layout, settle_pending_layout, write_layout
from etl.io.lock import LoadLock
from etl.io.tables import ensure_tables, open_tables, read
from etl.transforms.layout import segment_column, slot_column
from warehouse.schemas import tables

log = logging.getLogger(__name__)
STEPS = ("rebalance", "optimize", "vacuum")
ON_DEMAND = ("relayout",)  # run only when asked for: it rewrites all of key_map


class MaintenanceBlocked(RuntimeError):
    """Maintenance cannot run now (an unfinished run depends on the current layout)."""


def _slot_rows(spark, cfg: EtlConfig, layout: SlotArray) -> dict[int, int]:
    slot = slot_column(layout, F.col("natural_key"))
    return {int(r[0]): int(r[1]) for r in read(spark, cfg, "key_map").groupBy(slot).count().collect()}


def _unfinished_runs(spark, cfg: EtlConfig) -> list[str]:
    """Runs with a run snapshot: begun, not ended (the partitioned join's pending tuples are named
    again by segment when such a run is taken up)."""
    return sorted({p.name.split(".")[0] for p in (cfg.meta_path / "runs").glob("*.json")})


def rebalance(spark, cfg: EtlConfig, max_refinements: int = 8) -> dict:
    settle_pending_layout(spark, cfg)
    layout = load_layout(cfg)
    if not isinstance(layout, SlotArray):
        return {"step": "rebalance", "skipped": "hash layout: n_part segments are fixed"}
    unfinished = _unfinished_runs(spark, cfg)
    if unfinished:
        raise MaintenanceBlocked(
            f"rebalance: runs {', '.join(unfinished)} are not finished (their pending updates are kept by "
            "segment); finish them (rerun their load) and retry"
        )
    rows = _slot_rows(spark, cfg, layout)
    refinements = 0
    while needs_refinement(layout, rows, cfg.theta) and refinements < max_refinements:
        layout = layout.refined()
        rows = _slot_rows(spark, cfg, layout)
        refinements += 1
    plan = plan_rebalance(layout, rows, cfg.theta)
    result = {
        "step": "rebalance",
        "theta": cfg.theta,
        "segments_before": len(set(load_layout(cfg).slots)),
        "segments_after": len(set(plan.layout.slots)),
        "split": {str(k): v for k, v in plan.split.items()},
        "merged": {str(k): v for k, v in plan.merged.items()},
        "slot_refinements": refinements,
        "rows_moved": 0,
    }
    if not plan.changed:
        if refinements:
            write_layout(cfg, layout)  # same mapping, finer slots: no row changes
        return result
    touched = plan.touched_segments
    new_seg = segment_column(plan.layout)
    km = read(spark, cfg, "key_map")
    moved = km.where(F.col("segment_id").isin(touched)).withColumn(
        "segment_id", new_seg(F.col("source_id"), F.col("natural_key"))
    ).localCheckpoint(eager=True)
    result["rows_moved"] = moved.join(
        km.where(F.col("segment_id").isin(touched)), ["source_id", "natural_key", "segment_id"], "left_anti"
    ).count()
    write_layout(cfg, plan.layout, PENDING)
    predicate = f"segment_id IN ({', '.join(str(s) for s in touched)})"
    open_tables(spark, cfg).replace_where(moved, "key_map", predicate)
    settle_pending_layout(spark, cfg)
    log.info("rebalanced key_map: %s", result)
    return result


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
    unfinished = _unfinished_runs(spark, cfg)
    if unfinished:
        raise MaintenanceBlocked(
            f"relayout: runs {', '.join(unfinished)} are not finished (their pending updates are kept by "
            "segment); finish them (rerun their load) and retry"
        )
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
