"""Rebalancing ``key_map``'s range segments to ``theta``..``2*theta`` rows: the maintenance step
(``etl maintain --steps rebalance``, splits and merges) and, with the load lock the loader already
holds, the table service between runs (``split_segments_per_run``: splits only, of a bounded
number of segments), so both live here and the load never imports maintenance.

It follows ``etl.core.layout.plan_rebalance``: only the touched partitions of ``key_map`` are
rewritten, in one Delta commit that changes nothing but ``segment_id``. The new layout is staged
next to the current one first and promoted after the commit; a crash in between is settled by the
next start under the lock, which checks which layout the table follows (``settle_pending_layout``).
A run that has not finished (a partitioned join's pending tuples or a MESHJOIN snapshot under
``_meta/runs``) blocks it, since its pending work is keyed by the old segments."""

from __future__ import annotations

import logging

from pyspark.sql import functions as F

from etl.core.config import EtlConfig
from etl.core.faults import crash_point
from etl.core.layout import SlotArray, needs_refinement, plan_rebalance
from etl.io.layout_store import PENDING, load_layout, settle_pending_layout, write_layout
from etl.io.run_ends import owed
from etl.io.tables import open_tables, read
from etl.transforms.columns import ints_in
from etl.transforms.layout import segment_column, slot_column

log = logging.getLogger(__name__)


class RebalanceBlocked(RuntimeError):
    """key_map cannot be laid out anew now (an unfinished run depends on the current layout)."""


def slot_rows(spark, cfg: EtlConfig, layout: SlotArray, segments: list[int] | None = None) -> dict[int, int]:
    """key_map's rows per slot (of ``segments`` only, when given: a partition-pruned read)."""
    slot = slot_column(layout, F.col("natural_key"))
    km = read(spark, cfg, "key_map")
    if segments is not None:
        km = km.where(ints_in("segment_id", segments))
    return {int(r[0]): int(r[1]) for r in km.groupBy(slot).count().collect()}


def unfinished_runs(cfg: EtlConfig) -> list[str]:
    """Runs with a run snapshot: begun, not ended (the partitioned join's pending tuples are named
    again by segment when such a run is taken up)."""
    return sorted({p.name.split(".")[0] for p in (cfg.meta_path / "runs").glob("*.json")})


def check_no_unfinished_runs(cfg: EtlConfig, step: str) -> None:
    unfinished = unfinished_runs(cfg)
    if unfinished:
        raise RebalanceBlocked(
            f"{step}: runs {', '.join(unfinished)} are not finished (their pending updates are kept by "
            "segment); finish them (rerun their load) and retry"
        )


def check_no_owed_run_ends(cfg: EtlConfig, step: str) -> None:
    """A run stopped between its flush and the split its end owes: the split comes first in the
    warehouse's history (``etl.io.run_ends``), and is the loader's to make."""
    ends = [r["run_key"] for r in owed(cfg)]
    if ends:
        raise RebalanceBlocked(
            f"{step}: the ends of runs {', '.join(ends)} owe a split of key_map's grown segments (stopped "
            "before it); rerun their load (or, once their flush is committed, load any run), which makes it, and retry"
        )


def rebalance(spark, cfg: EtlConfig, max_refinements: int = 8, merge: bool = True,
              segments: list[int] | None = None, limit: int = 0, verify=None, run_key: str | None = None) -> dict:
    """key_map's range layout split (and, with ``merge``, merged) to ``theta``..``2*theta`` rows a
    segment; what was done, as the maintenance report shows it. ``segments``: only those may be
    split (their keys alone read), merges excluded, and a layout refined without a split is not
    written (so it changes nothing, the layout's id included); with ``limit``, only the first
    ``limit`` of them, in their order, that the plan can split (a segment whose rows all sit in one
    slot that cannot be cut, such as keys past ``key_domain`` in the last slot, is passed over). ``verify``: called before each
    write (the loader's lock check: a loader whose lock was taken over writes nothing);
    ``run_key``: the run whose end splits, kept in the layout it makes."""
    if segments is not None and merge:
        raise ValueError("a rebalance of some segments splits only (merge=False)")
    verify = verify or (lambda: None)
    verify()
    settle_pending_layout(spark, cfg)
    layout = load_layout(cfg)
    if not isinstance(layout, SlotArray):
        return {"step": "rebalance", "skipped": "hash layout: n_part segments are fixed"}
    check_no_unfinished_runs(cfg, "rebalance")
    if segments is None:  # maintenance's (the loader's own split settles the record it makes)
        check_no_owed_run_ends(cfg, "rebalance")
    rows = slot_rows(spark, cfg, layout, segments)
    refinements = 0
    while needs_refinement(layout, rows, cfg.theta) and refinements < max_refinements:
        layout = layout.refined()
        rows = slot_rows(spark, cfg, layout, segments)
        refinements += 1
    plan = plan_rebalance(layout, rows, cfg.theta, merge=merge)
    if segments is not None and limit and len(plan.split) > limit:
        chosen = [seg for seg in segments if seg in plan.split][:limit]
        slots = {i for i, seg in enumerate(layout.slots) if seg in chosen}
        plan = plan_rebalance(layout, {i: n for i, n in rows.items() if i in slots}, cfg.theta, merge=False)
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
        if refinements and segments is None:
            verify()
            write_layout(cfg, layout)  # same mapping, finer slots: no row changes
        return result
    touched = plan.touched_segments
    new_seg = segment_column(plan.layout)
    km = read(spark, cfg, "key_map")
    moved = km.where(ints_in("segment_id", touched)).withColumn(
        "segment_id", new_seg(F.col("source_id"), F.col("natural_key"))
    ).localCheckpoint(eager=True)
    # a row's segment is its slot's: the rows of the slots whose segment changed (no join to count them)
    result["rows_moved"] = sum(n for i, n in rows.items() if plan.layout.slots[i] != layout.slots[i])
    verify()
    write_layout(cfg, plan.layout, PENDING, split_after=run_key)
    predicate = f"segment_id IN ({', '.join(str(s) for s in touched)})"
    verify()
    open_tables(spark, cfg).replace_where(moved, "key_map", predicate)
    crash_point("services.key_map_rebalanced")  # rewritten, the new layout staged: the next start promotes it
    verify()
    settle_pending_layout(spark, cfg)
    log.info("rebalanced key_map: %s", result)
    return result
