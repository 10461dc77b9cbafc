"""One loader at a time per warehouse: key allocation and batch_seq are sequential.

Two loaders at once would both take the ledger's next batch_seq, and Delta's idempotent writes
would then silently drop the second one's appends. The lock is a file created with O_EXCL in
the warehouse's meta directory (``meta_root``, by default ``<warehouse>/_meta/``); the one who cannot take it fails at once with who holds it. A lock left by
a process that no longer runs on this host is taken over. (Local and shared POSIX filesystems;
object storage needs a different lock, see issue 8.)
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path


class WarehouseLocked(RuntimeError):
    """Another load holds the warehouse; retry when it has finished."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LoadLock:
    def __init__(self, meta: Path, owner: str) -> None:
        self.path = Path(meta) / "load.lock"
        self.owner = owner

    def __enter__(self) -> "LoadLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "owner": self.owner, "since": time.time()}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    held = json.loads(self.path.read_text() or "{}")
                except (OSError, ValueError):
                    held = {}
                if held.get("host") == socket.gethostname() and not _alive(int(held.get("pid", -1))):
                    self.path.unlink(missing_ok=True)  # left by a dead process: take it over
                    continue
                raise WarehouseLocked(
                    f"warehouse {self.path.parent.parent} is being loaded by {held.get('owner', '?')} "
                    f"(pid {held.get('pid', '?')} on {held.get('host', '?')}); retry when it has finished, "
                    f"or remove {self.path} if that process is gone"
                ) from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            return self
        raise WarehouseLocked(f"could not take {self.path}")

    def __exit__(self, *exc) -> None:
        self.path.unlink(missing_ok=True)
