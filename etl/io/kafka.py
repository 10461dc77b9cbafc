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
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core import properties
from etl.core.config import ConfigError, EtlConfig
from etl.core.interval import Interval
from etl.core.model import Input
from etl.core.offsets import (
    ABSENT_PATTERN,
    PREFIX,
    RANGE_PATTERN,
    Neighbours,
    OffsetRange,
    OffsetsWentBack,
    PartitionNow,
    Recorded,
    absent_name,
    carried_forward,
    lost_name,
    parse_lost,
    parse_piece_end,
    piece_end_name,
    plan_topic,
    source_read,
    with_rangeless_topics,
)
from etl.io.landing import Skipped
from etl.io.runs import LandingChanged
from etl.io.tables import open_tables, read

log = logging.getLogger(__name__)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# Client settings Spark's Kafka source refuses (it manages them itself); the ETL's reader could not run with them.
SPARK_REFUSES = frozenset({"auto.offset.reset", "key.deserializer", "value.deserializer", "enable.auto.commit",
                           "interceptor.classes"})


class KafkaUnavailable(RuntimeError):
    """The broker did not answer, or refused the client."""


def read_properties(path: Path) -> dict[str, str]:
    """The client properties of a Java properties file, read (as UTF-8) as Java's
    ``Properties.load`` reads it: ``etl.core.properties``. Its errors (a ``ConfigError``) name
    the file and line, never a value: the file holds passwords and the task log is widely read."""
    return properties.read(path)


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
    refused = sorted(k for k in props if k in SPARK_REFUSES)
    if refused:
        raise ConfigError(f"setting 'kafka_properties_file' = {cfg.kafka_properties_file!r}: {', '.join(refused)} "
                          f"cannot be set: the ETL reads recorded offsets itself and Spark's Kafka source refuses them")
    if not props.get("bootstrap.servers"):
        raise ConfigError(f"entity {cfg.entity_model.name!r} reads Kafka topics: set 'kafka_bootstrap_servers' "
                          f"(ETL_KAFKA_BOOTSTRAP_SERVERS) or bootstrap.servers in 'kafka_properties_file'")
    return props


# The client's exceptions for credentials or ACLs the cluster refuses: waiting does not mend them.
_ACCESS_REFUSED = ("AuthenticationException", "AuthorizationException", "SslAuthenticationException")


def refused_access(cause: str) -> bool:
    """Whether a client's error says the cluster refused these credentials or this client's rights
    (an operator's fix, exit 2) rather than that it did not answer (retry later, exit 5)."""
    head = cause.split(":", 1)[0]
    return head.startswith("org.apache.kafka.") and head.endswith(_ACCESS_REFUSED)


