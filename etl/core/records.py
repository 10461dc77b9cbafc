"""One landed line -> one typed update or one reject reason (pure Python: no Spark here).

Ingestion runs this on the executors, file by file, over the raw bytes (``etl.ingest``); tests
run it in microseconds. The rules, in one place (docs/ingest.md repeats them for users):

- A line is the bytes between two ``\\n``; a trailing ``\\r`` is dropped (CRLF files); a UTF-8
  byte-order mark at the start of a file is dropped. A line of only spaces, tabs and ``\\r`` is
  blank: not an update, counted apart.
- A line must be valid UTF-8 (no replacement: two different byte strings never become one key)
  and hold exactly one JSON object (RFC 8259: no ``NaN``, no trailing content, no field twice).
- Every field is type-checked; nothing is rounded, trimmed or Unicode-normalised. Keys and text
  are kept exactly as delivered, so ``"Ab"``, ``" Ab"`` and ``"A\\u0062"``-as-NFD stay three keys.
  The one conversion: a ``natural_key`` given as a JSON integer is taken as its decimal digits
  (``42`` and ``"42"`` are one key).
- A key (``source_id``, ``natural_key``) made only of whitespace or invisible characters (any
  Unicode space, tab, newline, NBSP, zero-width space/joiners, BOM, other format and control
  characters) is missing; a key containing a control character is bad.
- Each line gets the first reason of ``REJECT_REASONS`` that applies, its key parts and its
  attributes taken one at a time in declared order (the first bad attribute gives its reason).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterator

from etl.core.model import Column, ColumnType, Entity, encode_key, load_model

REJECT_REASONS = (
    "oversized_record",  # longer than max_record_bytes
    "bad_encoding",  # not valid UTF-8, or a JSON escape of a lone surrogate
    "malformed_json",
    "trailing_content",  # more than one JSON value on the line
    "not_an_object",
    "duplicate_field",  # a field name twice in one object (which one would count?)
    "bad_envelope",  # a change event (format "debezium") without an op, or without the row its op needs
    "missing_source_id",
    "bad_source_id",  # not a string, or a control character in it
    "source_mismatch",  # differs from the landing path's source_id=
    "unknown_source",  # not in the setting ``sources`` (when it is set)
    "missing_natural_key",  # a key column missing, null or blank
    "bad_natural_key",  # a key column of the wrong type, or a control character in a text one
    "oversized_natural_key",  # a text key column longer than MAX_NATURAL_KEY_CHARS
    "bad_op",
    # Before the sequence: an entity ordered by one of its attributes reads its sequence there.
    "bad_attributes",  # ``attributes`` is not an object
    "bad_source_seq",  # the sequence column (source_seq, or the entity's) missing or not a sequence
    "bad_event_ts",
    "bad_arrival_ts",
    "bad_attribute_type",  # an attribute of the wrong JSON type (a non-numeric decimal, a date not YYYY-MM-DD)
    "bad_attribute_value",  # right type, value not storable: past its decimal(p,s) or 64 bits, a NUL
    "missing_reference",  # a fact's reference column missing, or not a valid key of its dimension
)
MAX_NATURAL_KEY_CHARS = 256
MAX_FIELD_NAME_CHARS = 64  # of a field a line names twice, in reason_detail
BOM = b"\xef\xbb\xbf"
MAX_SOURCE_SEQ = 2**63 - 1
MIN_INTEGER = -(2**63)
_DIGITS = re.compile(r"[0-9]{1,19}")
_INTEGER_TEXT = re.compile(r"-?[0-9]+")
_INTEGER_DIGITS = 19  # no 64-bit integer has more (leading zeros aside)
_DATE_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DECIMAL_TEXT = re.compile(r"-?[0-9]+(\.[0-9]+)?")
# C0 controls but tab, newline and carriage return, and DEL: not storable as text everywhere
# (PostgreSQL refuses NUL), and the row hash separates fields with U+0000/U+0001.
_BAD_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MICROSECOND = timedelta(microseconds=1)


class Reject(Exception):
    """The line's reason, and the field of the line it concerns when one does (``rejected_updates``'
    ``reason_detail``: ``attributes.balance``, not the whole line to re-read by hand); raised by the
    checks below and caught once per line."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        assert reason in REJECT_REASONS, reason
        super().__init__(reason)
        self.reason = reason
        self.field = field

    def at(self, field: str) -> "Reject":
        """This reason, about ``field`` (the innermost check that named one wins)."""
        if self.field is None:
            self.field = field
        return self


def _checked(field: str, check: Callable, *args):
    """``check(*args)``, a ``Reject`` it raises naming ``field``."""
    try:
        return check(*args)
    except Reject as exc:
        raise exc.at(field) from None


