"""Extract: a run's landed files -> validated updates and a rejected quarantine with a reason per row.

A landing file holds one source's arrivals of one minute (``etl.generator.landing_file``); a run
owns the files whose minute lies in its half-open interval ``[start, end)``, so the same interval
always reads the same lines. Bad lines never stop a run: each gets exactly one reason code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from etl.config import EtlConfig

FILE_PATTERN = re.compile(r"updates-(\d{8}T\d{4})\.jsonl$")

# Reason codes, in the order they are checked: a line gets the first that applies.
REJECT_REASONS = (
    "oversized_record",
    "malformed_json",
    "not_an_object",
    "missing_source_id",
    "source_mismatch",
    "unknown_source",
    "missing_natural_key",
    "oversized_natural_key",
    "bad_op",
    "bad_source_seq",
    "bad_event_ts",
    "bad_arrival_ts",
    "bad_attribute_type",
)
MAX_NATURAL_KEY_CHARS = 256


class LandingError(RuntimeError):
    """The landing zone cannot be read; nothing was written."""


@dataclass(frozen=True)
class Interval:
    """A half-open interval ``[start, end)`` of arrival time, aligned to whole minutes."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            ts = getattr(self, name)
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=timezone.utc)
            ts = ts.astimezone(timezone.utc)
            if ts.second or ts.microsecond:
                raise ValueError(f"interval {name} {ts.isoformat()} must be a whole minute (landing files are per minute)")
            object.__setattr__(self, name, ts)
        if self.end <= self.start:
            raise ValueError(f"interval end {self.end.isoformat()} must be after start {self.start.isoformat()}")

    @property
    def run_key(self) -> str:
        return f"{self.start:%Y%m%dT%H%M}-{self.end:%Y%m%dT%H%M}"

    @classmethod
    def parse(cls, start: str, end: str) -> "Interval":
        return cls(_parse_ts(start), _parse_ts(end))

    def minutes(self):
        m = self.start
        while m < self.end:
            yield m
            m += timedelta(minutes=1)

    def overlaps(self, other: "Interval") -> bool:
        return self.start < other.end and other.start < self.end

    @classmethod
    def from_run_key(cls, run_key: str) -> "Interval":
        a, b = run_key.split("-")
        fmt = "%Y%m%dT%H%M"
        return cls(datetime.strptime(a, fmt), datetime.strptime(b, fmt))


def _parse_ts(text: str) -> datetime:
    ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


@dataclass
class LandedFiles:
    files: list[Path] = field(default_factory=list)
    ignored: list[Path] = field(default_factory=list)  # in the interval's folders, not landing files


def list_landed_files(landing_root: Path, interval: Interval) -> LandedFiles:
    """The interval's landing files, sorted. Only hour folders the interval touches are listed."""
    if not landing_root.exists():
        raise LandingError(f"landing zone {landing_root} does not exist (setting 'landing_root')")
    if not landing_root.is_dir():
        raise LandingError(f"landing zone {landing_root} is not a directory (setting 'landing_root')")
    hours = sorted({m.replace(minute=0) for m in interval.minutes()})
    wanted = {f"{m:%Y%m%dT%H%M}" for m in interval.minutes()}
    out = LandedFiles()
    try:
        source_dirs = sorted(p for p in landing_root.iterdir() if p.is_dir() and p.name.startswith("source_id="))
    except PermissionError as exc:
        raise LandingError(f"landing zone {landing_root} is not readable: {exc}") from None
    for source_dir in source_dirs:
        for hour in hours:
            hour_dir = source_dir / f"arrival_date={hour:%Y-%m-%d}" / f"arrival_hour={hour:%H}"
            if not hour_dir.is_dir():
                continue
            for path in sorted(hour_dir.iterdir()):
                match = FILE_PATTERN.search(path.name)
                if match is None:
                    out.ignored.append(path)
                elif match.group(1) in wanted:
                    out.files.append(path)
    return out


