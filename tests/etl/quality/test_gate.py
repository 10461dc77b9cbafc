"""The quality gate passes on a correct load and fails, naming the expectation, on a broken one.
The loads' tables live in the test process's memory: the gate's claims are not Delta's."""

from datetime import datetime, timedelta, timezone

import pytest

from etl import jobs
from etl.core.interval import Interval
from etl.io.tables import open_tables, read
from etl.quality.gate import data_docs_index
from tests.helpers import good, land

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
RUN = Interval(T0, T0 + timedelta(minutes=1))
pytestmark = pytest.mark.memory_tables


@pytest.fixture
def loaded(spark, cfg):
    land(cfg, [good("1", seq=1), good("2", seq=1), good("1", seq=2, attributes={"city": "Lima"}), "not json"])
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN)
    return cfg


def failed_checks(summary):
    return {(c["table"], c["expectation"]) for c in summary["checks"] if not c["success"]}


def test_gate_passes_and_builds_data_docs(spark, loaded):
    summary = jobs.validate(spark, loaded, RUN)
    assert summary["success"] and failed_checks(summary) == set()
    assert {c["table"] for c in summary["checks"]} == {"key_map", "customer_current", "run_conservation"}
    assert all(r["expected"] == r["actual"] for r in summary["conservation"])
    assert data_docs_index(loaded).is_file()
    assert jobs.report(loaded, RUN)["validation"] == "passed"
    # GX persists every frame it validates: left cached, a later read of the table in this session
    # would be answered from the cache, blind to what another driver committed since.
    cache = spark._jsparkSession.sharedState().cacheManager()
    for name in ("key_map", "customer_current"):
        assert not cache.lookupCachedData(read(spark, loaded, name)._jdf).isDefined(), name


def test_gate_fails_when_a_surrogate_key_is_given_twice(spark, loaded):
    from pyspark.sql import functions as F

    km = read(spark, loaded, "key_map")
    # Another natural key with the surrogate key of key 1.
    open_tables(spark, loaded).append(km.where("natural_key = '1'").withColumn("natural_key", F.lit("99")), "key_map")
    with pytest.raises(jobs.ValidationFailed, match="expect_column_values_to_be_unique"):
        jobs.validate(spark, loaded, RUN)
    summary = jobs.read_summary(loaded, RUN, "validate")
    assert ("key_map", "expect_column_values_to_be_unique") in failed_checks(summary)


def test_gate_fails_when_an_outcome_is_lost(spark, loaded):
    # Lose the logged outcome of one update: updates in no longer equal the sum of outcomes.
    from pyspark.sql import functions as F

    tables = open_tables(spark, loaded)
    lost = tables.read("batch_ledger").withColumn("outcomes", F.expr("filter(outcomes, o -> o.natural_key != '2')"))
    tables.replace_where(lost.localCheckpoint(), "batch_ledger", "true")
    summary = jobs.validate(spark, loaded, RUN, raise_on_failure=False)
    assert not summary["success"]
    assert failed_checks(summary) == {("run_conservation", "expect_column_pair_values_to_be_equal")}


def test_gx_files_cut_short_by_a_kill_are_rebuilt_from_code(spark, loaded):
    """A kill during GX's plain file writes leaves its project files truncated; the next
    validation rebuilds the project from expectations/ instead of failing until repaired."""
    jobs.validate(spark, loaded, RUN)
    project = loaded.gx_path / "gx"
    yml = project / "great_expectations.yml"
    yml.write_text(yml.read_text()[: len(yml.read_text()) // 2])
    for store in ("checkpoints", "expectations", "validation_definitions"):
        for f in (project / store).glob("*.json"):
            f.write_text(f.read_text()[:20])
    summary = jobs.validate(spark, loaded, RUN)
    assert summary["success"] and data_docs_index(loaded).is_file()
    assert list(loaded.gx_path.glob("gx.broken-*/great_expectations.yml"))  # kept for a post-mortem

    results = sorted((project / "uncommitted" / "validations").rglob("*.json"))
    assert results
    results[0].write_text('{"cut')  # a stored result cut short: the history goes too
    assert jobs.validate(spark, loaded, RUN)["success"]
    yml.write_text("")
    assert jobs.validate(spark, loaded, RUN)["success"]
