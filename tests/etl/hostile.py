"""A seeded generator of hostile landing trees and lines (shared by the fuzz tests).

It writes what a careless source, a broken agent or an attacker would: valid records among
type confusions in every field, two objects on a line, invalid UTF-8, BOMs, CRLF, blank and
whitespace lines, duplicate fields, NaN, deep nesting, oversized and cut-short lines, tricky keys
(near-duplicates that differ only in whitespace, case, Unicode normalisation or bad bytes), and
entries that are not data: near-miss file names, misplaced files, directories, FIFOs and
dangling links with landing names, files outside any source folder. It records every physical
line of every real landing file, so a test can account for each one.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from etl.io.landing import landing_file

SOURCES = ("crm", "north east", "o'hara", "100%", "a%20b", "ünï", 'q"uote')
KEYS = (
    "1", "01", " 1", "1 ", "K", "k", "\u00e9", "e\u0301", "\U0001f600", "a\u200bb", "42", "-7", "x" * 256,
    "tab\tinside", "line\u2028sep",
)
JUNK_VALUES = (None, True, False, 0, -1, 2**63, 1.5, "", " ", "\t", "\u00a0", "\u200b", [], [1], {}, {"a": 1}, "NaN",
               "9999-99-99", "0000-01-01T00:00:00Z", "10000-01-01T00:00:00Z", "12.345", "1e400", "x" * 300)
FIELDS = ("source_id", "natural_key", "op", "source_seq", "event_ts", "arrival_ts", "attributes")


@dataclass
class Tree:
    """What was planted: per real landing file (name relative to the root), its physical lines
    (bytes, or None for a blank one); and the names of entries that must be reported as skipped."""

    files: dict[str, list[bytes | None]] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    outside: set[str] = field(default_factory=set)  # real landing files of other minutes: never read

    @property
    def lines(self) -> int:
        return sum(len(v) for v in self.files.values())


def record(rng: random.Random, source: str, minute: datetime) -> dict:
    return {
        "source_id": source,
        "natural_key": rng.choice(KEYS) if rng.random() < 0.7 else str(rng.randrange(50)),
        "op": rng.choice(("upsert", "upsert", "delete")),
        "source_seq": rng.randrange(0, 10**6),
        "event_ts": (minute + timedelta(seconds=rng.randrange(60))).isoformat().replace("+00:00", "Z"),
        "arrival_ts": (minute + timedelta(seconds=rng.randrange(60))).isoformat(),
        "attributes": {"name": rng.choice(("A", "Bé", None)), "city": "Oslo", "balance": rng.choice(("1.50", 3, 2.25, None))},
    }


def hostile_line(rng: random.Random, source: str, minute: datetime) -> bytes | None:
    """One physical line (without its newline); None means a blank line."""
    rec = record(rng, source, minute)
    kind = rng.randrange(20)
    if kind < 7:
        return json.dumps(rec, ensure_ascii=rng.random() < 0.5).encode()
    if kind == 7:  # a type confusion or a missing field
        name = rng.choice(FIELDS)
        if rng.random() < 0.2:
            rec.pop(name)
        else:
            rec[name] = rng.choice(JUNK_VALUES)
        return json.dumps(rec).encode()
    if kind == 8:  # an attribute confusion
        rec["attributes"][rng.choice(("name", "email", "city", "balance"))] = rng.choice(JUNK_VALUES)
        return json.dumps(rec).encode()
    if kind == 9:
        return json.dumps(rec).encode() + json.dumps(record(rng, source, minute)).encode()
    if kind == 10:  # invalid UTF-8 in the key
        bad = rng.choice((b"\xff", b"\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"))
        rec["natural_key"] = "KEY"
        return json.dumps(rec).encode().replace(b"KEY", b"k" + bad + b"x")
    if kind == 11:
        return None if rng.random() < 0.5 else rng.choice((b"   ", b"\t", b" \t \r"))
    if kind == 12:  # a field twice
        return json.dumps(rec).encode()[:-1] + b', "natural_key": "other"}'
    if kind == 13:
        return rng.choice((b'{"a": NaN}', b"[" * 3000 + b"]" * 3000, b"null", b"[]", b'"text"', b"{}", b"\x00\x01",
                           b"\xef\xbb\xbf" + json.dumps(rec).encode()))
    if kind == 14:  # oversized
        rec["pad"] = "p" * rng.randrange(2000, 5000)
        return json.dumps(rec).encode()
    if kind == 15:  # a lone surrogate or control character by JSON escape
        rec["natural_key"] = "KEY"
        return json.dumps(rec).encode().replace(b"KEY", rng.choice((b"\\ud800", b"a\\u0007b", b"\\u0000")))
    if kind == 16:
        return json.dumps(rec).encode() + rng.choice((b" x", b",", b"}", b" {}"))
    if kind == 17:  # not UTF-8 at all
        return json.dumps(rec, ensure_ascii=False).encode("utf-16")[2:] if rng.random() < 0.5 else "Müller".encode("latin-1")
    if kind == 18:
        return bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 40))).replace(b"\n", b"")
    return json.dumps(rec).encode()[: rng.randrange(1, 30)]  # cut short


def file_bytes(rng: random.Random, source: str, minute: datetime, n: int) -> tuple[bytes, list[bytes | None]]:
    lines = [hostile_line(rng, source, minute) for _ in range(n)]
    lines = [None if ln is None else ln.replace(b"\n", b"") for ln in lines]
    lines = [None if ln is not None and not ln.strip(b" \t\r") else ln for ln in lines]
    if not lines:
        return (b"\xef\xbb\xbf" if rng.random() < 0.2 else b""), []
    eol = b"\r\n" if rng.random() < 0.3 else b"\n"
    body = eol.join(b"" if ln is None else ln for ln in lines)
    if rng.random() < 0.8 or (lines and lines[-1] is None):
        body += eol  # a last line without its newline still counts (a cut-short writer)
    if rng.random() < 0.2:
        body = b"\xef\xbb\xbf" + body
    # What a reader must see: each line without its end-of-line (one \r before \n is part of it).
    seen = [ln if ln is None or eol == b"\r\n" else ln.removesuffix(b"\r") for ln in lines]
    return body, [None if ln is not None and not ln.strip(b" \t\r") else ln for ln in seen]


def plant(root: Path, start: datetime, minutes: int, seed: int, lines_per_file: int = 25) -> Tree:
    rng = random.Random(seed)
    tree = Tree()
    root.mkdir(parents=True, exist_ok=True)
    sources = rng.sample(SOURCES, rng.randrange(2, len(SOURCES) + 1))
    for source in sources:
        for m in range(minutes):
            if rng.random() < 0.25:
                continue
            minute = start + timedelta(minutes=m)
            path = landing_file(root, source, minute)
            path.parent.mkdir(parents=True, exist_ok=True)
            body, lines = file_bytes(rng, source, minute, rng.randrange(0, lines_per_file))
            path.write_bytes(body)
            name = os.path.relpath(path, root)
            tree.files[name] = lines if body.strip(b"\xef\xbb\xbf") else []
            if rng.random() < 0.3:  # a near-miss copy beside it
                copy = path.with_name(rng.choice(("backup-", "copy of ", ".", "old_")) + path.name)
                copy.write_bytes(body)
                tree.skipped.add(os.path.relpath(copy, root))
        hour = landing_file(root, source, start).parent
        # Not data, with landing names in the interval's minutes that hold no file yet.
        free = [start + timedelta(minutes=m) for m in range(minutes)
                if not landing_file(root, source, start + timedelta(minutes=m)).exists()
                and landing_file(root, source, start + timedelta(minutes=m)).parent == hour]
        rng.shuffle(free)
        for kind, minute in zip(("dir", "fifo", "dangling"), free):
            p = landing_file(root, source, minute)
            if kind == "dir":
                p.mkdir()
            elif kind == "fifo":
                os.mkfifo(p)
            else:
                p.symlink_to(root / "nowhere")
            tree.skipped.add(os.path.relpath(p, root))
        # A file of another minute (after the interval): never read by this run.
        later = landing_file(root, source, start + timedelta(minutes=minutes))
        if later.parent == hour and not later.exists():
            later.write_bytes(json.dumps(record(rng, source, start)).encode() + b"\n")
            tree.outside.add(os.path.relpath(later, root))
    stray = root / "updates-stray.jsonl"
    stray.write_bytes(b"{}\n")
    tree.skipped.add("updates-stray.jsonl")
    return tree