@dataclass(frozen=True)
class Update:
    """A valid line's typed content (the ``ingested_updates`` columns the line determines)."""

    source_id: str
    natural_key: str  # the key's one text (``model.encode_key``)
    op: str
    source_seq: int
    event_ts: datetime
    arrival_ts: datetime | None  # None: the line's file minute
    key: dict = field(default_factory=dict)  # typed key parts, by column
    attributes: dict = field(default_factory=dict)  # typed attributes, by column (missing: None)

    def columns(self) -> dict:
        """The declared columns a row carries (keys other than ``natural_key``, then attributes)."""
        return {**{k: v for k, v in self.key.items() if k != "natural_key"}, **self.attributes}


def split_lines(content: bytes) -> Iterator[tuple[int, bytes | None]]:
    """``(line_number, line)`` for every physical line of a file; ``None`` for a blank line.

    A file ending in ``\\n`` has no extra empty line after it; one that does not end in ``\\n``
    still counts its last line (a writer cut short leaves a partial line, rejected as such)."""
    if content.startswith(BOM):
        content = content[len(BOM):]
    if not content:
        return
    parts = content.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    for number, line in enumerate(parts, 1):
        if line.endswith(b"\r"):
            line = line[:-1]
        yield number, (None if not line.strip(b" \t\r") else line)


def read_lines(stream, limit: int, on_bytes=None) -> Iterator[tuple[int, bytes | None, bool]]:
    """``split_lines`` over a binary stream without holding more than one line of ``limit`` bytes:
    ``(line_number, line, oversized)``; an oversized line keeps only its first ``limit`` bytes.
    ``on_bytes`` sees every byte read (for the file's fingerprint)."""
    number, first = 0, True
    while True:
        raw = stream.readline(limit + 2)
        if not raw:
            return
        if on_bytes:
            on_bytes(raw)
        oversized = False
        if not raw.endswith(b"\n") and len(raw) >= limit + 2:  # longer than any valid line: skip its rest
            oversized = True
            while True:
                rest = stream.readline(1 << 20)
                if not rest:
                    break
                if on_bytes:
                    on_bytes(rest)
                if rest.endswith(b"\n"):
                    break
            line = raw[:limit]
        else:
            line = raw[:-1] if raw.endswith(b"\n") else raw
        if first and line.startswith(BOM):
            line = line[len(BOM):]
            if not line and not raw.endswith(b"\n"):
                return  # a file holding only a byte-order mark
        first = False
        number += 1
        if not oversized and line.endswith(b"\r"):
            line = line[:-1]
        if not oversized and len(line) > limit:
            oversized = True
        yield number, (None if not oversized and not line.strip(b" \t\r") else line), oversized


def is_blank(text: str) -> bool:
    """Only whitespace or invisible characters (Unicode Z*, Cc, Cf; ``str.isspace``)."""
    return all(ch.isspace() or unicodedata.category(ch) in ("Zs", "Zl", "Zp", "Cc", "Cf") for ch in text)


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


_WS = " \t\r\n"


def parse_object(line: bytes, max_record_bytes: int) -> dict:
    """The line's one JSON object, or ``Reject``."""
    if len(line) > max_record_bytes:
        raise Reject("oversized_record")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise Reject("bad_encoding") from None
    duplicates = []

    def pairs(items: list) -> dict:
        out = dict(items)
        if len(out) != len(items):
            seen = set()
            duplicates.extend(k for k, _ in items if k in seen or seen.add(k))
        return out

    decoder = json.JSONDecoder(object_pairs_hook=pairs, parse_float=Decimal, parse_constant=_no_constants)
    try:
        value, end = decoder.raw_decode(text, len(text) - len(text.lstrip(_WS)))
    except (ValueError, RecursionError):  # JSONDecodeError, NaN, past the digit or nesting limit
        raise Reject("malformed_json") from None
    if text[end:].strip(_WS):
        raise Reject("trailing_content")
    if not isinstance(value, dict):
        raise Reject("not_an_object")
    if duplicates:  # the name as text any table holds (a lone surrogate escape is not), cut
        raise Reject("duplicate_field", duplicates[0].encode("utf-8", "backslashreplace").decode()[:MAX_FIELD_NAME_CHARS])
    return value


def _utf8(text: str) -> str:
    """A JSON escape can make a lone surrogate (``"\\ud800"``), which no UTF-8 table can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Reject("bad_encoding") from None
    return text


def _key_text(value: Any, missing: str, bad: str, integers: bool) -> str:
    if value is None:
        raise Reject(missing)
    if integers and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise Reject(bad)
    _utf8(value)
    if is_blank(value):
        raise Reject(missing)
    if _has_control(value):
        raise Reject(bad)
    return value


def parse_timestamp(value: Any) -> datetime:
    """ISO 8601 text (as ``datetime.fromisoformat`` reads it; digits past microseconds are cut),
    UTC when it has no offset, a year 0001-9999 once in UTC. ``ValueError``/``OverflowError``
    otherwise."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    ts = datetime.fromisoformat(value)
    if ts.tzinfo is None:
        return ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc)  # OverflowError when the offset crosses year 1 or 9999


