from datetime import datetime, timedelta, timezone

import pytest
from chispa import assert_df_equality

from etl import jobs
from etl.core.interval import Interval
from etl.io.landing import LandingError, landing_file, scan_landing
from etl.io.tables import open_tables, read
from tests.helpers import ROOT, good, land

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
INTERVAL = Interval(T0, T0 + timedelta(minutes=2))


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
BAD_FIELDS = {  # the field of the line each reason names (reason_detail); None: the whole line
    "oversized_record": None, "malformed_json": None, "not_an_object": None, "missing_source_id": "source_id",
    "source_mismatch": "source_id", "missing_natural_key": "natural_key", "oversized_natural_key": "natural_key",
    "bad_op": "op", "bad_source_seq": "source_seq", "bad_event_ts": "event_ts", "bad_arrival_ts": "arrival_ts",
    "bad_attribute_type": "attributes.balance",
}


@pytest.mark.memory_tables
def test_each_bad_line_gets_its_reason_and_good_lines_pass(spark, cfg):
    cfg = cfg.replace(max_record_bytes=2048)
    land(cfg, [good("1"), *BAD_LINES.values(), "", good("2", seq=6)])
    said = []
    summary = jobs.ingest(spark, cfg, INTERVAL, progress=said.append)
    assert said[0].startswith("reading 1 landing files (") and said[1:] == [
        f"checked {len(BAD_LINES) + 2} lines; writing ingested_updates, rejected_updates, landed_files"]
    assert summary["lines"] == len(BAD_LINES) + 2  # the blank line is not an update
    assert summary["valid"] == 2
    assert summary["rejected_by_reason"] == {reason: 1 for reason in BAD_LINES}
    # Where, not only why (issue 45): the field of the line each reason is about.
    assert summary["rejected_by_field"] == {reason: {field: 1} for reason, field in BAD_FIELDS.items() if field}
    rejected = read(spark, cfg, "rejected_updates").select("line_number", "reason", "reason_detail").orderBy("line_number")
    expected = spark.createDataFrame(
        [(i + 2, reason, BAD_FIELDS[reason]) for i, reason in enumerate(BAD_LINES)], rejected.schema
    )
    assert_df_equality(rejected, expected)
    assert "attributes.balance=1" in jobs.format_report(jobs.report(cfg, INTERVAL))
    row = read(spark, cfg, "ingested_updates").orderBy("natural_key").first()
    assert (row.natural_key, row.op, row.city, str(row.balance), row.source_seq) == ("1", "upsert", "Oslo", "12.50", 5)
    assert row.update_id.endswith("updates-20261122T0100.jsonl:000000001")


@pytest.mark.memory_tables
def test_unknown_source_rejected_when_sources_are_listed(spark, cfg):
    land(cfg, [good("1")])
    land(cfg, [good("1", source_id="erp")], source="erp")
    summary = jobs.ingest(spark, cfg.replace(sources=("crm",)), INTERVAL)
    assert summary["rejected_by_reason"] == {"unknown_source": 1}


@pytest.mark.memory_tables
def test_interval_owns_the_files_of_its_minutes_only(spark, cfg):
    land(cfg, [good("1")], minute=T0 - timedelta(minutes=1))
    land(cfg, [good("2")], minute=T0)
    land(cfg, [good("3")], minute=T0 + timedelta(minutes=1))
    land(cfg, [good("4")], minute=T0 + timedelta(minutes=2))
    (cfg.landing_path / "source_id=crm" / "arrival_date=2026-11-22" / "arrival_hour=01" / "notes.txt").write_text("x")
    files = scan_landing(cfg.landing_path, INTERVAL.start, INTERVAL.end)
    assert [f.name.rsplit("/", 1)[1] for f in files.files] == ["updates-20261122T0100.jsonl", "updates-20261122T0101.jsonl"]
    assert [s.name.rsplit("/", 1)[1] for s in files.skipped] == ["notes.txt"]


@pytest.mark.memory_tables
def test_rerunning_ingest_replaces_instead_of_appending(spark, cfg):
    land(cfg, [good("1"), "garbage"])
    jobs.ingest(spark, cfg, INTERVAL)
    jobs.ingest(spark, cfg, INTERVAL)
    assert read(spark, cfg, "ingested_updates").count() == 1
    assert read(spark, cfg, "rejected_updates").count() == 1


