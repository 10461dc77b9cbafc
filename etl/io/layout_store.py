"""The warehouse's layout file (``<meta_root>/segment_layout.json``): written once, read on every run,
so changing ``n_part`` or ``key_domain`` in the configuration never re-maps stored keys.

A rebalance (maintenance's, or the split at a run's end: ``etl.io.rebalance``) stages a new
layout next to it (``segment_layout.json.next``) before it rewrites ``key_map``;
``settle_pending_layout`` decides after a crash which of the two the table follows.
The load calls it under the load lock, so it lives here and the load never imports maintenance."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import functions as F

from etl.core.config import EtlConfig
from etl.core.layout import HashLayout, SlotArray, layout_from_json
from etl.core.sizing import configured_n_part
from etl.io.files import write_atomic
from etl.io.tables import read
from etl.transforms.layout import segment_column

LAYOUT_FILE = "segment_layout.json"  # under meta_root
PENDING = ".next"  # suffix of a layout staged by a rebalance


def write_layout(cfg: EtlConfig, layout, suffix: str = "", split_after: str | None = None) -> Path:
    """``split_after``: the run whose end split key_map into this layout (kept in the file, so a
    retry of that run's end knows its split is made once the layout is promoted)."""
    text = layout.to_json()
    if split_after is not None:
        text = json.dumps({**json.loads(text), "split_after": split_after})
    return write_atomic(cfg.meta_path / (LAYOUT_FILE + suffix), text)


def split_after(cfg: EtlConfig) -> str | None:
    """The run whose end split key_map into the current layout, if a run's end made it."""
    path = cfg.meta_path / LAYOUT_FILE
    return json.loads(path.read_text()).get("split_after") if path.exists() else None


def configured_layout(cfg: EtlConfig, kind: str = "range"):
    """A layout of ``kind`` as the configuration lays one out (``n_part``, derived from
    ``key_domain`` and ``theta`` unless set: ``etl.core.sizing.configured_n_part``)."""
    n_part = configured_n_part(cfg)
    return HashLayout(n_part) if kind == "hash" else SlotArray.even(cfg.key_domain, n_part)


def stored_layout(cfg: EtlConfig):
    """The warehouse's layout, or ``None`` before its first load (a reader never writes one)."""
    path = cfg.meta_path / LAYOUT_FILE
    return layout_from_json(path.read_text()) if path.exists() else None


def load_layout(cfg: EtlConfig, kind: str = "range"):
    """The warehouse's layout; created from the configuration (of ``kind``) the first time."""
    layout = stored_layout(cfg)
    if layout is None:
        layout = configured_layout(cfg, kind)
        write_layout(cfg, layout)
    return layout


def _mismatches(spark, cfg: EtlConfig, layout) -> int:
    seg = segment_column(layout)
    return read(spark, cfg, "key_map").where(seg(F.col("source_id"), F.col("natural_key")) != F.col("segment_id")).count()


def settle_pending_layout(spark, cfg: EtlConfig) -> str | None:
    """After a crash mid-rebalance: keep the layout the table follows, drop the other."""
    pending = cfg.meta_path / (LAYOUT_FILE + PENDING)
    if not pending.exists():
        return None
    layout = layout_from_json(pending.read_text())
    if _mismatches(spark, cfg, layout) == 0:
        pending.replace(cfg.meta_path / LAYOUT_FILE)
        return "promoted"
    pending.unlink()
    return "discarded"
