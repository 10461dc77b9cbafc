"""What the always-on loader says about itself in ``<meta_root>/stream/`` (small JSON files, no
Spark: the DAG's routing task reads them): its heartbeat, and per open run how far it has ingested."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from etl.core.config import EtlConfig

HEARTBEAT = "heartbeat.json"


def stream_dir(cfg: EtlConfig) -> Path:
    return cfg.meta_path / "stream"


def write_json(path: Path, data: dict) -> None:
    """Atomically: a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def read_heartbeat(cfg: EtlConfig) -> dict | None:
    try:
        return json.loads((stream_dir(cfg) / HEARTBEAT).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def stream_is_live(cfg: EtlConfig, now: float | None = None) -> bool:
    """Whether a stream has said it is running within the last ``stream_stale_seconds``."""
    beat = read_heartbeat(cfg)
    if not beat or beat.get("stopped"):
        return False
    return (time.time() if now is None else now) - float(beat.get("at_epoch", 0)) <= cfg.stream_stale_seconds