def _timestamp(value: Any, reason: str) -> datetime:
    try:
        return parse_timestamp(value)
    except (ValueError, OverflowError):
        raise Reject(reason) from None


def _number(value: Any, text: re.Pattern, parse, reason: str, types: tuple = (int,)):
    """A JSON number of ``types``, or a string all of whose characters ``text`` accepts; never a
    boolean (JSON's true is not 1)."""
    if isinstance(value, bool) or not (isinstance(value, types) or (isinstance(value, str) and text.fullmatch(value))):
        raise Reject(reason)
    return parse(value)


def _source_seq(value: Any) -> int:
    seq = _number(value, _DIGITS, int, "bad_source_seq")
    if not 0 <= seq <= MAX_SOURCE_SEQ:
        raise Reject("bad_source_seq")
    return seq


def _decimal(value: Any, t: ColumnType, reason_type: str, reason_value: str) -> Decimal:
    amount = _number(value, _DECIMAL_TEXT, Decimal, reason_type, (int, Decimal))
    try:
        exact = amount.quantize(Decimal(1).scaleb(-t.scale))
    except InvalidOperation:  # more digits than the decimal context holds
        raise Reject(reason_value) from None
    if exact != amount or abs(exact) >= Decimal(10) ** (t.precision - t.scale):
        raise Reject(reason_value)  # would be rounded, or does not fit decimal(p,s)
    return exact


def _integer(value: Any, reason_type: str, reason_value: str) -> int:
    """A 64-bit integer: a JSON integer, or its digits as text (leading zeros allowed). Digits past
    64 bits are the value's fault however many there are (never given to ``int``, which refuses
    thousands of digits)."""

    def parse(v: int | str) -> int:
        if isinstance(v, int):
            return v
        digits = v.lstrip("-").lstrip("0") or "0"
        if len(digits) > _INTEGER_DIGITS:
            raise Reject(reason_value)
        return -int(digits) if v.startswith("-") else int(digits)

    number = _number(value, _INTEGER_TEXT, parse, reason_type)
    if not MIN_INTEGER <= number <= MAX_SOURCE_SEQ:
        raise Reject(reason_value)
    return number


def _date(value: Any, reason: str) -> date:
    if not isinstance(value, str) or not _DATE_TEXT.fullmatch(value):
        raise Reject(reason)
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise Reject(reason) from None


def _text_attribute(value: Any) -> str:
    if not isinstance(value, str):
        raise Reject("bad_attribute_type")
    _utf8(value)
    if _BAD_TEXT.search(value):
        raise Reject("bad_attribute_value")
    return value


def _attribute_check(t: ColumnType) -> Callable[[Any], Any]:
    """The typed value of a present, non-null attribute of type ``t``, or ``Reject``."""
    kind = t.kind
    if kind == "string":
        return _text_attribute
    if kind == "integer":
        return lambda v: _integer(v, "bad_attribute_type", "bad_attribute_value")
    if kind == "decimal":
        return lambda v: _decimal(v, t, "bad_attribute_type", "bad_attribute_value")
    if kind == "date":
        return lambda v: _date(v, "bad_attribute_type")
    if kind == "timestamp":
        return lambda v: _timestamp(v, "bad_attribute_type")
    if kind == "boolean":
        return _boolean_attribute
    raise AssertionError(kind)  # pragma: no cover


def _boolean_attribute(value: Any) -> bool:
    if not isinstance(value, bool):  # JSON's true, never 1 or "true"
        raise Reject("bad_attribute_type")
    return value


def _key_part_check(t: ColumnType) -> Callable[[Any], tuple[Any, str]]:
    """A present key part of type ``t``: its typed value and its canonical text, or ``Reject``."""
    kind = t.kind

    def typed(v):
        if kind == "string":
            text = _key_text(v, "missing_natural_key", "bad_natural_key", integers=True)
            if len(text) > MAX_NATURAL_KEY_CHARS:
                raise Reject("oversized_natural_key")
            return text, text
        if isinstance(v, str) and is_blank(v):
            raise Reject("missing_natural_key")
        if kind == "integer":
            n = _integer(v, "bad_natural_key", "bad_natural_key")
            return n, str(n)
        if kind == "decimal":
            d = _decimal(v, t, "bad_natural_key", "bad_natural_key")
            return d, format(d, "f")
        if kind == "date":
            d = _date(v, "bad_natural_key")
            return d, d.isoformat()
        if kind == "timestamp":
            ts = _timestamp(v, "bad_natural_key")
            return ts, ts.isoformat()
        if kind == "boolean":
            if not isinstance(v, bool):
                raise Reject("bad_natural_key")
            return v, "true" if v else "false"
        raise AssertionError(kind)  # pragma: no cover

    return typed


