"""What the always-on loader says about itself in ``<meta_root>/stream/`` (small JSON files, no
Spark: the DAG's routing task reads them): its heartbeat, and per open run how far it has ingested."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from etl.core.config import EtlConfig
from etl.io.lock import WarehouseLocked

HEARTBEAT = "heartbeat.json"
STREAM_LOCK = "stream.lock"


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


def hold_stream_lock(cfg: EtlConfig):
    """One stream per warehouse: its run state and its pieces are its own (a second one would
    ingest the same pieces). An exclusive lock on ``stream.lock`` for as long as the returned file
    is open, released by the system when its process ends however it ends; the file says who holds
    it. ``WarehouseLocked`` while another stream holds it."""
    path = stream_dir(cfg) / STREAM_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    held = open(path, "a+")
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held.seek(0)
        holder = held.read().strip() or "a process that has not said which"
        held.close()
        raise WarehouseLocked(f"another etl stream runs on this warehouse ({holder}; {path}): stop it first") from None
    held.seek(0)
    held.truncate()
    held.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    held.flush()
    return held
