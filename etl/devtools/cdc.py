"""The project's own JSON lines as Debezium change events on Kafka topics: how the tests and the
demo produce a CDC stream carrying exactly the changes a landing zone holds (docs/sources.md).

Each valid line becomes the event a Debezium connector would write for it (the JSON converter,
``schemas.enable=false``, ``decimal.handling.mode=string``): ``op`` ``c`` for a key's first change
from its source (``r`` while ``snapshot`` says so), ``u`` after, ``d`` for a delete with the row in
``before`` followed by a tombstone; values in Debezium's encodings (a date as days since 1970, a
timestamp in the input's ``timestamp_unit``); ``source.ts_ms`` the change time and ``source.lsn``
the line's ``source_seq``. The record's key is the row's key as JSON and its timestamp the line's
arrival time, in milliseconds. Lines that are not valid are left out (they are the landing
zone's, not the source's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Iterable, Iterator

from etl.core.model import TIMESTAMP_UNITS, Column, Entity, Input
from etl.core.records import Reject, check_line, parse_timestamp

DEBEZIUM_VERSION = "2.7.3.Final"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class KafkaRecord:
    topic: str
    key: bytes | None
    value: bytes | None  # None: a tombstone
    timestamp_ms: int


def millis(ts: datetime) -> int:
    """Milliseconds since 1970, exactly (no float on the way), the sub-millisecond part dropped."""
    return (ts - _EPOCH) // timedelta(milliseconds=1)


def _encoded(column: Column, value, spec: Input):
    if value is None:
        return None
    kind = column.type.kind
    if kind == "date":
        return (date.fromisoformat(value) - date(1970, 1, 1)).days
    if kind == "timestamp":
        us = int(parse_timestamp(value).timestamp() * 1_000_000) if isinstance(value, str) else value
        return int(us / TIMESTAMP_UNITS[spec.timestamp_unit])
    if kind == "decimal":
        return str(value)
    return value


def change_event(line: dict, entity: Entity, spec: Input, op: str, snapshot: bool = False) -> dict:
    """The Debezium envelope of one valid line (``op``: ``c``, ``u``, ``r`` or ``d``)."""
    attributes = line.get("attributes") or {}
    row = {spec.field_of(c.name): _encoded(c, line.get(c.name), spec) for c in entity.key}
    row.update({spec.field_of(c.name): _encoded(c, attributes.get(c.name), spec) for c in entity.attributes})
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


def records_of(lines: Iterable[tuple[str, bytes]], entity: Entity, snapshot_lines: int = 0) -> Iterator[KafkaRecord]:
    """Kafka records for ``(source, line)`` pairs in arrival order, to the topics of the entity's
    Kafka inputs (the first topic of each source). A key's first change is a snapshot read while
    it is among the first ``snapshot_lines`` of its source's lines."""
    seen: set[tuple[str, str]] = set()
    counts: dict[str, int] = {}
    for source, raw in lines:
        spec = entity.input_of(source)
        if not spec.topics:
            continue
        try:
            update = check_line(raw, source, 1 << 20, (), entity)
        except Reject:
            continue
        line = json.loads(raw)
        counts[source] = counts.get(source, 0) + 1
        first = (source, update.natural_key) not in seen
        seen.add((source, update.natural_key))
        if update.op == "delete":
            op = "d"
        elif first:
            op = "r" if counts[source] <= snapshot_lines else "c"
        else:
            op = "u"
        event = change_event(line, entity, spec, op, snapshot=op == "r")
        key = _json({spec.field_of(c.name): _encoded(c, line.get(c.name), spec) for c in entity.key})
        at = millis(update.arrival_ts) if update.arrival_ts else event["ts_ms"]
        yield KafkaRecord(spec.topics[0], key, _json(event), at)
        if op == "d":
            yield KafkaRecord(spec.topics[0], key, None, at)


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
    jvm = spark.sparkContext._jvm
    p = jvm.java.util.Properties()
    for k, v in {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": "true",
                 "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
                 "value.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
                 **(properties or {})}.items():
        p.put(k, v)
    producer = jvm.org.apache.kafka.clients.producer.KafkaProducer(p)
    n = 0
    try:
        for r in records:
            producer.send(jvm.org.apache.kafka.clients.producer.ProducerRecord(
                r.topic, None, jvm.java.lang.Long(r.timestamp_ms),
                None if r.key is None else bytearray(r.key), None if r.value is None else bytearray(r.value)))
            n += 1
        producer.flush()
    finally:
        producer.close()
    return n


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
