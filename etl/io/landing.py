"""The landing zone's layout, read strictly (pure Python: no Spark here).

    <landing_root>/source_id=<source>/arrival_date=<YYYY-MM-DD>/arrival_hour=<HH>/updates-<YYYYMMDDTHHMMSS>.jsonl

A landing file is a *piece*: the arrivals of ``piece_seconds`` (a setting, a divisor of 60, 60 by
default) from the time in its name. The name's seconds may be left out when they are 0, so with
the default the minute files ``updates-<YYYYMMDDTHHMM>.jsonl`` are the pieces. A run owns the
landing files whose piece starts in its interval. Only a regular file (or a link to one) whose
name is exactly a landing name in the folders of its hour is data. Everything else met on the way
(other names such as ``copy of updates-...``, a misplaced file, a directory or FIFO or dangling
link with a landing name, an entry outside ``source_id=`` folders) is *skipped* and reported in
the run's summary, never read. A landing name whose time is not a piece's start (the landing
agent cuts pieces another length than ``piece_seconds`` says) stops the run, as does data that
cannot be read (an unreadable folder or file): skipping it would lose its lines.

A file's identity in the warehouse (``update_id``, ``file_name``) is its path relative to the
landing root, so it does not depend on where the zone is mounted.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from etl.core.model import shown, source_name_problem

LANDING_NAME = re.compile(r"updates-(\d{8}T\d{4}(?:\d{2})?)\.jsonl")  # the whole name (fullmatch)
MINUTE_FORMAT = "%Y%m%dT%H%M"
SECOND_FORMAT = "%Y%m%dT%H%M%S"
SOURCE_PREFIX = "source_id="


class LandingError(RuntimeError):
    """The landing zone cannot be read; nothing was written."""


@dataclass(frozen=True)
class LandedFile:
    path: str  # absolute, as this host sees it (read by the executors too: a shared POSIX path)
    name: str  # relative to the landing root: the file's identity
    source_id: str
    minute: datetime  # the start of its piece (its minute for a minute file)


@dataclass(frozen=True)
class Skipped:
    name: str  # relative to the landing root
    reason: str


@dataclass
class LandingScan:
    files: list[LandedFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def landing_file(landing_root: Path, source_id: str, start: datetime, piece_seconds: int = 60) -> Path:
    """Where the landing agent puts one source's arrivals of the piece starting at ``start`` (a
    minute's file by default; with shorter pieces the name has seconds); ``ValueError`` for a
    source name that is not one folder name (it would point outside the landing zone), or a
    start that is not a piece's."""
    problem = source_name_problem(source_id)
    if problem:
        raise ValueError(f"source {shown(source_id)} {problem}")
    m = start.astimezone(timezone.utc)
    if m.microsecond or m.second % piece_seconds:
        raise ValueError(f"{m.isoformat()} is not the start of a piece of {piece_seconds} s")
    return (
        Path(landing_root)
        / f"{SOURCE_PREFIX}{source_id}"
        / f"arrival_date={m:%Y-%m-%d}"
        / f"arrival_hour={m:%H}"
        / f"updates-{m:{SECOND_FORMAT if piece_seconds < 60 else MINUTE_FORMAT}}.jsonl"
    )


