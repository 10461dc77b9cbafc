"""One loader at a time per warehouse: key allocation and batch_seq are sequential.

Two loaders at once would both take the ledger's next batch_seq, and Delta's idempotent writes
would then silently drop the second one's appends. The lock is a file in the warehouse's meta
directory (``meta_root``, by default ``<warehouse>/_meta/``):

- **created atomically**: its content is written to a private temp file that is then hard-linked
  to ``load.lock`` (``link`` fails if the lock exists), so a lock is never seen half-written;
- **alive while its holder is**: the holder touches the file every ``stale_after/4`` seconds;
- **stale** when its holder is gone: on this host, its pid no longer runs (or now runs another
  program: the pid's start time is recorded); on another host, it has not been touched for
  ``stale_after`` seconds (setting ``lock_stale_seconds``, default 15 minutes); a lock that is
  empty or unparsable (written by something else, or by an older version cut short) is stale
  once it is 10 seconds old. A stale lock is taken over under a short "breaker" file, so two
  contenders never both take it;
- **fenced**: the loader checks it still holds the lock before every commit and stops if not;
- ``etl unlock`` removes a lock whose holder is gone, and with ``--force`` any lock (for a
  holder on another host that you know is gone; docs/operations.md).

(Local and shared POSIX filesystems; object storage needs a different lock, see issue 8.)
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

LOCK_NAME = "load.lock"
# The token of the lock's latest holder, written as each takes it: a loader that finds its own
# token there when it takes the lock again knows nobody held the warehouse in between.
HOLDER_NAME = "load.last-holder"
UNPARSABLE_GRACE_S = 10.0
BREAKER_STALE_S = 60.0
PID_MAX = 1 << 22  # Linux's largest pid_max


class WarehouseLocked(RuntimeError):
    """Another load holds the warehouse (or took it from us); retry when it has finished."""


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _valid_pid(pid) -> bool:
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= PID_MAX


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    return start is None or process_start(pid) in (None, start)


def read_lock(path: Path) -> tuple[dict | None, float | None]:
    """(content or None when unparsable, age in seconds) of a lock file; (None, None) if absent."""
    try:
        raw = path.read_bytes()
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None, None
    try:
        held = json.loads(raw)
    except ValueError:
        return None, age
    return (held if isinstance(held, dict) else None), age


def stale_reason(held: dict | None, age: float, stale_after: float, host: str | None = None) -> str | None:
    """Why a lock's holder is known to be gone, or ``None`` while it may be alive (pure decision)."""
    host = host or socket.gethostname()
    if held is None:
        return "unparsable lock file" if age > UNPARSABLE_GRACE_S else None
    if held.get("host") == host:
        pid = held.get("pid")
        if not _valid_pid(pid):
            return f"invalid pid {pid!r}"
        if not _alive(pid, held.get("start")):
            return f"process {pid} is gone"
        return None
    if age > stale_after:
        return f"not refreshed by host {held.get('host')!r} for {age:.0f} s (> lock_stale_seconds {stale_after:.0f})"
    return None


def describe(held: dict | None) -> str:
    if held is None:
        return "an unparsable lock"
    return f"{held.get('owner', '?')} (pid {held.get('pid', '?')} on {held.get('host', '?')})"


