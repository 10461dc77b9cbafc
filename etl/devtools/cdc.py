"""The project's own JSON lines as Debezium change events on Kafka topics: how the tests and the
demo produce a CDC stream carrying exactly the changes a landing zone holds (docs/sources.md).

Each valid line becomes the event Debezium's Postgres connector would write for it (the JSON
converter, ``schemas.enable=false``): ``op`` ``c`` for a key's first change from its source (``r``
while ``snapshot`` says so), ``u`` after, ``d`` for a delete followed by a tombstone. As a
connector writes it, a delete's ``before`` is the row as it was: the key's row as last produced
(``REPLICA IDENTITY FULL``, the default here), or only its key (``DEFAULT``); the delete line's own
attributes are not the source's. Values are in Debezium's encodings (a date as days since 1970, a
timestamp in the input's ``timestamp_unit``, a decimal as its ``decimal_handling`` says);
``source.ts_ms`` is the change time and ``source.lsn`` the line's ``source_seq`` (a delete's too:
it is a new position in the log). The record's key is the row's key as JSON and its timestamp the
line's arrival time, in milliseconds. Lines that are not valid are left out (they are the landing
zone's, not the source's).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Iterable, Iterator

from etl.core.model import TIMESTAMP_UNITS, Column, Entity, Input
from etl.core.records import Reject, check_line, parse_timestamp
from etl.devtools import kafka_broker

DEBEZIUM_VERSION = "2.7.3.Final"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Postgres's REPLICA IDENTITY: what a delete's ``before`` holds, the whole row or only the key.
REPLICA_IDENTITIES = ("full", "default")


@dataclass(frozen=True)
class KafkaRecord:
    topic: str
    key: bytes | None
    value: bytes | None  # None: a tombstone
    timestamp_ms: int


def millis(ts: datetime) -> int:
    """Milliseconds since 1970, exactly (no float on the way), the sub-millisecond part dropped."""
    return (ts - _EPOCH) // timedelta(milliseconds=1)


def precise(value: Decimal, scale: int) -> str:
    """Kafka Connect's Decimal as the JSON converter writes it (``decimal.handling.mode=precise``):
    base64 of the unscaled value's minimal big-endian two's-complement bytes (Java's
    ``BigInteger.toByteArray``)."""
    sign, digits, exponent = value.as_tuple()
    magnitude, shift = int("".join(map(str, digits)) or "0"), exponent + scale
    # Exact at its scale (the line rules checked), so a negative shift only drops trailing zeros.
    unscaled = magnitude * 10**shift if shift >= 0 else magnitude // 10**-shift
    unscaled = -unscaled if sign else unscaled
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")


def _encoded(column: Column, value, spec: Input):
    if value is None:
        return None
    kind = column.type.kind
    if kind == "date":
        return (date.fromisoformat(value) - date(1970, 1, 1)).days
    if kind == "timestamp":
        micros = (parse_timestamp(value) - _EPOCH) // timedelta(microseconds=1) if isinstance(value, str) else value
        return micros * TIMESTAMP_UNITS[spec.timestamp_unit] // 1_000_000  # exact; ms: the sub-millisecond part dropped
    if kind == "decimal":
        if spec.decimal_handling == "precise":
            return precise(Decimal(str(value)), column.type.scale)
        return float(Decimal(str(value))) if spec.decimal_handling == "double" else str(value)
    return value


def _row(line: dict, entity: Entity, spec: Input, key_only: bool = False) -> dict:
    """A line's row as the connector writes ``after``/``before``: its fields through ``fields``."""
    row = {spec.field_of(c.name): _encoded(c, line.get(c.name), spec) for c in entity.key}
    if not key_only:
        attributes = line.get("attributes") or {}
        row.update({spec.field_of(c.name): _encoded(c, attributes.get(c.name), spec) for c in entity.attributes})
    return row


def change_event(line: dict, entity: Entity, spec: Input, op: str, snapshot: bool = False,
                 deleted: dict | None = None, replica_identity: str = "full") -> dict:
    """The Debezium envelope of one valid line (``op``: ``c``, ``u``, ``r`` or ``d``). A delete's
    ``before`` is ``deleted``'s row (the line the key's row was last produced from; default: the
    delete line), whole or, under ``replica_identity="default"``, only its key."""
    if replica_identity not in REPLICA_IDENTITIES:
        raise ValueError(f"replica_identity {replica_identity!r} must be one of {', '.join(REPLICA_IDENTITIES)}")
    if op == "d":
        row = _row(deleted or line, entity, spec, key_only=replica_identity == "default")
    else:
        row = _row(line, entity, spec)
    source = {
        "version": DEBEZIUM_VERSION, "connector": "postgresql", "name": line["source_id"],
        "ts_ms": millis(parse_timestamp(line["event_ts"])), "snapshot": "true" if snapshot else "false",
        "db": line["source_id"], "sequence": None, "schema": "public", "table": entity.name,
        "txId": None, "lsn": int(line["source_seq"]), "xmin": None,
    }
    arrival = line.get("arrival_ts")
    return {
        "before": row if op == "d" else None,
        "after": None if op == "d" else row,
        "source": source,
        "op": op,
        "ts_ms": millis(parse_timestamp(arrival)) if arrival else source["ts_ms"],
        "transaction": None,
    }