def read_landed_lines(spark, cfg: EtlConfig, interval: Interval, files: list[Path]):
    """One row per non-blank landed line: where it came from, its number and its text."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    if not files:
        schema = StructType(
            [
                StructField("update_id", StringType()),
                StructField("path_source_id", StringType()),
                StructField("file_name", StringType()),
                StructField("line_number", LongType()),
                StructField("raw_line", StringType()),
                StructField("arrival_minute", TimestampType()),
            ]
        )
        return spark.createDataFrame([], schema)
    root = str(cfg.landing_path).rstrip("/") + "/"
    raw = spark.read.text([str(f) for f in files], wholetext=True)
    path = F.regexp_replace(F.col("_metadata.file_path"), "^file:(//)?", "")
    rel = F.substring_index(path, root, -1)
    lines = raw.select(
        rel.alias("file_name"),
        F.posexplode(F.split(F.col("value"), "\n")).alias("pos", "raw_line"),
    ).where(F.trim(F.col("raw_line")) != "")
    return lines.select(
        # Zero-padded so that update ids of one file sort in line order.
        F.concat(F.col("file_name"), F.lit(":"), F.lpad((F.col("pos") + 1).cast("string"), 9, "0")).alias("update_id"),
        F.regexp_extract("file_name", r"source_id=([^/]+)/", 1).alias("path_source_id"),
        F.col("file_name"),
        (F.col("pos") + 1).cast("long").alias("line_number"),
        F.col("raw_line"),
        F.to_timestamp(F.regexp_extract("file_name", r"updates-(\d{8}T\d{4})\.jsonl$", 1), "yyyyMMdd'T'HHmm").alias(
            "arrival_minute"
        ),
    )


def validate_lines(lines, cfg: EtlConfig):
    """Parse and check every line; adds the typed update columns and ``reject_reason`` (null if valid).

    Pure DataFrame -> DataFrame: the reason is the first rule of ``REJECT_REASONS`` that fails.
    """
    from pyspark.sql import functions as F

    v = F.expr("try_parse_json(raw_line)")
    parsed = lines.withColumn("_v", v)

    def text(path: str):
        return F.expr(f"try_variant_get(_v, '{path}', 'string')")

    parsed = parsed.select(
        "*",
        F.expr("schema_of_variant(_v)").alias("_vtype"),
        text("$.source_id").alias("_source_id"),
        text("$.natural_key").alias("_natural_key"),
        text("$.op").alias("_op"),
        text("$.source_seq").alias("_source_seq"),
        text("$.event_ts").alias("_event_ts"),
        text("$.arrival_ts").alias("_arrival_ts"),
        text("$.attributes.name").alias("_name"),
        text("$.attributes.email").alias("_email"),
        text("$.attributes.city").alias("_city"),
        text("$.attributes.balance").alias("_balance"),
    )
    event_ts = F.expr("try_cast(_event_ts AS TIMESTAMP)")
    arrival_ts = F.expr("try_cast(_arrival_ts AS TIMESTAMP)")
    balance = F.expr("try_cast(_balance AS DECIMAL(18,2))")
    blank = lambda c: F.col(c).isNull() | (F.trim(F.col(c)) == "")  # noqa: E731
    allowed = list(cfg.sources)
    checks = [
        ("oversized_record", F.octet_length("raw_line") > cfg.max_record_bytes),
        ("malformed_json", F.col("_v").isNull()),
        ("not_an_object", ~F.col("_vtype").startswith("OBJECT")),
        ("missing_source_id", blank("_source_id")),
        ("source_mismatch", F.col("_source_id") != F.col("path_source_id")),
        ("unknown_source", ~F.col("_source_id").isin(allowed) if allowed else F.lit(False)),
        ("missing_natural_key", blank("_natural_key")),
        ("oversized_natural_key", F.char_length("_natural_key") > MAX_NATURAL_KEY_CHARS),
        ("bad_op", F.col("_op").isNull() | ~F.col("_op").isin("upsert", "delete")),
        (
            "bad_source_seq",
            ~F.coalesce(F.col("_source_seq").rlike(r"^[0-9]{1,19}$"), F.lit(False))
            | F.expr("try_cast(_source_seq AS BIGINT)").isNull(),
        ),
        ("bad_event_ts", event_ts.isNull()),
        ("bad_arrival_ts", F.col("_arrival_ts").isNotNull() & arrival_ts.isNull()),
        ("bad_attribute_type", F.col("_balance").isNotNull() & balance.isNull()),
    ]
    assert [c[0] for c in checks] == list(REJECT_REASONS)
    reason = F.lit(None).cast("string")
    for code, failed in reversed(checks):
        reason = F.when(F.coalesce(failed, F.lit(False)), F.lit(code)).otherwise(reason)
    return parsed.select(
        "update_id",
        "path_source_id",
        "file_name",
        "line_number",
        "raw_line",
        "arrival_minute",
        reason.alias("reject_reason"),
        F.col("_source_id").alias("source_id"),
        F.col("_natural_key").alias("natural_key"),
        F.col("_op").alias("op"),
        F.col("_name").alias("name"),
        F.col("_email").alias("email"),
        F.col("_city").alias("city"),
        balance.alias("balance"),
        F.expr("try_cast(_source_seq AS BIGINT)").alias("source_seq"),
        event_ts.alias("event_ts"),
        # A line without its own arrival stamp arrived in its file's minute.
        F.coalesce(arrival_ts, F.col("arrival_minute")).alias("arrival_ts"),
    )


def row_hash(cols=("op", "name", "email", "city", "balance")):
    """Hash of an update's content (not its sequence or times): equal hash = unchanged content."""
    from pyspark.sql import functions as F

    parts = [F.coalesce(F.col(c).cast("string"), F.lit("\u0000")) for c in cols]
    return F.sha2(F.concat_ws("\u0001", *parts), 256)