def piece_of(name: str) -> datetime | None:
    """The start of a landing name's piece (UTC); ``None`` when it is no landing name or no time."""
    match = LANDING_NAME.fullmatch(name)
    if match is None:
        return None
    text = match.group(1)
    try:
        return datetime.strptime(text, SECOND_FORMAT if len(text) == 15 else MINUTE_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _listdir(path: Path, root: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except PermissionError as exc:
        raise LandingError(f"landing folder {path} is not readable ({exc.strerror}); fix its permissions and rerun") from None
    except NotADirectoryError:
        return []
    except OSError as exc:
        raise LandingError(f"landing folder {path} cannot be listed: {exc}") from None


def _utf8_name(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:  # os.listdir gives undecodable bytes as lone surrogates
        return False


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def minutes(start: datetime, end: datetime) -> list[datetime]:
    out, m = [], start.replace(second=0, microsecond=0)
    while m < end:
        out.append(m)
        m += timedelta(minutes=1)
    return out


def scan_landing(landing_root: Path, start: datetime, end: datetime, piece_seconds: int = 60) -> LandingScan:
    """The landing files whose piece starts in ``[start, end)``, sorted by name, and what was
    skipped. ``LandingError`` for a landing name in that span whose time is not a piece's start."""
    root = Path(landing_root)
    if not root.exists():
        raise LandingError(f"landing zone {root} does not exist (setting 'landing_root')")
    if not root.is_dir():
        raise LandingError(f"landing zone {root} is not a directory (setting 'landing_root')")
    wanted = (start, end, piece_seconds)
    hours = sorted({m.replace(minute=0) for m in minutes(start, end)})
    days = sorted({h.strftime("%Y-%m-%d") for h in hours})
    out = LandingScan()

    def skip(path: Path, reason: str) -> None:
        out.skipped.append(Skipped(os.path.relpath(path, root), reason))

    def folders(parent: Path, pattern: str, what: str):
        """The sub-folders of ``parent`` named as ``pattern`` says; anything else is skipped."""
        for entry in _listdir(parent, root):
            path = parent / entry
            if re.fullmatch(pattern, entry) and path.is_dir():
                yield entry.split("=", 1)[1], path
            else:
                skip(path, what)

    for source_id, path in folders(root, r"(?s)" + re.escape(SOURCE_PREFIX) + r".*", "outside any source_id=<source> folder"):
        if not source_id or not _utf8_name(path.name):
            skip(path, "the folder's source_id is empty or not valid UTF-8")
            continue
        for day, date_dir in folders(path, r"arrival_date=\d{4}-\d{2}-\d{2}", "not an arrival_date=YYYY-MM-DD folder"):
            if day not in days:
                continue
            for hh, hour_dir in folders(date_dir, r"arrival_hour=\d{2}", "not an arrival_hour=HH folder"):
                try:
                    hour = datetime.strptime(f"{day} {hh}", "%Y-%m-%d %H").replace(tzinfo=timezone.utc)
                except ValueError:
                    skip(hour_dir, "not a valid date and hour")
                    continue
                if hour in hours:
                    _scan_hour(hour_dir, hour, source_id, wanted, root, out, skip)
    out.files.sort(key=lambda f: f.name)
    return out


def _scan_hour(hour_dir: Path, hour: datetime, source_id: str, wanted: tuple, root: Path, out: LandingScan, skip) -> None:
    start, end, piece_seconds = wanted
    for name in _listdir(hour_dir, root):
        path = hour_dir / name
        if LANDING_NAME.fullmatch(name) is None:
            skip(path, "not a landing file name (updates-YYYYMMDDTHHMM[SS].jsonl)")
            continue
        minute = piece_of(name)
        if minute is None:
            skip(path, "not a valid time in the file name")
            continue
        if minute.replace(minute=0, second=0) != hour:
            skip(path, f"misplaced: a file of {minute:%Y-%m-%d %H:%M:%S} belongs under "
                       f"arrival_date={minute:%Y-%m-%d}/arrival_hour={minute:%H}")
            continue
        if not start <= minute < end:
            continue  # another run's piece
        if minute.second % piece_seconds:
            raise LandingError(
                f"landing file {os.path.relpath(path, root)} starts at {minute:%H:%M:%S}, not at the start of a piece of "
                f"{piece_seconds} s (setting piece_seconds): set piece_seconds to the length of the landing agent's files, "
                f"or rename the file to its piece's start")
        try:
            st = os.stat(path)  # follows a link
        except FileNotFoundError:
            skip(path, "a dangling symbolic link")
            continue
        except OSError as exc:
            raise LandingError(f"landing file {path} cannot be read: {exc}") from None
        if not stat.S_ISREG(st.st_mode):
            skip(path, f"{_kind(st.st_mode)}, not a file")
            continue
        if not os.access(path, os.R_OK):
            raise LandingError(f"landing file {path} is not readable; fix its permissions and rerun")
        out.files.append(LandedFile(str(path), os.path.relpath(path, root), source_id, minute))


# ---------------------------------------------------------------------- fingerprints

@dataclass(frozen=True)
class Fingerprint:
    """What ingest saw of one file: the warehouse's record that landed files are immutable."""

    name: str
    bytes: int
    sha256: str
    lines: int  # non-blank lines (updates in)
    blank_lines: int


def fingerprint(name: str, content: bytes, lines: int, blank_lines: int) -> Fingerprint:
    return Fingerprint(name, len(content), hashlib.sha256(content).hexdigest(), lines, blank_lines)


@dataclass(frozen=True)
class Change:
    name: str
    kind: str  # "added", "removed", "changed", "appended"
    recorded_bytes: int | None
    current_bytes: int | None


def compare(recorded: dict[str, Fingerprint], current: dict[str, tuple[int, str, str | None]]) -> list[Change]:
    """Files of a loaded run that differ from what ingest recorded. ``current`` maps a name to its
    (bytes, sha256 of the whole file, sha256 of its first ``recorded bytes`` or ``None``)."""
    changes = []
    for name in sorted(set(recorded) | set(current)):
        rec, cur = recorded.get(name), current.get(name)
        if rec is None:
            changes.append(Change(name, "added", None, cur[0]))
        elif cur is None:
            changes.append(Change(name, "removed", rec.bytes, None))
        elif (cur[0], cur[1]) != (rec.bytes, rec.sha256):
            appended = cur[0] > rec.bytes and cur[2] == rec.sha256
            changes.append(Change(name, "appended" if appended else "changed", rec.bytes, cur[0]))
    return changes


def file_digest(path: str, prefix_bytes: int | None = None) -> tuple[int, str, str | None]:
    """(bytes, sha256, sha256 of the first ``prefix_bytes``) of a file, read once."""
    whole, prefix = hashlib.sha256(), hashlib.sha256() if prefix_bytes is not None else None
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            if prefix is not None and size < prefix_bytes:
                prefix.update(chunk[: prefix_bytes - size])
            whole.update(chunk)
            size += len(chunk)
    return size, whole.hexdigest(), (prefix.hexdigest() if prefix is not None and size >= prefix_bytes else None)


def move_tail(source: Path, keep_bytes: int, target: Path) -> str:
    """Move the bytes of ``source`` past its first ``keep_bytes`` into a new landing file ``target``
    (the whole file when ``keep_bytes`` is 0, which then removes ``source``). Idempotent: a rerun
    after a crash between the two steps finds ``target`` holding exactly the tail and finishes.
    Returns what it did."""
    content = Path(source).read_bytes()
    tail = content[keep_bytes:]
    if target.exists():
        if target.read_bytes() != tail:
            raise LandingError(f"{target} exists with other content; choose another minute for --move-to")
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.moving")
        tmp.write_bytes(tail)
        os.replace(tmp, target)
    if keep_bytes:
        os.truncate(source, keep_bytes)
        return f"moved {len(tail)} bytes to {target}"
    os.unlink(source)
    return f"moved the whole file to {target}"
