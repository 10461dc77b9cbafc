"""Extract: a run's landed files -> validated updates, a rejected quarantine with a reason per
line, and a fingerprint per file (Spark mechanism; the rules are ``etl.core.records`` and
``etl.io.landing``, pure Python).

The driver only lists the landing zone; the executors read each file's bytes with plain Python
(no URI encoding, globbing or lossy text decoding on the way) and run ``etl.core.records`` on every
line. One pass per file yields its lines and its fingerprint (bytes, SHA-256, line counts): the
record that makes a loaded file immutable (``landed_files``).
"""

from __future__ import annotations

import functools
import hashlib
from datetime import timedelta, timezone
from typing import Iterator

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from etl.core.cdc import check_input
from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.model import Entity
from etl.core.records import Reject, printable, read_lines
from etl.core.stream_plan import MINUTE, n_windows, piece_start
from etl.io.kafka import client_properties, read_ranges
from etl.io.landing import LandedFile
from warehouse.schemas import DEFAULT_ENTITY, LANDED_FILES, REJECTED_UPDATES, entity_columns, schemas

ROWS_PER_ARROW_BATCH = 8192
EMPTY_SHA256 = hashlib.sha256().hexdigest()

# What the executors hand back: one row per non-blank line (kind "line") and one per file ("file");
# the entity's declared columns go after ``op`` (``checked_schema``).
_CHECKED_FIXED = StructType(
    [
        StructField("kind", StringType(), False),
        StructField("update_id", StringType()),
        StructField("path_source_id", StringType(), False),
        StructField("file_name", StringType(), False),
        StructField("line_number", LongType()),
        StructField("raw_line", StringType()),
        StructField("arrival_minute", TimestampType(), False),
        StructField("reject_reason", StringType()),
        StructField("reject_field", StringType()),  # the field of the line (or change event) the reason is about
        StructField("source_id", StringType()),
        StructField("natural_key", StringType()),
        StructField("op", StringType()),
        StructField("source_seq", LongType()),
        StructField("event_ts", TimestampType()),
        StructField("arrival_ts", TimestampType()),
        StructField("file_bytes", LongType()),
        StructField("file_sha256", StringType()),
        StructField("file_lines", LongType()),
        StructField("file_blank_lines", LongType()),
    ]
)


@functools.lru_cache(maxsize=64)
def checked_schema(entity: Entity) -> StructType:
    fixed = _CHECKED_FIXED.fields
    at = _CHECKED_FIXED.fieldNames().index("op") + 1
    return StructType([*fixed[:at], *entity_columns(entity), *fixed[at:]])


CHECKED = checked_schema(DEFAULT_ENTITY)
FILES = StructType(
    [
        StructField("path", StringType(), False),
        StructField("name", StringType(), False),
        StructField("source_id", StringType(), False),
        StructField("minute", TimestampType(), False),
    ]
)


def check_file(f: dict, max_record_bytes: int, sources: tuple[str, ...], entity: Entity = DEFAULT_ENTITY) -> Iterator[dict]:
    """Every non-blank line of one landing file as a ``CHECKED`` row, then the file's row. Streams
    the file (one line in memory, an oversized one cut to ``max_record_bytes``)."""
    digest, size = hashlib.sha256(), [0]

    def seen(chunk: bytes) -> None:
        digest.update(chunk)
        size[0] += len(chunk)

    base = {"path_source_id": f["source_id"], "file_name": f["name"], "arrival_minute": f["minute"]}
    lines = blank = 0
    with open(f["path"], "rb") as handle:
        for number, line, oversized in read_lines(handle, max_record_bytes, seen):
            if line is None:
                blank += 1
                continue
            lines += 1
            row = dict(base, kind="line", update_id=f"{f['name']}:{number:09d}", line_number=number)
            try:
                if oversized:
                    raise Reject("oversized_record")
                u = check_input(line, f["source_id"], max_record_bytes, sources, entity, entity.input_of(f["source_id"]))
            except Reject as exc:
                row.update(reject_reason=exc.reason, reject_field=exc.field, raw_line=printable(line, max_record_bytes))
            else:
                row.update(
                    source_id=u.source_id, natural_key=u.natural_key, op=u.op, source_seq=u.source_seq,
                    event_ts=u.event_ts, arrival_ts=u.arrival_ts or f["minute"], **u.columns(),
                )
            yield row
    yield dict(base, kind="file", file_bytes=size[0], file_sha256=digest.hexdigest(), file_lines=lines, file_blank_lines=blank)


def _check_partition(max_record_bytes: int, sources: tuple[str, ...], entity: Entity):
    def run(batches):
        files = (f for batch in batches for f in batch.to_pylist())
        yield from _arrow_batches((row for f in files for row in check_file(f, max_record_bytes, sources, entity)), entity)

    return run


