"""Property: whatever lands, ingestion never crashes and never loses a line.

Every non-blank line ends up exactly once in ingested_updates or in rejected_updates, and every
rejected line has a known reason.
"""

import json
from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etl import jobs
from etl.ingest import REJECT_REASONS, Interval
from etl.tables import read
from tests.etl.test_ingest import good, land

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
RUN = Interval(T0, T0 + timedelta(minutes=1))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
field_names = st.sampled_from(["source_id", "natural_key", "op", "source_seq", "event_ts", "arrival_ts", "attributes"])


@st.composite
def landed_line(draw):
    kind = draw(st.sampled_from(["good", "mutated", "garbage", "json"]))
    if kind == "good":
        return good(str(draw(st.integers(0, 50))), seq=draw(st.integers(0, 10**6)))
    if kind == "mutated":  # a good record with one field replaced or removed
        rec = json.loads(good("1"))
        name = draw(field_names)
        if draw(st.booleans()):
            rec.pop(name)
        else:
            rec[name] = draw(json_values)
        return json.dumps(rec)
    if kind == "json":
        return json.dumps(draw(json_values))
    return draw(st.text(min_size=1, max_size=60).filter(lambda t: "\n" not in t and "\r" not in t and t.strip()))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(landed_line(), min_size=1, max_size=25))
def test_ingestion_never_crashes_and_never_loses_a_line(spark, cfg, lines):
    land(cfg, lines)  # replaces the file of the same minute each example
    summary = jobs.ingest(spark, cfg, RUN)
    valid = read(spark, cfg, "ingested_updates").where(f"run_key = '{RUN.run_key}'")
    rejected = read(spark, cfg, "rejected_updates").where(f"run_key = '{RUN.run_key}'")
    ids = [r[0] for r in valid.select("update_id").union(rejected.select("update_id")).collect()]
    assert len(ids) == len(set(ids)) == len(lines) == summary["lines"]
    assert {r[0] for r in rejected.select("reason").distinct().collect()} <= set(REJECT_REASONS)