@dataclass(frozen=True)
class EntityRules:
    """An entity's line rules, built once per entity (the executors check millions of lines)."""

    key: tuple[tuple[str, Callable], ...]
    attributes: tuple[tuple[str, Callable], ...]
    sequence: Column | None
    required: tuple[tuple[str, Callable], ...] = ()  # a fact's attributes that its references join by

    @classmethod
    def of(cls, entity: Entity) -> "EntityRules":
        by = {c for r in entity.references for c in r.by}
        return cls(
            tuple((c.name, _key_part_check(c.type)) for c in entity.key),
            tuple((c.name, _attribute_check(c.type)) for c in entity.attributes),
            entity.sequence_column,
            tuple((c.name, _key_part_check(c.type)) for c in entity.attributes if c.name in by),
        )


@functools.lru_cache(maxsize=64)
def _rules_of(entity: Entity) -> EntityRules:
    return EntityRules.of(entity)


def rules(entity: Entity | None = None) -> EntityRules:
    return _rules_of(entity or load_model().entity())


def _sequence(attributes: Any, column: Column | None, value: Any) -> int:
    """The line's sequence: ``source_seq``, or the entity's sequence attribute (a timestamp as
    microseconds since 1970)."""
    if column is None:
        return _source_seq(value)
    raw = attributes.get(column.name)
    if raw is None:
        raise Reject("bad_source_seq")
    if column.type.kind == "integer":
        return _source_seq(raw)
    ts = _timestamp(raw, "bad_source_seq")
    micros = (ts - datetime(1970, 1, 1, tzinfo=timezone.utc)) // _MICROSECOND
    if not 0 <= micros <= MAX_SOURCE_SEQ:
        raise Reject("bad_source_seq")
    return micros


def check_record(rec: dict, path_source_id: str, sources: tuple[str, ...] = (), entity: Entity | None = None) -> Update:
    """The typed update of a parsed object, or ``Reject`` (checks in ``REJECT_REASONS`` order).
    Fields the entity does not declare are ignored, at any level."""
    r = rules(entity)
    source_id = _checked("source_id", _key_text, rec.get("source_id"), "missing_source_id", "bad_source_id", False)
    if source_id != path_source_id:
        raise Reject("source_mismatch", "source_id")
    if sources and source_id not in sources:
        raise Reject("unknown_source", "source_id")
    key, texts = {}, []
    for name, check in r.key:
        value = rec.get(name)
        if value is None:
            raise Reject("missing_natural_key", name)
        key[name], text = _checked(name, check, value)
        texts.append(text)
    op = rec.get("op")
    if op not in ("upsert", "delete") or not isinstance(op, str):
        raise Reject("bad_op", "op")
    attributes = rec.get("attributes")
    if attributes is None:
        attributes = {}
    if not isinstance(attributes, dict):
        raise Reject("bad_attributes", "attributes")
    sequence_field = "source_seq" if r.sequence is None else f"attributes.{r.sequence.name}"
    source_seq = _checked(sequence_field, _sequence, attributes, r.sequence, rec.get("source_seq"))
    event_ts = _checked("event_ts", _timestamp, rec.get("event_ts"), "bad_event_ts")
    arrival = rec.get("arrival_ts")
    arrival_ts = None if arrival is None else _checked("arrival_ts", _timestamp, arrival, "bad_arrival_ts")
    typed = {}
    for name, check in r.attributes:
        value = attributes.get(name)
        typed[name] = None if value is None else _checked(f"attributes.{name}", check, value)
    for name, check in r.required:  # the dimension's key rules (a missing value too): an inferred member must be a key it accepts
        try:
            check(attributes.get(name))
        except Reject:
            raise Reject("missing_reference", f"attributes.{name}") from None
    return Update(
        source_id=source_id,
        natural_key=encode_key(tuple(texts)),
        op=op,
        source_seq=source_seq,
        event_ts=event_ts,
        arrival_ts=arrival_ts,
        key=key,
        attributes=typed,
    )


def check_line(line: bytes, path_source_id: str, max_record_bytes: int, sources: tuple[str, ...] = (),
               entity: Entity | None = None) -> Update:
    """``parse_object`` then ``check_record``: an ``Update`` or ``Reject``."""
    return check_record(parse_object(line, max_record_bytes), path_source_id, sources, entity)


def printable(line: bytes, limit: int) -> str:
    """A rejected line as text for the quarantine: bytes that are not UTF-8 shown as ``\\xNN``."""
    return line[:limit].decode("utf-8", errors="backslashreplace")