def _arrow_batches(rows: Iterator[dict], entity: Entity):
    """``CHECKED`` rows as Arrow record batches of at most ``ROWS_PER_ARROW_BATCH`` (mapInArrow's output)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(checked_schema(entity), timezone="UTC")
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= ROWS_PER_ARROW_BATCH:
            yield pa.RecordBatch.from_pylist(chunk, schema=schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


def check_landed_files(spark, cfg: EtlConfig, files: list[LandedFile]) -> DataFrame:
    """The ``CHECKED`` rows of the files: one Spark task per few files, on the executors."""
    listed = spark.createDataFrame([(f.path, f.name, f.source_id, f.minute) for f in files], FILES)
    if files:
        listed = listed.repartition(max(1, min(len(files), spark.sparkContext.defaultParallelism * 2)), "name")
    entity = cfg.entity_model
    return listed.mapInArrow(_check_partition(cfg.max_record_bytes, tuple(cfg.sources), entity), checked_schema(entity))


def check_records(records, meta: dict, max_record_bytes: int, sources: tuple[str, ...], entity: Entity,
                  piece_seconds: int = MINUTE) -> Iterator[dict]:
    """Every record of the recorded ranges as a ``CHECKED`` row, then one row per range (its
    fingerprint: value bytes, SHA-256 over offsets and values, records, tombstones). ``records``
    come sorted by topic, partition and offset; ``meta``: ``(topic, partition)`` -> its ranges as
    ``(start, end, input, name, piece start, piece end)`` in offset order; a record in none of them
    is not this read's. Arrival is the record's timestamp; its piece of ``piece_seconds`` is kept
    inside the piece that decided its range, as a landing file's lines are kept in the file's."""
    current, state = None, None

    def file_row():
        _, _, spec, name, a, _ = current
        return dict(kind="file", path_source_id=spec.source, file_name=name, arrival_minute=a, file_bytes=state[1],
                    file_sha256=state[0].hexdigest(), file_lines=state[2], file_blank_lines=state[3])

    for rec in records:
        value, offset = rec["value"], rec["offset"]
        mine = next((m for m in meta[(rec["topic"], rec["partition"])] if m[0] <= offset < m[1]), None)
        if mine is None:
            continue
        if mine is not current:
            if current is not None:
                yield file_row()
            current, state = mine, [hashlib.sha256(), 0, 0, 0]
        _, _, spec, name, a, b = current
        state[0].update(f"{offset}:{-1 if value is None else len(value)}:".encode())
        if value is None:
            state[3] += 1
            continue
        state[0].update(value)
        state[1] += len(value)
        state[2] += 1
        ts = rec["timestamp"]
        ts = ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)
        # A piece of the run that read again a range the stream decided from a piece starting
        # mid-unit (piece_seconds changed since) still keeps it inside that piece: max with a.
        minute = max(piece_start(min(max(ts, a), b - timedelta(microseconds=1)), piece_seconds), a)
        row = dict(kind="line", update_id=f"{name.rsplit(':', 1)[0]}:{offset:019d}", path_source_id=spec.source,
                   file_name=name, line_number=offset, arrival_minute=minute)
        try:
            u = check_input(value, spec.source, max_record_bytes, sources, entity, spec)
        except Reject as exc:
            row.update(reject_reason=exc.reason, reject_field=exc.field, raw_line=printable(value, max_record_bytes))
        else:
            row.update(source_id=u.source_id, natural_key=u.natural_key, op=u.op, source_seq=u.source_seq,
                       event_ts=u.event_ts, arrival_ts=ts, **u.columns())
        yield row
    if current is not None:
        yield file_row()


def _check_kafka_partition(meta: dict, max_record_bytes: int, sources: tuple[str, ...], entity: Entity, piece_seconds: int):
    def run(batches):
        records = (r for batch in batches for r in batch.to_pylist())
        yield from _arrow_batches(check_records(records, meta, max_record_bytes, sources, entity, piece_seconds), entity)

    return run


def check_kafka_ranges(spark, cfg: EtlConfig, ranges: list, markers: list = ()) -> DataFrame | None:
    """The ``CHECKED`` rows of the ranges' records (``ranges``: ``etl.io.kafka.PlannedRange``),
    read with Spark's Kafka source; an empty range still gets its row, the record of where it
    ended, and so does each of the plan's markers (``(input, name, piece start)``: an absent topic,
    offsets lost, where the piece ended)."""
    if not ranges and not markers:
        return None
    entity = cfg.entity_model
    schema = checked_schema(entity)
    meta: dict = {}
    for p in sorted(ranges, key=lambda p: p.range.start):
        r = p.range
        meta.setdefault((r.topic, r.partition), []).append((r.start, r.end, p.input, r.name, p.start, p.end))
    nothing = [(p.input, p.range.name, p.start) for p in ranges if p.range.records == 0] + list(markers)
    empty = [dict(kind="file", path_source_id=spec.source, file_name=name, arrival_minute=a, file_bytes=0,
                  file_sha256=EMPTY_SHA256, file_lines=0, file_blank_lines=0)
             for spec, name, a in nothing]
    out = spark.createDataFrame([tuple(row.get(f) for f in schema.fieldNames()) for row in empty], schema) if empty else None
    raw = read_ranges(spark, client_properties(cfg), [p.range for p in ranges])
    if raw is not None:
        ordered = raw.repartition(max(1, min(len(meta), spark.sparkContext.defaultParallelism * 2)), "topic", "partition")
        ordered = ordered.sortWithinPartitions("topic", "partition", "offset")
        checked = ordered.mapInArrow(_check_kafka_partition(meta, cfg.max_record_bytes, tuple(cfg.sources), entity, cfg.piece_seconds), schema)
        out = checked if out is None else out.unionByName(checked)
    return out


def row_hash(entity: Entity = DEFAULT_ENTITY):
    """Hash of an update's content, ``op`` and the entity's ``compare`` columns (not its sequence or
    times): equal hash = unchanged content. Injective because ingestion never lets U+0000 or U+0001
    into a text field, and each column's text is its type's canonical form. An entity with ``type1``
    columns gets two digests end to end, the version columns' then the type1 columns': the whole is
    still compared for unchanged content, and its first part (``version_hash``) tells the history
    whether a change makes a version."""
    def digest(columns):
        parts = [F.coalesce(F.col(c).cast("string"), F.lit("\u0000")) for c in columns]
        return F.sha2(F.concat_ws("\u0001", *parts), 256)

    if not entity.type1:
        return digest(("op", *entity.compare))
    return F.concat(digest(("op", *entity.version_compare)), digest(entity.type1_compare))


def _conform(df: DataFrame, schema: StructType) -> DataFrame:
    return df.select([F.col(f.name).cast(f.dataType) for f in schema.fields])


def to_ingested(valid: DataFrame, interval: Interval, micro_batch_seconds: int, entity: Entity = DEFAULT_ENTITY,
                piece_seconds: int = MINUTE) -> DataFrame:
    """Valid rows -> the ``ingested_updates`` shape, each with its micro-batch by arrival time,
    kept inside the windows of its piece (``stream_plan.piece_windows``; ``arrival_minute`` is the
    piece's start): a line stamped outside its piece cannot join a window the always-on loader
    has loaded."""
    out = valid.select(
        F.lit(interval.run_key).alias("run_key"),
        "update_id", "source_id", "natural_key", "op", *(c.name for c in entity.columns),
        "source_seq", "event_ts", "arrival_ts",
        row_hash(entity).alias("row_hash"),
        batch_index(interval, micro_batch_seconds, piece_seconds).alias("batch_index"),
    )
    return _conform(out, schemas(entity).ingested_updates)


def batch_index(interval: Interval, micro_batch_seconds: int, piece_seconds: int = MINUTE) -> Column:
    """A checked row's arrival window in ``interval``, kept inside its piece's windows; one
    expression, so that the ingest's tally counts the windows ``to_ingested`` writes."""
    n_batches = n_windows(interval, micro_batch_seconds)
    start_us = int(interval.start.timestamp() * 1_000_000)
    width = F.lit(micro_batch_seconds * 1_000_000)
    offset = F.unix_micros(F.col("arrival_ts")) - F.lit(start_us)
    minute = F.unix_micros(F.col("arrival_minute")) - F.lit(start_us)
    batch = F.floor(offset / width)
    batch = F.least(F.greatest(batch, F.floor(minute / width)), F.floor((minute + F.lit(piece_seconds * 1_000_000 - 1)) / width))
    return F.least(F.greatest(batch, F.lit(0)), F.lit(n_batches - 1)).cast("int")


def to_rejected(rejected: DataFrame, interval: Interval) -> DataFrame:
    out = rejected.select(
        F.lit(interval.run_key).alias("run_key"),
        "update_id",
        F.col("path_source_id").alias("source_id"),
        "file_name",
        "line_number",
        F.col("reject_reason").alias("reason"),
        F.col("reject_field").alias("reason_detail"),
        "raw_line",
        "arrival_minute",
    )
    return _conform(out, REJECTED_UPDATES)


def to_landed_files(file_rows: DataFrame, interval: Interval) -> DataFrame:
    out = file_rows.select(
        F.lit(interval.run_key).alias("run_key"),
        "file_name",
        F.col("path_source_id").alias("source_id"),
        "arrival_minute",
        F.col("file_bytes").alias("bytes"),
        F.col("file_sha256").alias("sha256"),
        F.col("file_lines").alias("lines"),
        F.col("file_blank_lines").alias("blank_lines"),
    )
    return _conform(out, LANDED_FILES)
