"""Fuzz: whatever lands, every physical line is accounted for exactly once and no two distinct
natural keys (as byte strings) ever share a surrogate key.

Two tiers: the line rules alone (``etl.core.records``, no Spark) over tens of thousands of hostile
lines and hypothesis-drawn bytes; and whole hostile landing trees (``tests/etl/hostile.py``:
names, folders, FIFOs, links, encodings, line shapes, type confusions) through the real ingest
and load, checked line by line against the rules applied directly.
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etl import jobs
from etl.core.interval import Interval
from etl.core.records import MAX_NATURAL_KEY_CHARS, REJECT_REASONS, Reject, check_line, is_blank
from etl.io.tables import read
from tests.etl.hostile import SOURCES, hostile_line, plant

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
MINUTES = 5
RUN = Interval(T0, T0 + timedelta(minutes=MINUTES))
LIMIT = 4096  # max_record_bytes of the fuzz runs: oversized lines occur
PURE_LINES = 40_000
# Whole trees through Spark cost about a minute each: one in `make test`, more in the slow tier
# (ETL_FUZZ_TREES=N; `make test-slow` runs 12 and writes the tally to var/fuzz.json).
TREE_SEEDS = tuple(range(1, 1 + int(os.environ.get("ETL_FUZZ_TREES", "1"))))


def judge(line: bytes, source: str):
    try:
        return check_line(line, source, LIMIT)
    except Reject as exc:
        return exc.reason


def assert_valid_update(u, line: bytes) -> None:
    """What a valid line's update must be: its key exactly as sent, nothing rounded or out of range."""
    sent = json.loads(line.decode("utf-8"), parse_float=Decimal)
    key = sent["natural_key"]
    assert u.natural_key == (str(key) if isinstance(key, int) else key)
    assert u.natural_key.encode("utf-8") and not is_blank(u.natural_key) and len(u.natural_key) <= MAX_NATURAL_KEY_CHARS
    assert 1 <= u.event_ts.year <= 9999 and u.event_ts.utcoffset().total_seconds() == 0
    assert u.attributes["balance"] is None or (u.attributes["balance"] == Decimal(str((sent.get("attributes") or {}).get("balance"))))
    assert 0 <= u.source_seq < 2**63


def test_hostile_lines_one_outcome_each_and_keys_exactly_as_sent():
    rng = random.Random(24)
    seen = {}
    for i in range(PURE_LINES):
        source = rng.choice(SOURCES)
        line = hostile_line(rng, source, T0)
        if line is None or not line.strip(b" \t\r"):
            continue
        got = judge(line, source)
        if isinstance(got, str):
            assert got in REJECT_REASONS
        else:
            assert_valid_update(got, line)
        seen[got if isinstance(got, str) else "valid"] = seen.get(got if isinstance(got, str) else "valid", 0) + 1
    # The generator reaches every kind of outcome the rules have (but source/unknown ones, a fact's and a change event's).
    assert set(seen) >= set(REJECT_REASONS) - {"source_mismatch", "unknown_source", "missing_source_id", "missing_reference", "bad_envelope"} | {"valid"}


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=200))
def test_any_bytes_get_a_reason_or_an_exact_update(raw):
    line = raw.replace(b"\n", b"")
    got = judge(line, "crm")
    if not isinstance(got, str):
        assert_valid_update(got, line)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(["source_id", "natural_key", "op", "source_seq", "event_ts", "arrival_ts", "attributes",
                              "attributes.name", "attributes.balance"]), value=json_values)
def test_a_type_confusion_in_any_field_is_rejected_or_exact(field, value):
    rec = {"source_id": "crm", "natural_key": "1", "op": "upsert", "source_seq": 5,
           "event_ts": "2026-11-22T01:00:01Z", "attributes": {"name": "A", "balance": "1.50"}}
    if field.startswith("attributes."):
        rec["attributes"][field.split(".")[1]] = value
    else:
        rec[field] = value
    line = json.dumps(rec).encode()
    got = judge(line, "crm")
    if not isinstance(got, str):
        assert_valid_update(got, line)


@pytest.mark.parametrize("seed", TREE_SEEDS)
def test_a_hostile_landing_tree_every_line_once_and_no_merged_keys(spark, cfg, seed):
    cfg = cfg.replace(max_record_bytes=LIMIT)
    tree = plant(cfg.landing_path, T0, MINUTES, seed)
    summary = jobs.ingest(spark, cfg, RUN)

    # Every real landing file read, nothing else; every non-data entry reported.
    assert summary["files"] == len(tree.files)
    assert tree.skipped <= {s["name"] for s in summary["skipped"]}
    ingested = {r.update_id: r for r in read(spark, cfg, "ingested_updates").collect()}
    rejected = {r.update_id: r for r in read(spark, cfg, "rejected_updates").collect()}
    assert not set(ingested) & set(rejected)
    expected_ids, blank = set(), 0
    for name, lines in tree.files.items():
        source = name.split("/")[0][len("source_id="):]
        for number, line in enumerate(lines, 1):
            uid = f"{name}:{number:09d}"
            if line is None:
                blank += 1
                assert uid not in ingested and uid not in rejected
                continue
            expected_ids.add(uid)
            want = judge(line, source)
            if isinstance(want, str):
                assert rejected[uid].reason == want, (uid, line)
            else:
                got = ingested[uid]
                assert (got.source_id, got.natural_key, got.op, got.source_seq, got.balance) == (
                    want.source_id, want.natural_key, want.op, want.source_seq, want.attributes["balance"]), (uid, line)
    assert set(ingested) | set(rejected) == expected_ids  # each physical line once, none from elsewhere
    assert summary["lines"] == len(expected_ids) and summary["blank_lines"] == blank
    assert {r.reason for r in rejected.values()} <= set(REJECT_REASONS)

    jobs.load(spark, cfg, RUN)
    km = [(r.source_id.encode(), r.natural_key.encode(), r.surrogate_key) for r in read(spark, cfg, "key_map").collect()]
    assert len({(s, k) for s, k, _ in km}) == len(km) == len({sk for _, _, sk in km})  # one key each way
    valid_keys = {(r.source_id.encode(), r.natural_key.encode()) for r in ingested.values()}
    assert {(s, k) for s, k, _ in km} == valid_keys
    assert jobs.validate(spark, cfg, RUN)["success"]
    FUZZ_TALLY.append({"seed": seed, "lines": tree.lines, "files": len(tree.files), "skipped": len(tree.skipped),
                       "ingested": len(ingested), "rejected": len(rejected), "blank": blank, "keys": len(km)})


FUZZ_TALLY: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def fuzz_report():
    yield
    if os.environ.get("ETL_FUZZ_REPORT") and FUZZ_TALLY:
        out = Path(os.environ["ETL_FUZZ_REPORT"])
        out.parent.mkdir(parents=True, exist_ok=True)
        totals = {k: sum(t[k] for t in FUZZ_TALLY) for k in ("lines", "files", "skipped", "ingested", "rejected", "blank", "keys")}
        out.write_text(json.dumps({"trees": len(FUZZ_TALLY), **totals, "lines_lost_or_doubled": 0,
                                   "keys_merged": 0, "per_tree": FUZZ_TALLY}, indent=1))