def to_ingested(valid, interval: Interval, micro_batch_seconds: int):
    """Valid rows -> the ``ingested_updates`` shape, each with its micro-batch by arrival time."""
    from pyspark.sql import functions as F

    from warehouse.schemas import INGESTED_UPDATES

    n_batches = max(1, -(-int((interval.end - interval.start).total_seconds()) // micro_batch_seconds))
    start_us = int(interval.start.timestamp() * 1_000_000)
    offset = F.unix_micros(F.col("arrival_ts")) - F.lit(start_us)
    batch = F.floor(offset / F.lit(micro_batch_seconds * 1_000_000)).cast("int")
    batch = F.least(F.greatest(batch, F.lit(0)), F.lit(n_batches - 1))
    out = valid.select(
        F.lit(interval.run_key).alias("run_key"),
        "update_id",
        "source_id",
        "natural_key",
        "op",
        "name",
        "email",
        "city",
        "balance",
        "source_seq",
        "event_ts",
        "arrival_ts",
        row_hash().alias("row_hash"),
        batch.alias("batch_index"),
    )
    return out.select([F.col(f.name).cast(f.dataType) for f in INGESTED_UPDATES.fields])


def to_rejected(rejected, interval: Interval, max_record_bytes: int):
    from pyspark.sql import functions as F

    from warehouse.schemas import REJECTED_UPDATES

    out = rejected.select(
        F.lit(interval.run_key).alias("run_key"),
        "update_id",
        F.col("path_source_id").alias("source_id"),
        "file_name",
        "line_number",
        F.col("reject_reason").alias("reason"),
        F.substring("raw_line", 1, max_record_bytes).alias("raw_line"),
        "arrival_minute",
    )
    return out.select([F.col(f.name).cast(f.dataType) for f in REJECTED_UPDATES.fields])
