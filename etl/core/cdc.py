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
- The sequence is the event's position in the source's log: the input's ``sequence`` fields
  (its connector's by default: ``source.lsn``, MySQL's ``file``/``pos``/``row``, SQL Server's
  LSN text...), each read as one or more non-negative integers, packed in order into one 63-bit
  number with ``sequence_bits`` per part. A part too wide for its bits is ``bad_source_seq``, never
  wrapped: a wrapped position would order a later change before an earlier one. A snapshot read
  without a position (SQL Server's carry none) comes before every streamed change: 0.
- The event time is ``Input.event_time`` (default ``source.ts_ms``: when the change was committed
  at the source).
- Values as Debezium's JSON converter writes them: a date as days since 1970 or ISO text, a
  timestamp as an integer in ``Input.timestamp_unit`` (exact integer arithmetic, cut to the
  microsecond like ISO text's extra digits) or ISO text, a decimal as ``Input.decimal_handling``
  says (``precise``: base64 of the unscaled value's bytes; ``string``: text; ``double``: a JSON
  number). A value in another encoding is refused with its field's reason, never guessed: the
  base64 text ``"0006"`` is -29293.50 at scale 2, not 6. An envelope wrapped with its schema
  (``{"schema": ..., "payload": ...}``, ``schemas.enable=true``) is unwrapped, and a decimal's
  scale is then the one its schema declares.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from etl.core.model import CONNECTOR_SEQUENCES, TIMESTAMP_UNITS, Column, Entity, Input
from etl.core.records import Reject, Update, check_record, parse_object

UPSERT_OPS = ("c", "u", "r")
DELETE_OPS = ("d",)
SNAPSHOT_OP = "r"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EPOCH_DAY = date(1970, 1, 1)
_MICROS_PER_SECOND = 1_000_000
_KAFKA_DECIMAL = "org.apache.kafka.connect.data.Decimal"
# A log position's text forms: Oracle's SCN (decimal digits), SQL Server's LSN (hex groups, e.g.
# 00000027:00000758:0003, one part each), PostgreSQL's text LSN (16/B374D848, one 64-bit number)
# and a binlog file name (mysql-bin.000003: its number).
_NUMBER_TEXT = re.compile(r"[0-9]{1,20}")
# A decimal's scale (a schema's parameter, a VariableScaleDecimal's field) and its bytes: far more
# than any decimal(38,s) needs, small enough that a hostile event cannot make a number too big to
# print (Python refuses int -> text past 4,300 digits) and poison every run that reads it again.
_SCALE_TEXT = re.compile(r"[0-9]{1,3}")
MAX_SCALE = 999
MAX_DECIMAL_BYTES = 64
_HEX_GROUPS = re.compile(r"[0-9A-Fa-f]{1,16}(?::[0-9A-Fa-f]{1,16})+")
_PG_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")
_LOG_FILE = re.compile(r"([A-Za-z0-9_.-]{1,255})\.([0-9]{1,10})")
_NAME_CHARACTER = re.compile(r"[A-Za-z_-]")


class _Unreadable:
    """A value the input's declared encoding does not read. The line rules refuse it as they
    refuse a value of the wrong type, with the field's own reason (``bad_natural_key``,
    ``bad_attribute_type``, ``bad_source_seq``) and in their usual order."""

    def __repr__(self) -> str:
        return "<unreadable>"


UNREADABLE = _Unreadable()
# Debezium's ``unavailable.value.placeholder`` default.
UNAVAILABLE_PLACEHOLDER = "__debezium_unavailable_value"


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _at(event: dict, path: str) -> Any:
    """The value at ``path`` (``ts_ms`` or ``source.lsn``); ``None`` when absent."""
    head, _, tail = path.partition(".")
    if not tail:
        return event.get(path)
    block = event.get(head)
    return block.get(tail) if isinstance(block, dict) else None


def _iso_from_micros(micros: int) -> str | None:
    try:
        return (_EPOCH + timedelta(microseconds=micros)).isoformat()
    except OverflowError:
        return None  # past year 9999: the line rule refuses what is left


def _unscaled(text: Any) -> int | None:
    """The integer whose big-endian two's-complement bytes ``text`` holds in base64 (Kafka
    Connect's Decimal), or ``None``. Only the one text Java's encoder writes for those bytes is
    read: no other alphabet, padding or stray bits."""
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw or len(raw) > MAX_DECIMAL_BYTES or base64.b64encode(raw).decode("ascii") != text:
        return None
    return int.from_bytes(raw, "big", signed=True)


def _decimal(value: Any, handling: str, scale: int) -> Any:
    """A decimal as the connector's ``decimal.handling.mode`` sends it; ``UNREADABLE`` when it
    came another way (the line rules then check it against decimal(p,s))."""
    if handling == "string":
        return value if isinstance(value, str) else UNREADABLE
    if handling == "double":
        return value if isinstance(value, (int, Decimal)) and not isinstance(value, bool) else UNREADABLE
    if isinstance(value, dict) and set(value) == {"scale", "value"}:  # VariableScaleDecimal: its own scale
        scale, value = value["scale"], value["value"]
        if not _is_integer(scale) or not -MAX_SCALE <= scale <= MAX_SCALE:  # an INT32; no decimal(38,s) needs more
            return UNREADABLE
    unscaled = _unscaled(value)
    if unscaled is None:
        return UNREADABLE
    return Decimal((int(unscaled < 0), tuple(int(d) for d in str(abs(unscaled))), -scale))  # exact: no context rounding


def _value(column: Column, value: Any, spec: Input, scale: int) -> Any:
    """Debezium's encodings as the line rules read them: a date's days and a timestamp's integer as
    ISO text, a decimal decoded (``_decimal``); anything else as given. The placeholder of a value
    the connector could not read (an unchanged TOASTed column under Postgres's default REPLICA
    IDENTITY) is no value: refused, never stored over the real one."""
    if value is None:
        return None
    if value == UNAVAILABLE_PLACEHOLDER:
        return UNREADABLE
    kind = column.type.kind
    if kind == "decimal":
        return _decimal(value, spec.decimal_handling, scale)
    if _is_integer(value):
        if kind == "date":
            try:
                return (_EPOCH_DAY + timedelta(days=value)).isoformat()
            except OverflowError:
                return value
        if kind == "timestamp":  # floor division: the digits past the microsecond cut, as in ISO text
            return _iso_from_micros(value * _MICROS_PER_SECOND // TIMESTAMP_UNITS[spec.timestamp_unit]) or value
    return value


def _declared_scales(schema: Any, block: str) -> dict[str, int]:
    """The scale each Decimal field of ``block`` (``after``/``before``) declares in the envelope's
    schema (``schemas.enable=true``): the source column's own, which the base64 bytes are in."""
    scales = {}
    fields = schema.get("fields") if isinstance(schema, dict) else None
    row = next((f for f in _list(fields) if isinstance(f, dict) and f.get("field") == block), None)
    for f in _list(row.get("fields") if row else None):
        if isinstance(f, dict) and f.get("name") == _KAFKA_DECIMAL and isinstance(f.get("field"), str):
            parameters = f.get("parameters")
            scale = parameters.get("scale") if isinstance(parameters, dict) else None
            if isinstance(scale, str) and _SCALE_TEXT.fullmatch(scale):
                scales[f["field"]] = int(scale)
    return scales


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _position_parts(value: Any) -> list[int] | None:
    """One log position field as non-negative integers, most significant first, or ``None``."""
    if _is_integer(value):
        return [value] if value >= 0 else None
    if not isinstance(value, str):
        return None
    if _NUMBER_TEXT.fullmatch(value):
        return [int(value)]
    if _HEX_GROUPS.fullmatch(value):
        return [int(group, 16) for group in value.split(":")]
    lsn = _PG_LSN.fullmatch(value)
    if lsn:
        return [int(lsn[1], 16) << 32 | int(lsn[2], 16)]
    log_file = _LOG_FILE.fullmatch(value)
    if log_file and _NAME_CHARACTER.search(log_file[1]):
        return [int(log_file[2])]
    return None


def log_position(event: dict, op: str, spec: Input) -> Any:
    """The event's position in the source's log as one non-negative 63-bit integer (the input's
    ``sequence`` fields' parts, packed in order, each in its ``sequence_bits``), or
    ``UNREADABLE``. Packing keeps the order: the first part decides, the next breaks a tie."""
    parts: list[int] = []
    for path in spec.sequence:
        value = _at(event, path)
        if value is None:
            return 0 if op == SNAPSHOT_OP else UNREADABLE
        read = _position_parts(value)
        if read is None:
            return UNREADABLE
        parts += read
    if len(parts) != len(spec.sequence_bits):
        return UNREADABLE
    position = 0
    for part, width in zip(parts, spec.sequence_bits):
        if part >> width:
            return UNREADABLE  # too wide for its bits: refused, never wrapped
        position = position << width | part
    return position


def _event_time(value: Any) -> Any:
    """Milliseconds since 1970 (Debezium's ``ts_ms``) as ISO text; text as given."""
    if _is_integer(value):
        return _iso_from_micros(value * 1000) or value
    return value


def as_line(event: dict, source_id: str, entity: Entity, spec: Input) -> tuple[dict, dict[str, str]]:
    """The change event as the project's own line (``docs/ingest.md``), or ``Reject``; and where
    each field of the line came from in the event (a reject names the event's field)."""
    schema, prefix = None, ""
    if "payload" in event and "schema" in event:  # the JSON converter with schemas.enable=true
        schema, event, prefix = event["schema"], event["payload"], "payload."
        if not isinstance(event, dict):
            raise Reject("bad_envelope", "payload")
    op = event.get("op")
    if not isinstance(op, str):
        raise Reject("bad_envelope", f"{prefix}op")
    if op in UPSERT_OPS:
        block, kind = "after", "upsert"
    elif op in DELETE_OPS:
        block, kind = "before", "delete"
    else:
        raise Reject("bad_op", f"{prefix}op")
    row = event.get(block)
    if not isinstance(row, dict):
        raise Reject("bad_envelope", f"{prefix}{block}")
    scales = _declared_scales(schema, block)
    source = event.get("source")
    connector = source.get("connector") if isinstance(source, dict) else None
    if (isinstance(connector, str) and connector in CONNECTOR_SEQUENCES and spec.sequence == CONNECTOR_SEQUENCES[spec.connector][0]
            and CONNECTOR_SEQUENCES[connector] != CONNECTOR_SEQUENCES[spec.connector]):
        raise Reject("bad_envelope")  # another connector's event, its position read by the declared one's rule

    def value(c: Column) -> Any:
        name = spec.field_of(c.name)
        return _value(c, row.get(name), spec, scales.get(name, c.type.scale))

    line = {"source_id": source_id, "op": kind, "event_ts": _event_time(_at(event, spec.event_time)),
            "source_seq": log_position(event, op, spec)}
    for c in entity.key:
        line[c.name] = value(c)
    line["attributes"] = {c.name: value(c) for c in entity.attributes}
    where = {"event_ts": prefix + spec.event_time, "source_seq": ",".join(prefix + p for p in spec.sequence), "op": f"{prefix}op",
             **{c.name: f"{prefix}{block}.{spec.field_of(c.name)}" for c in entity.key},
             **{f"attributes.{c.name}": f"{prefix}{block}.{spec.field_of(c.name)}" for c in entity.attributes}}
    return line, where


def check_change(value: bytes | None, source_id: str, max_record_bytes: int, sources: tuple[str, ...],
                 entity: Entity, spec: Input) -> Update | None:
    """A change event's update; ``None`` for a tombstone; ``Reject`` otherwise."""
    if value is None:
        return None
    event = parse_object(value, max_record_bytes)
    try:
        line, where = as_line(event, source_id, entity, spec)
    except Reject:
        raise
    except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError, RecursionError):
        # An envelope shaped unlike any connector's (a schema of the wrong types, numbers past any
        # bound) must not stop every run that reads it again: it is a bad event, quarantined.
        raise Reject("bad_envelope") from None
    try:
        return check_record(line, source_id, sources, entity)
    except Reject as exc:
        exc.field = where.get(exc.field, exc.field) if exc.field else None  # the event's field, not the line's
        raise


def check_input(value: bytes | None, source_id: str, max_record_bytes: int, sources: tuple[str, ...],
                entity: Entity, spec: Input) -> Update | None:
    """One line or record of a source, in its input's format (``None``: a tombstone)."""
    if spec.format == "debezium":
        return check_change(value, source_id, max_record_bytes, sources, entity, spec)
    if value is None:
        return None
    return check_record(parse_object(value, max_record_bytes), source_id, sources, entity)
