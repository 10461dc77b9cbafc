"""The table service a run's end owes (issue 47: ``split_segments_per_run``), recorded before the
run's flush commits and removed once the service is done, or found to have nothing to do.

Why a record: the split must follow the flush in the warehouse's history whoever makes it. A run
killed between its flush commit and its split leaves the record; whichever load takes the lock
next (that run's retry, another run, a fact's lookups of this dimension) makes the split before
anything else, from the same table, so the layout and every later run's numbering are those of
the history where nobody was killed. Maintenance's layout steps refuse while one is owed.
Written before the commit, so a kill cannot fall between the commit and the record; a record
whose run's flush never committed is that run's own retry's to settle (its flush comes later in
the history)."""

from __future__ import annotations

import json

from etl.core.config import EtlConfig
from etl.io.files import sync_dir, write_json


def _path(cfg: EtlConfig, run_key: str):
    return cfg.meta_path / "run_ends" / f"{run_key}.json"


def owe(cfg: EtlConfig, run_key: str, strategy: str, limit: int, theta: int) -> None:
    """Before the flush commit: the run's end owes a split of up to ``limit`` segments above
    ``2*theta`` rows (as the run's own configuration has them, used by whichever loader makes the
    split)."""
    write_json(_path(cfg, run_key), {"run_key": run_key, "strategy": strategy, "limit": limit, "theta": theta},
               indent=None, durable=True)


def owed(cfg: EtlConfig) -> list[dict]:
    """Every recorded, unsettled run end (its run's flush may or may not be committed)."""
    return [json.loads(p.read_text()) for p in sorted((cfg.meta_path / "run_ends").glob("*.json"))]


def owed_by(cfg: EtlConfig, run_key: str) -> dict | None:
    path = _path(cfg, run_key)
    return json.loads(path.read_text()) if path.exists() else None


def settled(cfg: EtlConfig, run_key: str) -> None:
    """The run's end service is done (a split made, or nothing due, or deferred for good). Durable
    as the record was: a record back after a host's crash would be judged against a later table."""
    path = _path(cfg, run_key)
    if not path.exists():
        return
    path.unlink()
    sync_dir(path.parent)
