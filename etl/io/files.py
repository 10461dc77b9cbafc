"""Small files the project writes beside its tables (run summaries, snapshots, the stream's state,
the segment layout): always whole, so a crash or a concurrent reader sees the old file or the new."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_atomic(path: Path, text: str, durable: bool = False) -> Path:
    """``durable``: on disk when this returns (the file and its directory synced, and the
    directory's own entry when this made it), for a record that must outlive a crash of the host,
    not only of the process."""
    if durable and not path.parent.exists():
        path.parent.mkdir(parents=True)
        sync_dir(path.parent.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        sync_dir(path.parent)
    return path


def sync_dir(folder: Path) -> None:
    """A directory's entries (a file made, replaced or removed in it) on disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, data, indent: int | None = 2, durable: bool = False) -> Path:
    return write_atomic(path, json.dumps(data, indent=indent, sort_keys=True, default=str), durable)
