"""Small files the project writes beside its tables (run summaries, snapshots, the stream's state,
the segment layout): always whole, so a crash or a concurrent reader sees the old file or the new."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_json(path: Path, data, indent: int | None = 2) -> Path:
    return write_atomic(path, json.dumps(data, indent=indent, sort_keys=True, default=str))
