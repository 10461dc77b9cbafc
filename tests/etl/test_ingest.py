import json
from datetime import datetime, timedelta, timezone

import pytest
from chispa import assert_df_equality

from etl import jobs
from etl.generator import landing_file
from etl.ingest import Interval, LandingError, list_landed_files
from etl.tables import read

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
INTERVAL = Interval(T0, T0 + timedelta(minutes=2))


def good(key="1", seq=5, **over):
    rec = {
        "source_id": "crm", "natural_key": key, "op": "upsert", "source_seq": seq,
        "event_ts": "2026-11-22T01:00:01Z", "arrival_ts": "2026-11-22T01:00:02Z",
        "attributes": {"name": "A", "email": "a@x", "city": "Oslo", "balance": "12.50"},
    }
    rec.update(over)
    return json.dumps(rec)


BAD_LINES = {
    "oversized_record": good(name_pad="x" * 3000),
    "malformed_json": '{"source_id": "crm", "natural_key": ',
    "not_an_object": "[1, 2, 3]",
    "missing_source_id": good(source_id=None),
    "source_mismatch": good(source_id="web"),
    "missing_natural_key": good(natural_key="  "),
    "oversized_natural_key": good(key="k" * 300),
    "bad_op": good(op="merge"),
    "bad_source_seq": good(seq="seven"),
    "bad_event_ts": good(event_ts="yesterday"),
    "bad_arrival_ts": good(arrival_ts="soon"),
    "bad_attribute_type": good(attributes={"balance": "lots"}),
}


def land(cfg, lines, source="crm", minute=T0):
    path = landing_file(cfg.landing_path, source, minute)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_bad_line_gets_its_reason_and_good_lines_pass(spark, cfg):
    cfg = cfg.replace(max_record_bytes=2048)
    land(cfg, [good("1"), *BAD_LINES.values(), "", good("2", seq=6)])
    summary = jobs.ingest(spark, cfg, INTERVAL)
    assert summary["lines"] == len(BAD_LINES) + 2  # the blank line is not an update
    assert summary["valid"] == 2
    assert summary["rejected_by_reason"] == {reason: 1 for reason in BAD_LINES}
    rejected = read(spark, cfg, "rejected_updates").select("line_number", "reason").orderBy("line_number")
    expected = spark.createDataFrame(
        [(i + 2, reason) for i, reason in enumerate(BAD_LINES)], rejected.schema
    )
    assert_df_equality(rejected, expected)
    row = read(spark, cfg, "ingested_updates").orderBy("natural_key").first()
    assert (row.natural_key, row.op, row.city, str(row.balance), row.source_seq) == ("1", "upsert", "Oslo", "12.50", 5)
    assert row.update_id.endswith("updates-20261122T0100.jsonl:000000001")


def test_unknown_source_rejected_when_sources_are_listed(spark, cfg):
    land(cfg, [good("1")])
    land(cfg, [good("1", source_id="erp")], source="erp")
    summary = jobs.ingest(spark, cfg.replace(sources=("crm",)), INTERVAL)
    assert summary["rejected_by_reason"] == {"unknown_source": 1}


def test_interval_owns_the_files_of_its_minutes_only(spark, cfg):
    land(cfg, [good("1")], minute=T0 - timedelta(minutes=1))
    land(cfg, [good("2")], minute=T0)
    land(cfg, [good("3")], minute=T0 + timedelta(minutes=1))
    land(cfg, [good("4")], minute=T0 + timedelta(minutes=2))
    (cfg.landing_path / "source_id=crm" / "arrival_date=2026-11-22" / "arrival_hour=01" / "notes.txt").write_text("x")
    files = list_landed_files(cfg.landing_path, INTERVAL)
    assert [f.name for f in files.files] == ["updates-20261122T0100.jsonl", "updates-20261122T0101.jsonl"]
    assert [f.name for f in files.ignored] == ["notes.txt"]


def test_rerunning_ingest_replaces_instead_of_appending(spark, cfg):
    land(cfg, [good("1"), "garbage"])
    jobs.ingest(spark, cfg, INTERVAL)
    jobs.ingest(spark, cfg, INTERVAL)
    assert read(spark, cfg, "ingested_updates").count() == 1
    assert read(spark, cfg, "rejected_updates").count() == 1


def test_rejection_ceiling_fails_the_run_after_quarantining(spark, cfg):
    land(cfg, [good("1"), "garbage", "more garbage"])
    with pytest.raises(jobs.RejectionCeilingExceeded, match="max_rejected_fraction"):
        jobs.ingest(spark, cfg.replace(max_rejected_fraction=0.5), INTERVAL)
    assert read(spark, cfg, "rejected_updates").count() == 2


def test_missing_landing_zone_fails_before_any_write(spark, cfg):
    with pytest.raises(LandingError, match="landing_root"):
        jobs.ingest(spark, cfg, INTERVAL)
    assert not cfg.warehouse_path.exists()


def test_interval_must_be_whole_minutes():
    with pytest.raises(ValueError, match="whole minute"):
        Interval(T0 + timedelta(seconds=30), T0 + timedelta(minutes=2))
    with pytest.raises(ValueError, match="after start"):
        Interval(T0, T0)


def test_empty_files_extra_columns_and_a_file_delivered_twice(spark, cfg):
    """An empty file adds nothing; unexpected fields are ignored (the row is kept); the same file
    delivered again a minute later loads as re-deliveries, not as new versions."""
    lines = [good("1", seq=5), good("2", seq=7, loyalty_tier="gold", attributes={"city": "Oslo", "shoe_size": 44})]
    land(cfg, [], minute=T0).write_text("")  # an empty file
    land(cfg, lines, minute=T0 + timedelta(minutes=1))
    land(cfg, lines, minute=T0 + timedelta(minutes=2))  # the duplicate file
    wide = Interval(T0, T0 + timedelta(minutes=3))
    summary = jobs.ingest(spark, cfg, wide)
    assert (summary["files"], summary["lines"], summary["valid"], summary["rejected"]) == (3, 4, 4, 0)
    jobs.load(spark, cfg, wide)
    outcomes = sorted((r.natural_key, r.outcome, r.reason or "") for r in read(spark, cfg, "outcome_log").collect())
    assert outcomes == [("1", "duplicate", "redelivered"), ("1", "new", ""), ("2", "duplicate", "redelivered"), ("2", "new", "")]
    assert read(spark, cfg, "key_map").count() == 2