def _json(value) -> bytes:
    return json.dumps(value, sort_keys=True, default=lambda v: str(v) if isinstance(v, Decimal) else v).encode()


def _changes(lines: Iterable[tuple[str, bytes]], entity: Entity, snapshot_lines: int = 0) -> Iterator[tuple]:
    """``(source, raw, spec, update, line, op, deleted)`` for each valid line of a Kafka input, in
    the given order. ``deleted``, for a delete, is the line the key's row was last produced from
    (the delete line itself when none was: the row predates the lines)."""
    seen: set[tuple[str, str]] = set()
    last_row: dict[tuple[str, str], dict] = {}
    counts: dict[str, int] = {}
    for source, raw in lines:
        spec = entity.input_of(source)
        if not spec.topics:
            continue
        try:
            update = check_line(raw, source, 1 << 20, (), entity)
        except Reject:
            continue
        line = json.loads(raw, parse_float=Decimal)
        key = (source, update.natural_key)
        counts[source] = counts.get(source, 0) + 1
        first = key not in seen
        seen.add(key)
        deleted = None
        if update.op == "delete":
            op, deleted = "d", last_row.get(key, line)
        else:
            op = ("r" if counts[source] <= snapshot_lines else "c") if first else "u"
            last_row[key] = line
        yield source, raw, spec, update, line, op, deleted


def records_of(lines: Iterable[tuple[str, bytes]], entity: Entity, snapshot_lines: int = 0,
               replica_identity: str = "full") -> Iterator[KafkaRecord]:
    """Kafka records for ``(source, line)`` pairs in arrival order, to the topics of the entity's
    Kafka inputs (the first topic of each source). A key's first change is a snapshot read while
    it is among the first ``snapshot_lines`` of its source's lines; a delete's ``before`` is the
    key's row as last produced (``replica_identity="default"``: only its key)."""
    for _, _, spec, update, line, op, deleted in _changes(lines, entity, snapshot_lines):
        event = change_event(line, entity, spec, op, snapshot=op == "r", deleted=deleted, replica_identity=replica_identity)
        key = _json(_row(line, entity, spec, key_only=True))
        at = millis(update.arrival_ts) if update.arrival_ts else event["ts_ms"]
        yield KafkaRecord(spec.topics[0], key, _json(event), at)
        if op == "d":
            yield KafkaRecord(spec.topics[0], key, None, at)


def deletes_as_produced(lines: Iterable[tuple[str, bytes]], entity: Entity) -> dict[tuple[str, bytes], bytes]:
    """Each delete line of a Kafka input -> the same line with the attributes its event's
    ``before`` carries (``records_of`` under REPLICA IDENTITY FULL): the landing-file twin of the
    produced events, for a test that compares the two ways in."""
    out = {}
    for source, raw, _, _, line, op, deleted in _changes(lines, entity):
        if op == "d":
            out[(source, raw)] = _json(dict(line, attributes=deleted.get("attributes") or {}))
    return out


def landing_lines(landing_root: Path) -> list[tuple[str, bytes]]:
    """Every line of a landing zone as ``(source, line)``, in arrival order (the line's
    ``arrival_ts``; a line without one keeps its file's place)."""
    out = []
    for path in sorted(Path(landing_root).rglob("updates-*.jsonl")):
        source = next(p.split("=", 1)[1] for p in path.parts if p.startswith("source_id="))
        for raw in path.read_bytes().splitlines():
            if raw.strip():
                out.append((source, raw))

    def arrival(item):
        try:
            return parse_timestamp(json.loads(item[1]).get("arrival_ts"))
        except Exception:
            return datetime.min.replace(tzinfo=timezone.utc)

    return sorted(out, key=arrival)


def produce(spark, bootstrap: str, records: Iterable[KafkaRecord], properties: dict[str, str] | None = None) -> int:
    """Send the records with a Kafka producer in Spark's JVM (the client Spark's Kafka source
    brings), each with its own timestamp; partitioned by key, as Debezium's are."""
    return kafka_broker.send(spark, bootstrap, ((r.topic, None, r.timestamp_ms, r.key, r.value) for r in records), properties)


def create_topics(spark, bootstrap: str, topics: Iterable[str], partitions: int = 2) -> None:
    """Create the topics (``partitions`` each) if they are not there yet."""
    jvm = spark.sparkContext._jvm
    p = jvm.java.util.Properties()
    p.put("bootstrap.servers", bootstrap)
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(p)
    try:
        existing = set(admin.listTopics().names().get())
        wanted = jvm.java.util.ArrayList()
        for t in topics:
            if t not in existing:
                wanted.add(jvm.org.apache.kafka.clients.admin.NewTopic(t, partitions, jvm.java.lang.Short.valueOf("1")))
        if wanted.size():
            admin.createTopics(wanted).all().get()
    finally:
        admin.close()
