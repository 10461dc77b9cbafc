"""What the always-on loader says about itself in ``<meta_root>/stream/`` (small JSON files, no
Spark: the DAG's routing task reads them): its heartbeat, and per open run how far it has ingested."""

from __future__ import annotations

import json
import time
from pathlib import Path

from etl.core.config import EtlConfig

HEARTBEAT = "heartbeat.json"


def stream_dir(cfg: EtlConfig) -> Path:
    return cfg.meta_path / "stream"


def read_heartbeat(cfg: EtlConfig) -> dict | None:
    try:
        return json.loads((stream_dir(cfg) / HEARTBEAT).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def stream_is_live(cfg: EtlConfig, beat: dict | None, now: float | None = None) -> bool:
    """Whether the heartbeat ``beat`` (``read_heartbeat``) says a stream was running within the last
    ``stream_stale_seconds``."""
    if not beat or beat.get("stopped"):
        return False
    return (time.time() if now is None else now) - float(beat.get("at_epoch", 0)) <= cfg.stream_stale_seconds
