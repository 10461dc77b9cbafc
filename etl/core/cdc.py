"""One change event (Debezium's envelope) -> one typed update, a reject reason, or nothing for a
tombstone (pure Python, like ``etl.core.records``; docs/sources.md has the mapping for users).

A change event is mapped onto the project's own line shape, then checked by the very rules a JSON
line is (``check_record``), so a field gets the same reason whichever way it came:

- ``op`` ``c`` (insert), ``u`` (update) and ``r`` (a snapshot read) are upserts of ``after``;
  ``d`` is a delete of ``before`` (its attributes are what ``before`` holds: all of them under
  ``REPLICA IDENTITY FULL``, the key alone otherwise). Any other op (``t`` truncate, ``m``
  message) is ``bad_op``: it names no row.
- A tombstone (a Kafka record without a value, which Debezium sends after a delete for log
  compaction) is not an update: it is counted apart, like a blank line.
- The sequence is the event's position in the source's log (``Input.sequence``, default
  ``source.lsn``) unless the entity orders versions by one of its attributes; the event time is
  ``Input.event_time`` (default ``source.ts_ms``: when the change was committed at the source).
- Values as Debezium's JSON converter writes them: a date as days since 1970 or ISO text, a
  timestamp as a number in ``Input.timestamp_unit`` or ISO text, a decimal as a number or text
  (``decimal.handling.mode=string``; the default ``precise`` mode's base64 bytes are refused as
  ``bad_attribute_type``). An envelope wrapped with its schema (``{"schema": ..., "payload": ...}``,
  ``schemas.enable=true``) is unwrapped.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

from etl.core.model import TIMESTAMP_UNITS, Column, Entity, Input
from etl.core.records import Reject, Update, check_record, parse_object

UPSERT_OPS = ("c", "u", "r")
DELETE_OPS = ("d",)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EPOCH_DAY = date(1970, 1, 1)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _at(event: dict, path: str) -> Any:
    """The value at ``path`` (``ts_ms`` or ``source.lsn``); ``None`` when absent."""
    head, _, tail = path.partition(".")
    if not tail:
        return event.get(path)
    block = event.get(head)
    return block.get(tail) if isinstance(block, dict) else None


def _iso_from_micros(micros: float) -> str | None:
    try:
        return (_EPOCH + timedelta(microseconds=micros)).isoformat()
    except OverflowError:
        return None  # past year 9999: the line rule refuses what is left


def _value(column: Column, value: Any, unit: str) -> Any:
    """Debezium's encodings of a date (days) and a timestamp (a number in ``unit``) as the ISO text
    the line rules read; anything else as given."""
    if _is_integer(value):
        if column.type.kind == "date":
            try:
                return (_EPOCH_DAY + timedelta(days=value)).isoformat()
            except OverflowError:
                return value
        if column.type.kind == "timestamp":
            return _iso_from_micros(value * TIMESTAMP_UNITS[unit]) or value
    return value


def _event_time(value: Any) -> Any:
    """Milliseconds since 1970 (Debezium's ``ts_ms``) as ISO text; text as given."""
    if _is_integer(value):
        return _iso_from_micros(value * 1000) or value
    return value


def as_line(event: dict, source_id: str, entity: Entity, spec: Input) -> dict:
    """The change event as the project's own line (``docs/ingest.md``), or ``Reject``."""
    if "payload" in event and "schema" in event:  # the JSON converter with schemas.enable=true
        event = event["payload"]
        if not isinstance(event, dict):
            raise Reject("bad_envelope")
    op = event.get("op")
    if not isinstance(op, str):
        raise Reject("bad_envelope")
    if op in UPSERT_OPS:
        row, kind = event.get("after"), "upsert"
    elif op in DELETE_OPS:
        row, kind = event.get("before"), "delete"
    else:
        raise Reject("bad_op")
    if not isinstance(row, dict):
        raise Reject("bad_envelope")
    line = {"source_id": source_id, "op": kind, "event_ts": _event_time(_at(event, spec.event_time))}
    for c in entity.key:
        line[c.name] = _value(c, row.get(spec.field_of(c.name)), spec.timestamp_unit)
    line["attributes"] = {c.name: _value(c, row.get(spec.field_of(c.name)), spec.timestamp_unit) for c in entity.attributes}
    if entity.sequence_column is None:
        line["source_seq"] = _at(event, spec.sequence)
    return line


def check_change(value: bytes | None, source_id: str, max_record_bytes: int, sources: tuple[str, ...],
                 entity: Entity, spec: Input) -> Update | None:
    """A change event's update; ``None`` for a tombstone; ``Reject`` otherwise."""
    if value is None:
        return None
    event = parse_object(value, max_record_bytes)
    return check_record(as_line(event, source_id, entity, spec), source_id, sources, entity)


def check_input(value: bytes | None, source_id: str, max_record_bytes: int, sources: tuple[str, ...],
                entity: Entity, spec: Input) -> Update | None:
    """One line or record of a source, in its input's format (``None``: a tombstone)."""
    if spec.format == "debezium":
        return check_change(value, source_id, max_record_bytes, sources, entity, spec)
    if value is None:
        return None
    return check_record(parse_object(value, max_record_bytes), source_id, sources, entity)