@pytest.mark.memory_tables
def test_a_line_stamped_outside_its_file_s_minute_stays_in_that_minute_s_windows(spark, cfg):
    """Its arrival time picks the window, kept inside the file's minute: a later file can never add
    to a window already loaded, so the always-on loader's pieces are the run's rows."""
    cfg = cfg.replace(micro_batch_seconds=20)
    t = lambda s: (T0 + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    land(cfg, [good("a", arrival_ts=t(25)), good("b", arrival_ts=t(-30)), good("c", arrival_ts=t(95))], minute=T0)
    land(cfg, [good("d", arrival_ts=t(10)), good("e", arrival_ts=t(70)), good("f", arrival_ts=t(200))],
         minute=T0 + timedelta(minutes=1))
    jobs.ingest(spark, cfg, INTERVAL)
    got = {r.natural_key: r.batch_index for r in read(spark, cfg, "ingested_updates").collect()}
    assert got == {"a": 1, "b": 0, "c": 2, "d": 3, "e": 3, "f": 5}
    whole = sorted(read(spark, cfg, "ingested_updates").collect())
    for start, end in ((T0, T0 + timedelta(minutes=1)), (T0 + timedelta(minutes=1), INTERVAL.end)):
        jobs.ingest_pieces(spark, cfg, INTERVAL, start, end)  # the stream's pieces write the same rows
    assert sorted(read(spark, cfg, "ingested_updates").collect()) == whole


@pytest.mark.memory_tables
def test_fresh_pieces_append_the_run_s_rows_count_them_per_window_and_skip_empty_tables(spark, cfg):
    """The always-on loader's first attempt at its pieces appends (``fresh``): the rows a whole
    run's ingest writes, the windows' counts the load step plans from are those rows' counts, the
    summaries count what was rejected, and a table a piece has nothing for is not written."""
    cfg = cfg.replace(micro_batch_seconds=20)
    t = lambda s: (T0 + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    # A producer's late and early stamps, a blank line, a line cut short, a repeated key.
    land(cfg, [good("a", arrival_ts=t(25)), good("b", arrival_ts=t(-30)), "", '{"source_id": "crm", "natural_key": ',
               good("a", seq=6, arrival_ts=t(59))], minute=T0)
    land(cfg, [good("d", arrival_ts=t(10)), good("e", arrival_ts=t(70)), good("f", arrival_ts=t(200))],
         minute=T0 + timedelta(minutes=1))
    tables = open_tables(spark, cfg)
    tables.ensure()
    names = ("ingested_updates", "rejected_updates", "landed_files")
    versions = [{n: tables.version(n) for n in names}]
    pieces = []
    for start in (T0, T0 + timedelta(minutes=1)):
        pieces.append(jobs.ingest_pieces(spark, cfg, INTERVAL, start, start + timedelta(minutes=1), fresh=True))
        versions.append({n: tables.version(n) for n in names})
    assert [{n: after[n] - before[n] for n in names} for before, after in zip(versions, versions[1:])] == [
        {"ingested_updates": 1, "rejected_updates": 1, "landed_files": 1},
        {"ingested_updates": 1, "rejected_updates": 0, "landed_files": 1}]  # the second piece rejected nothing
    assert [p["batch_counts"] for p in pieces] == [{0: 1, 1: 1, 2: 1}, {3: 2, 5: 1}]
    assert [(p["lines"], p["valid"], p["rejected_by_reason"]) for p in pieces] == [
        (4, 3, {"malformed_json": 1}), (3, 3, {})]
    appended = {name: sorted(read(spark, cfg, name).collect()) for name in names}
    written = {w: n for w, n in read(spark, cfg, "ingested_updates").groupBy("batch_index").count().collect()}
    assert written == {**pieces[0]["batch_counts"], **pieces[1]["batch_counts"]}
    jobs.ingest(spark, cfg, INTERVAL)  # the whole run at once writes the same rows over them
    assert {name: sorted(read(spark, cfg, name).collect()) for name in names} == appended


@pytest.mark.memory_tables
def test_rejection_ceiling_fails_the_run_after_quarantining(spark, cfg):
    land(cfg, [good("1"), "garbage", "more garbage"])
    with pytest.raises(jobs.RejectionCeilingExceeded, match="max_rejected_fraction"):
        jobs.ingest(spark, cfg.replace(max_rejected_fraction=0.5), INTERVAL)
    assert read(spark, cfg, "rejected_updates").count() == 2


@pytest.mark.no_tables
def test_missing_landing_zone_fails_before_any_write(spark, cfg):
    with pytest.raises(LandingError, match="landing_root"):
        jobs.ingest(spark, cfg, INTERVAL)
    assert not cfg.warehouse_path.exists()


def test_interval_must_be_whole_minutes():
    with pytest.raises(ValueError, match="whole minute"):
        Interval(T0 + timedelta(seconds=30), T0 + timedelta(minutes=2))
    with pytest.raises(ValueError, match="after start"):
        Interval(T0, T0)


@pytest.mark.memory_tables
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


@pytest.mark.memory_tables
def test_hostile_lines_are_rejected_not_merged_or_dropped(spark, cfg):
    """Two objects on one line used to load the first and drop the second; two natural keys that
    differ only in invalid UTF-8 bytes used to become one key. A BOM on the first line is fine."""
    path = landing_file(cfg.landing_path, "crm", T0)
    path.parent.mkdir(parents=True, exist_ok=True)
    k_ff = good("KEY", seq=1).replace('"KEY"', '"k\\u00ffx"').encode().replace(b"k\\u00ffx", b"k\xffx")
    k_fe = good("KEY", seq=1).replace('"KEY"', '"k\\u00fex"').encode().replace(b"k\\u00fex", b"k\xfex")
    path.write_bytes(b"\n".join([
        b"\xef\xbb\xbf" + good("bom", seq=1).encode(),
        (good("a", seq=1) + good("b", seq=1)).encode(),
        k_ff, k_fe,
        good("n", seq=1, attributes={"balance": 12.345}).encode(),
        good("\u00a0\u200b", seq=1).encode(),
        good("t", seq=1, event_ts="0000-12-31T23:59:59Z").encode(),
        good("y", seq=1, event_ts="10000-01-01T00:00:00Z").encode(),
        good("obj", seq=1).replace('"obj"', '{"id": 1}').encode(),
        good("s", seq=1, attributes="Oslo").encode(),
    ]) + b"\r\n")
    summary = jobs.ingest(spark, cfg, INTERVAL)
    assert summary["rejected_by_reason"] == {
        "trailing_content": 1, "bad_encoding": 2, "bad_attribute_value": 1, "missing_natural_key": 1,
        "bad_event_ts": 2, "bad_natural_key": 1, "bad_attributes": 1,
    }
    assert summary["valid"] == 1 and summary["lines"] == 10
    jobs.load(spark, cfg, INTERVAL)
    assert [r.natural_key for r in read(spark, cfg, "key_map").collect()] == ["bom"]
    shown = {r.line_number: r.raw_line for r in read(spark, cfg, "rejected_updates").collect()}
    assert "k\\xffx" in shown[3] and "k\\xfex" in shown[4]  # the bytes as they were, visible
    assert jobs.validate(spark, cfg, INTERVAL)["success"]
    # Every Python reader can read every table (years outside 1-9999 broke them).
    for name in ("ingested_updates", "rejected_updates", "outcome_log", "customer_current"):
        read(spark, cfg, name).toPandas()


@pytest.mark.memory_tables
def test_a_hostile_landing_tree_loads_each_line_once(spark, cfg, tmp_path):
    """Copies with near-miss names are not ingested (they doubled every line); directories, FIFOs
    and dangling links with landing names are skipped and reported, not a crash; a source_id with
    a space, quote or % loads (its lines were all rejected as source_mismatch)."""
    import os

    for source in ("crm", "north east", "o'hara", "100%"):
        land(cfg, [good("1", seq=1, source_id=source), good("2", seq=1, source_id=source)], source=source)
    hour = landing_file(cfg.landing_path, "crm", T0).parent
    original = (hour / "updates-20261122T0100.jsonl").read_text()
    for name in ("backup-updates-20261122T0100.jsonl", "copy of updates-20261122T0100.jsonl"):
        (hour / name).write_text(original)
    (hour / "updates-20261122T0101.jsonl").mkdir()
    os.mkfifo(hour / "updates-20261122T0102.jsonl")  # in the interval's hour, not its minutes: not opened
    fifo_in = landing_file(cfg.landing_path, "web", T0 + timedelta(minutes=1))
    fifo_in.parent.mkdir(parents=True)
    os.mkfifo(fifo_in)
    dangling = landing_file(cfg.landing_path, "erp", T0)
    dangling.parent.mkdir(parents=True)
    dangling.symlink_to(tmp_path / "gone")
    summary = jobs.ingest(spark, cfg, INTERVAL)
    assert (summary["files"], summary["lines"], summary["valid"]) == (4, 8, 8)
    assert {s["reason"].split(",")[0] for s in summary["skipped"]} == {
        "not a landing file name (updates-YYYYMMDDTHHMM[SS].jsonl)", "a directory", "a FIFO", "a dangling symbolic link",
    }
    jobs.load(spark, cfg, INTERVAL)
    keys = sorted((r.source_id, r.natural_key) for r in read(spark, cfg, "key_map").collect())
    assert keys == sorted((s, k) for s in ("crm", "north east", "o'hara", "100%") for k in ("1", "2"))
    assert jobs.validate(spark, cfg, INTERVAL)["success"]
    assert "skipped entries" in jobs.format_report(jobs.report(cfg, INTERVAL))


@pytest.mark.memory_tables
def test_update_ids_do_not_depend_on_where_the_landing_zone_is_mounted(spark, cfg, tmp_path):
    """The same files under a root with a space and a % in its path (Spark's file paths are
    URL-encoded, so the root used to stay in every update_id there)."""
    import shutil

    land(cfg, [good("1", seq=1), good("2", seq=2)])
    mounted = tmp_path / "mount point 100%" / "landing"
    shutil.copytree(cfg.landing_path, mounted)
    elsewhere = cfg.replace(warehouse_root=str(tmp_path / "w2"), landing_root=str(mounted), runs_root=str(tmp_path / "r2"))
    for c in (cfg, elsewhere):
        jobs.ingest(spark, c, INTERVAL)
    ids = [sorted(r[0] for r in read(spark, c, "ingested_updates").select("update_id").collect()) for c in (cfg, elsewhere)]
    assert ids[0] == ids[1] and ids[0][0].startswith("source_id=crm/arrival_date=2026-11-22/")


def test_records_of_several_pieces_of_one_partition_are_checked_each_in_its_own_piece():
    """A run the always-on loader ingested in pieces, read again whole: the partition is read once
    from the first piece's start to the last's end, and each record lands in its own range's row,
    its arrival kept in the minutes of the piece that decided that range (a late record of the
    second piece stays in the second piece's first minute)."""
    import json

    from etl.core.model import load_model
    from etl.ingest import check_records

    entity = load_model(ROOT / "tests" / "models" / "kafka" / "accounts.toml").entity()
    spec = entity.input_of("bank")
    t0 = datetime(2026, 11, 24, 8, 0, tzinfo=timezone.utc)
    pieces = [(0, 2, t0, t0 + timedelta(minutes=1)), (2, 5, t0 + timedelta(minutes=1), t0 + timedelta(minutes=3))]
    meta = {("bank.accounts", 0): [(s, e, spec, f"kafka:bank.accounts:0:{s}-{e}", a, b) for s, e, a, b in pieces]}

    def record(offset, seconds):
        line = {"source_id": "bank", "account_id": offset, "op": "upsert", "source_seq": offset,
                "event_ts": t0.isoformat(), "attributes": {"owner": "x", "balance": "1.00"}}
        return {"topic": "bank.accounts", "partition": 0, "offset": offset, "timestamp": t0 + timedelta(seconds=seconds),
                "value": json.dumps(line).encode()}

    rows = list(check_records([record(0, 5), record(1, 50), record(2, 20), record(3, 70), record(4, 200), record(5, 1)],
                              meta, 65536, (), entity))
    lines = [(r["file_name"], r["line_number"], r["arrival_minute"].minute) for r in rows if r["kind"] == "line"]
    assert lines == [("kafka:bank.accounts:0:0-2", 0, 0), ("kafka:bank.accounts:0:0-2", 1, 0),
                     ("kafka:bank.accounts:0:2-5", 2, 1),  # timestamped in the first minute: kept in its piece's
                     ("kafka:bank.accounts:0:2-5", 3, 1), ("kafka:bank.accounts:0:2-5", 4, 2)]  # offset 5: not this read's
    files = [(r["file_name"], r["file_lines"], r["arrival_minute"]) for r in rows if r["kind"] == "file"]
    assert files == [("kafka:bank.accounts:0:0-2", 2, t0), ("kafka:bank.accounts:0:2-5", 3, t0 + timedelta(minutes=1))]

    # Pieces of 10 s (setting piece_seconds): a record's arrival is kept in its 10-second piece,
    # inside the range's; a range the stream decided from a piece starting at 00:25 keeps a record
    # stamped 00:21 at 00:25 (the range's start), not in an earlier piece's 00:20.
    short = [(0, 2, t0 + timedelta(seconds=25), t0 + timedelta(seconds=40)), (2, 5, t0 + timedelta(seconds=40), t0 + timedelta(minutes=3))]
    meta = {("bank.accounts", 0): [(s, e, spec, f"kafka:bank.accounts:0:{s}-{e}", a, b) for s, e, a, b in short]}
    rows = list(check_records([record(0, 21), record(1, 37), record(2, 20), record(3, 59), record(4, 61)], meta, 65536, (),
                              entity, piece_seconds=10))
    assert [(r["line_number"], int((r["arrival_minute"] - t0).total_seconds())) for r in rows if r["kind"] == "line"] == [
        (0, 25), (1, 30), (2, 40), (3, 50), (4, 60)]
