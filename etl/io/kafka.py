"""Kafka, as a source: the driver asks the broker for offsets (through the Kafka client that
Spark's Kafka source brings, so one set of client properties serves both), the executors read
recorded offset ranges with Spark's Kafka source (docs/sources.md).

Client properties are the site's (``kafka_bootstrap_servers`` and ``kafka_properties_file``); the
topics are the model's. Nothing here decides a range: ``etl.core.offsets`` does.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import DataFrame

from etl.core.config import ConfigError, EtlConfig
from etl.core.interval import Interval
from etl.core.model import Input
from etl.core.offsets import PREFIX, OffsetRange, Recorded, plan
from etl.io.landing import Skipped
from etl.io.tables import read

log = logging.getLogger(__name__)


class KafkaUnavailable(RuntimeError):
    """The broker did not answer, or refused the client."""


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's ``key=value`` (or ``key: value``) lines; ``#`` and ``!`` comments."""
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}: {raw!r} is not key=value")
        out[line[:sep].strip()] = line[sep + 1:].strip()
    return out


def client_properties(cfg: EtlConfig) -> dict[str, str]:
    """The Kafka client's properties: the file's, then ``kafka_bootstrap_servers``."""
    props: dict[str, str] = {}
    if cfg.kafka_properties_file:
        path = Path(cfg.kafka_properties_file).expanduser()
        if not path.is_file():
            raise ConfigError(f"setting 'kafka_properties_file' = {cfg.kafka_properties_file!r}: no such file")
        props.update(read_properties(path))
    if cfg.kafka_bootstrap_servers:
        props["bootstrap.servers"] = cfg.kafka_bootstrap_servers
    if not props.get("bootstrap.servers"):
        raise ConfigError(f"entity {cfg.entity_model.name!r} reads Kafka topics: set 'kafka_bootstrap_servers' "
                          f"(ETL_KAFKA_BOOTSTRAP_SERVERS) or bootstrap.servers in 'kafka_properties_file'")
    return props


class Broker:
    """Offsets of a cluster's partitions, asked by a consumer in the driver's JVM."""

    def __init__(self, spark, props: dict[str, str]) -> None:
        self.jvm = spark.sparkContext._jvm
        p = self.jvm.java.util.Properties()
        for k, v in {**props, "allow.auto.create.topics": "false", "enable.auto.commit": "false",
                     "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
                     "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer"}.items():
            p.put(k, v)
        p.putIfAbsent("default.api.timeout.ms", "30000")
        self.servers = props.get("bootstrap.servers")
        try:
            self.consumer = self.jvm.org.apache.kafka.clients.consumer.KafkaConsumer(p)
        except Exception as exc:  # py4j wraps the client's own message
            raise KafkaUnavailable(f"cannot create a Kafka client for {self.servers}: {exc}") from None

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc) -> None:
        self.consumer.close()

    def _call(self, what: str, fn):
        try:
            return fn()
        except Exception as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise KafkaUnavailable(f"Kafka at {self.servers}: {what} failed: {text}") from None

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; none when it does not exist (yet)."""
        infos = self._call(f"listing topic {topic!r}", lambda: self.consumer.listTopics())
        if not infos.containsKey(topic):
            return []
        return sorted(int(i.partition()) for i in infos.get(topic))

    def _tps(self, topic: str, partitions: list[int]):
        return {p: self.jvm.org.apache.kafka.common.TopicPartition(topic, p) for p in partitions}

    def offsets_at(self, topic: str, partitions: list[int], t: datetime) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is at or after ``t``; ``None``: none yet."""
        tps = self._tps(topic, partitions)
        query = self.jvm.java.util.HashMap()
        for tp in tps.values():
            query.put(tp, self.jvm.java.lang.Long(int(t.timestamp() * 1000)))
        found = self._call(f"offsetsForTimes of {topic!r}", lambda: self.consumer.offsetsForTimes(query))
        out = {}
        for p, tp in tps.items():
            at = found.get(tp)
            out[p] = None if at is None else int(at.offset())
        return out

    def end_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        tps = self._tps(topic, partitions)
        wanted = self.jvm.java.util.ArrayList()
        for tp in tps.values():
            wanted.add(tp)
        ends = self._call(f"endOffsets of {topic!r}", lambda: self.consumer.endOffsets(wanted))
        return {p: int(ends.get(tp)) for p, tp in tps.items()}


def read_ranges(spark, props: dict[str, str], ranges: list[OffsetRange]) -> DataFrame | None:
    """The records of the ranges with Spark's Kafka source (``None`` when all are empty). A range
    the broker no longer holds whole (retention, compaction) fails the read: its records are lost."""
    nonempty = [r for r in ranges if r.records > 0]
    if not nonempty:
        return None
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in nonempty:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    reader = (spark.read.format("kafka")
              .option("assign", json.dumps(assign))
              .option("startingOffsets", json.dumps(starting))
              .option("endingOffsets", json.dumps(ending))
              .option("failOnDataLoss", "true"))
    for key, value in props.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load().select("topic", "partition", "offset", "timestamp", "value")


@dataclass
class KafkaPlan:
    """The ranges a piece ``[a, b)`` of a run reads: recorded ones reused (``recorded``: their
    fingerprints, checked on reading), new ones planned."""

    ranges: list[tuple[Input, OffsetRange]] = field(default_factory=list)
    recorded: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (bytes, sha256)
    skipped: list[Skipped] = field(default_factory=list)


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def plan_ranges(spark, cfg: EtlConfig, interval: Interval, a: datetime, b: datetime) -> KafkaPlan:
    """Per partition of the entity's topics, the range of ``[a, b)``: the run's own recorded ranges
    of those minutes again, else a new one between its neighbours (``etl.core.offsets.plan``)."""
    out = KafkaPlan()
    entity = cfg.entity_model
    if not entity.kafka_inputs:
        return out
    rows = (read(spark, cfg, "landed_files").where(f"startswith(file_name, '{PREFIX}')")
            .select("run_key", "arrival_minute", "file_name", "bytes", "sha256").collect())
    own, others = [], []
    for r in rows:
        minute, rng = _utc(r.arrival_minute), OffsetRange.parse(r.file_name)
        if r.run_key == interval.run_key and a <= minute < b:
            own.append(rng)
            out.recorded[rng.name] = (r.bytes, r.sha256)
        else:
            others.append(Recorded(minute, rng))
    with Broker(spark, client_properties(cfg)) as broker:
        for spec in entity.kafka_inputs:
            for topic in spec.topics:
                reused = [r for r in own if r.topic == topic]
                out.ranges += [(spec, r) for r in reused]
                partitions = [p for p in broker.partitions(topic) if p not in {r.partition for r in reused}]
                if not partitions:
                    if not reused:
                        out.skipped.append(Skipped(f"{PREFIX}{topic}", "topic does not exist (yet): nothing read"))
                    continue
                at_a = broker.offsets_at(topic, partitions, a)
                at_b = broker.offsets_at(topic, partitions, b)
                ends = broker.end_offsets(topic, partitions)
                for p in partitions:
                    out.ranges.append((spec, plan(topic, p, a, others, at_a[p], at_b[p], ends[p])))
    return out