class LoadLock:
    def __init__(self, meta: Path, owner: str, stale_after: float = 900.0, records_holder: bool = True) -> None:
        self.path = Path(meta) / LOCK_NAME
        # False: a holder that changes nothing a loader keeps state about (an ingest's writes), so
        # the loader that held the lock before and after it still finds its own token there.
        self.records_holder = records_holder
        self.owner = owner
        self.stale_after = float(stale_after)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.lost = False
        # The token of the holder before this one (``None``: unknown), read as it is taken.
        self.previous: str | None = None

    # ------------------------------------------------------------------ taking it

    def _content(self) -> bytes:
        me = {
            "pid": os.getpid(), "start": process_start(os.getpid()), "host": socket.gethostname(),
            "owner": self.owner, "since": time.time(), "token": self.token,
        }
        return json.dumps(me).encode()

    def _create(self) -> bool:
        tmp = self.path.with_name(f".{LOCK_NAME}.{self.token}")
        with open(tmp, "wb") as f:
            f.write(self._content())
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def _break_stale(self, seen: bytes) -> None:
        """Remove the lock if it still holds ``seen``; under a breaker file so only one does."""
        breaker = self.path.with_name(LOCK_NAME + ".break")
        try:
            fd = os.open(breaker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if time.time() - breaker.stat().st_mtime > BREAKER_STALE_S:
                    breaker.unlink(missing_ok=True)  # left by a contender that died holding it
            except FileNotFoundError:
                pass
            return
        os.close(fd)
        try:
            try:
                if self.path.read_bytes() == seen:
                    self.path.unlink()
            except FileNotFoundError:
                pass
        finally:
            breaker.unlink(missing_ok=True)

    def __enter__(self) -> "LoadLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            if self._create():
                try:
                    if self.records_holder:
                        self._record_holder()
                except BaseException:
                    self.path.unlink(missing_ok=True)  # ours, not held by anyone else yet
                    raise
                self._start_heartbeat()
                return self
            try:
                seen = self.path.read_bytes()
            except FileNotFoundError:
                continue
            held, age = read_lock(self.path)
            if age is None:
                continue
            reason = stale_reason(held, age, self.stale_after)
            if reason is None:
                raise WarehouseLocked(
                    f"warehouse {self.path.parent.parent} is being loaded by {describe(held)}; retry when it has "
                    f"finished (if that process is gone: `etl unlock`, see docs/operations.md)"
                )
            import logging

            logging.getLogger(__name__).warning("taking over the load lock of %s: %s", describe(held), reason)
            self._break_stale(seen)
            time.sleep(0.05)
        raise WarehouseLocked(f"could not take {self.path}: others keep taking it; retry")

    def _record_holder(self) -> None:
        """Before the holder writes anything: read the previous holder's token, then put ours in its
        place (atomically: a reader sees one token or the other). Unreadable, the previous holder
        is unknown (``None``). Unwritable, the file is removed, so no later holder takes the token
        before ours for its own; if it cannot be removed either, the lock is not taken."""
        holder = self.path.with_name(HOLDER_NAME)
        try:
            self.previous = holder.read_text(errors="replace").strip() or None
        except OSError:
            self.previous = None
        tmp = holder.with_name(f".{HOLDER_NAME}.{self.token}")
        try:
            tmp.write_text(self.token)
            os.replace(tmp, holder)
        except OSError as exc:
            self.previous = None
            try:
                tmp.unlink(missing_ok=True)
                if holder.is_dir():
                    holder.rmdir()
                else:
                    holder.unlink(missing_ok=True)
            except OSError:
                raise WarehouseLocked(f"cannot record the lock's holder in {holder} ({exc}) nor remove it: "
                                      f"fix its permissions or remove it") from exc

    # ------------------------------------------------------------------ holding it

    def _start_heartbeat(self) -> None:
        interval = max(0.5, min(60.0, self.stale_after / 4))

        def beat() -> None:
            while not self._stop.wait(interval):
                if not self.holds():
                    self.lost = True
                    return
                try:
                    os.utime(self.path)
                except OSError:
                    pass

        self._beat = threading.Thread(target=beat, name="load-lock-heartbeat", daemon=True)
        self._beat.start()

    def holds(self) -> bool:
        held, _ = read_lock(self.path)
        return held is not None and held.get("token") == self.token

    def verify(self) -> None:
        """Raise ``WarehouseLocked`` unless this lock is still ours (called before every commit)."""
        if self.lost or not self.holds():
            self.lost = True
            held, _ = read_lock(self.path)
            raise WarehouseLocked(
                f"the load lock {self.path} was taken over by {describe(held) if held else 'nobody (removed)'}; "
                "this load stops before committing again (rerun it: it resumes where it stopped)"
            )

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        try:
            if self.holds():
                self.path.unlink(missing_ok=True)
        except OSError:
            pass


def unlock(meta: Path, force: bool = False, stale_after: float = 900.0) -> str:
    """Remove the load lock when its holder is known to be gone; with ``force``, whatever holds it."""
    path = Path(meta) / LOCK_NAME
    held, age = read_lock(path)
    if age is None:
        return f"no lock at {path}"
    reason = stale_reason(held, age, stale_after)
    if reason is None and not force:
        raise WarehouseLocked(
            f"{path} is held by {describe(held)}, which may still be running; stop it first, or pass --force "
            "if you know it is gone (a holder on another host cannot be checked from here)"
        )
    path.unlink(missing_ok=True)
    return f"removed the lock of {describe(held)} ({reason or 'forced'})"