def client_cause(exc: BaseException) -> str:
    """The Kafka client's own words for a failed call (its Java exception and causes), not py4j's
    "An error occurred while calling o153.listTopics"."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        text = str(exc).strip()
        return text.splitlines()[0][:300] if text else type(exc).__name__
    causes = []
    while java is not None and len(causes) < 4:
        causes.append(str(java.toString()))
        java = java.getCause()
    return "; caused by ".join(dict.fromkeys(causes))[:500]


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
        self.servers, self.props = props.get("bootstrap.servers"), props
        try:
            self.consumer = self.jvm.org.apache.kafka.clients.consumer.KafkaConsumer(p)
        except Exception as exc:
            cause = properties.redact(client_cause(exc), props)  # a JAAS parse error may quote the config
            if "ConfigException" in cause and "No resolvable bootstrap urls" not in cause:  # DNS: a broker restarting
                raise ConfigError(f"the Kafka client refused its settings ('kafka_bootstrap_servers', "
                                  f"'kafka_properties_file'): {cause}") from None
            raise KafkaUnavailable(f"cannot create a Kafka client for {self.servers}: {cause}") from None

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc) -> None:
        self.consumer.close()

    def _call(self, what: str, fn):
        try:
            return fn()
        except Exception as exc:
            cause = properties.redact(client_cause(exc), self.props)
            if any(refused_access(c) for c in cause.split("; caused by ")):
                raise ConfigError(f"Kafka at {self.servers} refused the client: {what} failed: {cause}; fix its "
                                  f"credentials or ACLs ('kafka_properties_file')") from None
            raise KafkaUnavailable(f"Kafka at {self.servers}: {what} failed: {cause}") from None

    def topics(self) -> dict[str, list[int]]:
        """Every topic the client may see, with its partitions."""
        infos = self._call("listing topics", lambda: self.consumer.listTopics())
        return {str(t): sorted(int(i.partition()) for i in infos.get(t)) for t in infos.keySet()}

    def _tps(self, topic: str, partitions: list[int]):
        return {p: self.jvm.org.apache.kafka.common.TopicPartition(topic, p) for p in partitions}

    def offsets_at(self, topic: str, partitions: list[int], t: datetime) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is at or after ``t``; ``None``: none yet."""
        tps = self._tps(topic, partitions)
        query = self.jvm.java.util.HashMap()
        for tp in tps.values():
            query.put(tp, self.jvm.java.lang.Long((_utc(t) - _EPOCH) // timedelta(milliseconds=1)))
        found = self._call(f"offsetsForTimes of {topic!r}", lambda: self.consumer.offsetsForTimes(query))
        out = {}
        for p, tp in tps.items():
            at = found.get(tp)
            out[p] = None if at is None else int(at.offset())
        return out

    def _offsets(self, what: str, topic: str, partitions: list[int]) -> dict[int, int]:
        tps = self._tps(topic, partitions)
        wanted = self.jvm.java.util.ArrayList()
        for tp in tps.values():
            wanted.add(tp)
        method = getattr(self.consumer, what)
        found = self._call(f"{what} of {topic!r}", lambda: method(wanted))
        return {p: int(found.get(tp)) for p, tp in tps.items()}

    def end_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        return self._offsets("endOffsets", topic, partitions)

    def beginning_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """Per partition its log start offset: the records before it were deleted."""
        return self._offsets("beginningOffsets", topic, partitions)


def read_ranges(spark, props: dict[str, str], ranges: list[OffsetRange]) -> DataFrame | None:
    """The records of the ranges with Spark's Kafka source (``None`` when all are empty): per
    partition from its first range's start to its last range's end (a run's pieces chain, so that
    is their union; a caller keeps only the offsets its ranges hold). A range the broker no longer
    holds whole (retention, compaction) fails the read: its records are lost."""
    nonempty = [r for r in ranges if r.records > 0]
    if not nonempty:
        return None
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in nonempty:
        partitions = assign.setdefault(r.topic, [])
        if r.partition not in partitions:
            partitions.append(r.partition)
        key = str(r.partition)
        first, last = starting.setdefault(r.topic, {}), ending.setdefault(r.topic, {})
        first[key], last[key] = min(r.start, first.get(key, r.start)), max(r.end, last.get(key, r.end))
    reader = (spark.read.format("kafka")
              .option("assign", json.dumps(assign))
              .option("startingOffsets", json.dumps(starting))
              .option("endingOffsets", json.dumps(ending))
              .option("failOnDataLoss", "true")
              # A broker that stops answering fails the read within the client's own API timeout,
              # not Spark's default two minutes.
              .option("kafkaConsumer.pollTimeoutMs", props.get("default.api.timeout.ms", "30000")))
    for key, value in props.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load().select("topic", "partition", "offset", "timestamp", "value")


@dataclass(frozen=True)
class PlannedRange:
    """A range and the piece ``[start, end)`` that decided it: its records' arrivals are kept in
    that piece's own pieces whichever run reads it again (a whole run re-reads each of the always-on
    loader's pieces as that piece read it)."""

    input: Input
    range: OffsetRange
    start: datetime
    end: datetime


@dataclass
class KafkaPlan:
    """What a piece ``[a, b)`` of a run reads: per topic its ranges (recorded ones reused, with
    their fingerprints in ``recorded``, checked on reading), the topics recorded as absent, and
    what it leaves unread (``skipped``: offsets deleted before any run read them, partitions that
    appeared after the piece was decided)."""

    ranges: list[PlannedRange] = field(default_factory=list)
    # Recorded beside the ranges, each an empty landed_files row (input, name, piece start): topics
    # that did not exist, offsets found deleted unread, where the piece ended.
    markers: list[tuple[Input, str, datetime]] = field(default_factory=list)
    recorded: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (bytes, sha256)
    skipped: list[Skipped] = field(default_factory=list)
    lost_records: int = 0  # offsets the broker deleted before any range read them


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def check_broker(spark, cfg: EtlConfig) -> None:
    """The entity's Kafka settings and its cluster, checked before a run writes anything:
    ``ConfigError`` for the settings, ``KafkaUnavailable`` (with the client's own cause) when
    the brokers do not answer."""
    if not cfg.entity_model.kafka_inputs:
        return
    with Broker(spark, client_properties(cfg)) as broker:
        broker.topics()


class KnownRanges:
    """What ``landed_files`` holds of Kafka, as planning the always-on loader's next piece reads
    it (``recorded_ranges``' neighbours), carried from its last piece with the rows that piece
    recorded (``etl.core.offsets.carried_forward``), so that a piece's ingest does not query the
    table (about 2 s and 6 Spark jobs a piece on 2 cores, a new Delta snapshot each time:
    ``benchmarks.kafka_planning``). It holds only while the table is at the version the loader's
    own write made: any other write of it (another interval's ingest, a discard, a compaction),
    one that fell between the read and the write, a piece written over, or a failed one, and the
    next piece reads the table again. A restart starts empty."""

    def __init__(self) -> None:
        self._others: list[Recorded] | None = None
        self._from: datetime | None = None  # valid for pieces starting here or later
        self._version: int | None = None
        self._read: tuple[int, datetime, list[Recorded]] | None = None  # the last plan's: version, a, neighbours
        self.carried = 0  # pieces planned from what was carried

    def forget(self) -> None:
        self._others = self._from = self._version = self._read = None

    def take(self, tables, a: datetime) -> list[Recorded] | None:
        """The neighbours of a piece starting at ``a``, handed over once (they are carried again
        only when the piece is written); ``None``: read the table."""
        if self._others is None or a < self._from or tables.version("landed_files") != self._version:
            self.forget()
            return None
        others, self._others = self._others, None
        self._read = (self._version, a, others)
        self.carried += 1
        return others

    def note_read(self, version: int, a: datetime, own: list, others: list[Recorded]) -> None:
        """The table was read at ``version`` for the piece at ``a``; a piece with recorded rows of
        its own (decided before) carries nothing."""
        self._others = None
        self._read = None if own else (version, a, others)

    def written(self, tables, plan: "KafkaPlan", b: datetime, kafka_rows: int) -> None:
        """The piece ending at ``b`` wrote ``kafka_rows`` rows of ``plan`` to ``landed_files``, in
        one commit (none when there was no row). A range whose records all went unseen (a
        transaction's markers only) writes no row: what is carried would then name a range the
        table does not, so nothing is. Never raises: the piece is committed already."""
        read, self._read = self._read, None
        if read is None:
            return
        version, a, others = read
        ours = version + int(kafka_rows > 0)  # the version the piece's own commit made
        try:
            if kafka_rows != len(plan.ranges) + len(plan.markers) or tables.version("landed_files") != ours:
                self.forget()  # a range without its row, or someone else wrote the table meanwhile
                return
            written = [Recorded(p.start, p.range.topic, p.range) for p in plan.ranges]
            written += [rec for _, name, at in plan.markers if (rec := Recorded.parse(at, name)) is not None]
            self._others, self._from, self._version = carried_forward(others, a, written, b), b, ours
        except Exception:  # noqa: BLE001 - the next piece reads the table
            log.warning("the Kafka ranges just recorded are not carried to the next piece", exc_info=True)
            self.forget()


def piece_neighbours(spark, cfg: EtlConfig, interval: Interval, a: datetime, b: datetime,
                     known: KnownRanges | None = None) -> tuple[list, list[Recorded]]:
    """``recorded_ranges`` of the piece ``[a, b)``; with ``known``, what it carries while that holds
    (else the table is read, and the read noted for the piece's write to carry on)."""
    if known is None:
        return recorded_ranges(spark, cfg, interval, a, b)
    tables = open_tables(spark, cfg)
    carried = known.take(tables, a)
    if carried is not None:
        return [], carried
    version = tables.version("landed_files")
    rows, others = recorded_ranges(spark, cfg, interval, a, b)
    known.note_read(version, a, rows, others)
    return rows, others


def plan_ranges(spark, cfg: EtlConfig, interval: Interval, a: datetime, b: datetime, decided: bool = False,
                known: KnownRanges | None = None) -> KafkaPlan:
    """Per topic of the entity's Kafka inputs, what the piece ``[a, b)`` of ``interval`` reads
    (``etl.core.offsets``): its recorded ranges again when it was ingested before (or when
    ``decided``: the run has loaded), else new ranges between their recorded neighbours.
    ``known``: the always-on loader's neighbours carried from its last piece (``KnownRanges``),
    for a piece nothing was written over."""
    out = KafkaPlan()
    entity = cfg.entity_model
    if not entity.kafka_inputs:
        return out
    rows, others = piece_neighbours(spark, cfg, interval, a, b, known)
    own, own_lost, own_ends = [], [], {}
    for r in rows:  # the piece's start as an instant: a collected timestamp would be in the driver's local time
        minute = _instant(r.minute_us)
        rec = Recorded.parse(minute, r.file_name)
        if rec is None:
            if parse_lost(r.file_name):
                own_lost.append((minute, r.file_name))
            elif parse_piece_end(r.file_name):
                own_ends[minute] = parse_piece_end(r.file_name)
            continue
        own.append(rec)
        out.recorded[rec.name] = (r.bytes, r.sha256)
    decided = decided or bool(own)
    starts = sorted({r.piece_start for r in own})

    def piece_end(start: datetime) -> datetime:  # as recorded; else where the next piece starts
        return own_ends.get(start) or next((t for t in starts if t > start), b)

    with Broker(spark, client_properties(cfg)) as broker:
        names = broker.topics()
        for spec in entity.kafka_inputs:
            read_before = source_read(spec.topics, others)
            for topic in spec.topics:
                mine = [r for r in own if r.topic == topic]
                partitions = None
                if topic in names:
                    ps = names[topic]
                    begins = broker.beginning_offsets(topic, ps)
                    ends = broker.end_offsets(topic, ps)
                    at_a = at_b = {}
                    if not decided:
                        at_a, at_b = broker.offsets_at(topic, ps, a), broker.offsets_at(topic, ps, b)
                    partitions = {p: PartitionNow(begins[p], ends[p], at_a.get(p), at_b.get(p)) for p in ps}
                try:
                    piece = plan_topic(topic, a, mine, others, partitions, read_before, decided)
                except OffsetsWentBack as exc:
                    raise LandingChanged(f"run {interval.run_key}: {exc}; the ranges recorded before no longer name "
                                         f"its records (docs/sources.md, 'Kafka topics')") from None
                if decided:  # each as its own piece read it (an empty range may repeat: one per piece)
                    _check_still_held(interval, piece.ranges, partitions or {})
                    out.ranges += [PlannedRange(spec, r.range, r.piece_start, piece_end(r.piece_start))
                                   for r in mine if r.range]
                else:
                    out.ranges += [PlannedRange(spec, r, a, b) for r in piece.ranges]
                if piece.absent:  # as each piece recorded it
                    for at in [r.piece_start for r in mine if r.range is None] or [a]:
                        out.markers.append((spec, absent_name(topic), at))
                    if not decided:
                        out.skipped.append(Skipped(absent_name(topic), "topic does not exist (yet): read from its "
                                                                       "beginning by the first piece after it does"))
                for s in piece.skips:
                    out.skipped.append(Skipped(s.name, f"{s.end - s.start} records {s.why}: lost"))
                    out.markers.append((spec, lost_name(s), a))
                    out.lost_records += s.end - s.start
                    log.warning("run %s: Kafka offsets %s: %d records %s: lost", interval.run_key, s.name, s.end - s.start, s.why)
                for at, name in own_lost if decided else ():  # said again by every rerun of the piece
                    topic_, p, first, last = parse_lost(name)
                    if topic_ == topic:
                        out.skipped.append(Skipped(name.removesuffix(":lost"), f"{last - first} records deleted by the "
                                                   f"broker (retention) before any run read them: lost"))
                        out.markers.append((spec, name, at))
                        out.lost_records += last - first
                for name in piece.left:
                    out.skipped.append(Skipped(name, f"not read by run {interval.run_key}, decided before it appeared: "
                                                     f"read by the next run"))
    if entity.kafka_inputs:  # where each piece ended, for a whole run read again later
        spec = entity.kafka_inputs[0]
        ends = own_ends.items() if decided else [(a, b)]
        out.markers += [(spec, piece_end_name(end), start) for start, end in ends]
    return out


def recorded_ranges(spark, cfg: EtlConfig, interval: Interval, a: datetime, b: datetime) -> tuple[list, list[Recorded]]:
    """What ``landed_files`` holds of Kafka for planning the piece ``[a, b)`` of ``interval``, in one
    Spark query: the piece's own rows whole (``minute_us``, ``file_name``, ``bytes``, ``sha256``),
    and of every other piece only ``etl.core.offsets.neighbours`` (per partition the range before
    and after, per topic with no range one record), aggregated on the executors: the rows of a
    stream's pieces grow with every piece, and collecting them all into the driver made each
    piece's ingest slower as the months went by (the scan still reads them)."""
    a_us, b_us = _micros(a), _micros(b)
    rows = (read(spark, cfg, "landed_files").where(F.startswith(F.col("file_name"), F.lit(PREFIX)))
            .select("run_key", F.unix_micros("arrival_minute").alias("minute_us"), "file_name", "bytes", "sha256"))
    mine = (F.col("run_key") == interval.run_key) & (F.col("minute_us") >= a_us) & (F.col("minute_us") < b_us)
    none = {c: F.lit(None).cast(t) for c, t in (("topic", "string"), ("partition", "int"), ("before_us", "long"),
                                                  ("before_end", "long"), ("after_us", "long"), ("after_start", "long"),
                                                  ("same_end", "long"))}
    own = rows.where(mine).select(F.lit(True).alias("own"), "minute_us", "file_name", "bytes", "sha256",
                                  *[v.alias(k) for k, v in none.items()])

    def part(i: int):
        return F.regexp_extract("file_name", RANGE_PATTERN, i)

    topic = F.coalesce(F.nullif(part(1), F.lit("")), F.nullif(F.regexp_extract("file_name", ABSENT_PATTERN, 1), F.lit("")))
    ranged = part(1) != ""
    has_range, at = F.col("partition").isNotNull(), F.col("minute_us")
    before, after, same = has_range & (at < a_us), has_range & (at > a_us), has_range & (at == a_us)
    others = (rows.where(~mine)
              .select("minute_us", topic.alias("topic"), F.when(ranged, part(2).try_cast("int")).alias("partition"),
                      F.when(ranged, part(3).try_cast("long")).alias("start"), F.when(ranged, part(4).try_cast("long")).alias("end"))
              .where(F.col("topic").isNotNull() & (F.col("partition").isNotNull() | ~ranged))
              .groupBy("topic", "partition")
              .agg(F.max(F.when(before, at)).alias("before_us"), F.max(F.when(before, F.col("end"))).alias("before_end"),
                   F.min(F.when(after, at)).alias("after_us"), F.min(F.when(after, F.col("start"))).alias("after_start"),
                   F.max(F.when(same, F.col("end"))).alias("same_end"), F.min(at).alias("minute_us"))
              .select(F.lit(False).alias("own"), "minute_us", F.lit(None).cast("string").alias("file_name"),
                      F.lit(None).cast("long").alias("bytes"), F.lit(None).cast("string").alias("sha256"),
                      *[F.col(k) for k in none]))
    own_rows, reduced, topics = [], [], {}
    for r in own.unionByName(others).collect():
        if r.own:
            own_rows.append(r)
            continue
        first = _instant(r.minute_us)
        topics[r.topic] = min(topics.get(r.topic, first), first)
        if r.partition is not None:
            reduced += Neighbours(r.topic, r.partition, _instant(r.before_us), r.before_end, _instant(r.after_us),
                                  r.after_start, a if r.same_end is not None else None, r.same_end).recorded()
    return own_rows, with_rangeless_topics(reduced, topics)


def _micros(t: datetime) -> int:
    return (_utc(t) - _EPOCH) // timedelta(microseconds=1)


def _instant(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


def _check_still_held(interval: Interval, ranges: list[OffsetRange], partitions: dict[int, PartitionNow]) -> None:
    """A recorded range is read again as it was, so the broker must still hold all of it."""
    gone = [r.name for r in ranges if r.records and (r.partition not in partitions or partitions[r.partition].begin > r.start
                                                      or partitions[r.partition].end < r.end)]
    if gone:
        raise LandingChanged(
            f"Kafka ranges of run {interval.run_key} are no longer held whole by the broker (records deleted by "
            f"retention, or the topic deleted or recreated): {', '.join(gone)}; the run read them once and cannot "
            f"read them again (docs/sources.md, 'Retention')")


def read_failure(exc: BaseException, ranges: list[OffsetRange], run_key: str, props: dict[str, str]) -> Exception | None:
    """What a failed read of Kafka ranges means for a user (``None``: not Kafka's failure): records
    deleted between planning and reading (``LandingChanged``), or a broker that stopped answering
    (``KafkaUnavailable``, with the Kafka client's own exception, secrets masked). Judged by the
    Java exceptions under Spark's job failure, not by any line of its trace."""
    causes = [str(c) for e in _chain(exc) for c in _java_causes(e)]
    text = "\n".join(causes) or "\n".join(str(e) for e in _chain(exc))
    if "failOnDataLoss" in text or "KAFKA_DATA_LOSS" in text:
        return LandingChanged(f"Kafka ranges of run {run_key} are no longer held whole by the broker (records deleted "
                              f"by retention, or the topic deleted or recreated): {', '.join(r.name for r in ranges)}")
    kafka = next((c for c in causes if c.startswith("org.apache.kafka.") or c.startswith(
        ("java.util.concurrent.TimeoutException: Cannot fetch record", "java.util.concurrent.TimeoutException: Failed to get records"))), None)
    if kafka is None:
        return None
    if refused_access(kafka):
        return ConfigError(f"Kafka refused the client while ranges of run {run_key} were read: "
                           f"{properties.redact(kafka.splitlines()[0], props)[:300]}; fix its credentials or ACLs")
    return KafkaUnavailable(f"Kafka stopped answering while ranges of run {run_key} were read: "
                            f"{properties.redact(kafka.splitlines()[0], props)[:300]}")


def _java_causes(exc: BaseException) -> list[str]:
    """The Java exception under a py4j or PySpark error and its causes, each as ``Class: message``."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    out = []
    while java is not None and len(out) < 12:
        try:
            out.append(str(java.toString()))
            java = java.getCause()
        except Exception:
            break
    return out


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
