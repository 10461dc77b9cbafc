"""The run report (etl.jobs.report and format_report) from the stage summaries, without Spark."""

from datetime import timedelta

from etl import jobs
from etl.core.interval import Interval
from tests.helpers import T0

RUN = Interval(T0, T0 + timedelta(minutes=5))


def test_the_report_says_the_clock_skew_it_left_out_of_the_delays(cfg):
    """A load whose producer stamped 3 updates after their batch's commit: the delays are the
    others', and the report says how many were left out (it used to print -9,365,301 s)."""
    jobs.write_summary(cfg, RUN, "load", {"strategy": "native", "outcomes": {"new": 100}, "keys_allocated": 100,
                                          "batches_committed": 1, "batches_already_done": 0,
                                          "delay_avg_s": 12.34, "delay_p99_s": 40.06, "clock_skew": 3})
    lines = jobs.format_report(jobs.report(cfg, RUN)).splitlines()
    assert "  production delay    logged avg 12.3 s, p99 40.1 s (3 updates with arrival after commit: clock skew, left out)" in lines
    jobs.write_summary(cfg, RUN, "load", {"strategy": "native", "delay_avg_s": 12.34, "delay_p99_s": 40.06})
    lines = jobs.format_report(jobs.report(cfg, RUN)).splitlines()
    assert "  production delay    logged avg 12.3 s, p99 40.1 s" in lines
    assert not any("visible" in ln for ln in lines)  # a summary from before the visible delay: not said


def test_the_report_says_the_logged_and_the_visible_delay(cfg):
    """Issue 46: beside the logged delay (to the write-ahead commit) the visible one (to the entity
    table's MERGE), and how many batches are not applied yet when some wait."""
    jobs.write_summary(cfg, RUN, "load", {"strategy": "native", "delay_avg_s": 2.0, "delay_p99_s": 4.0,
                                          "visible_delay_avg_s": 32.0, "visible_delay_p99_s": 34.0})
    lines = jobs.format_report(jobs.report(cfg, RUN)).splitlines()
    at = lines.index("  production delay    logged avg 2.0 s, p99 4.0 s")
    assert lines[at + 1] == "                      visible avg 32.0 s, p99 34.0 s"
    jobs.write_summary(cfg, RUN, "load", {"strategy": "native", "delay_avg_s": 2.0, "delay_p99_s": 4.0,
                                          "batches_visible_unknown": 3})
    assert ("                      visible not measured (3 batches without a visible time: not applied yet, or applied by a "
            "restart's recovery)") in jobs.format_report(
        jobs.report(cfg, RUN)).splitlines()


def test_the_report_says_kafka_records_lost_apart_from_the_landing_zone_s_noise(cfg):
    """Offsets retention deleted before any run read them are a loss, said as one, not listed
    among the landing zone's stray files; partitions left to the next run are Kafka's too."""
    jobs.write_summary(cfg, RUN, "ingest", {"lines": 4, "rejected": 0, "kafka_records_lost": 4, "skipped": [
        {"name": "kafka:bank.accounts:0:13-17", "reason": "4 records deleted by the broker (retention) before any run read them: lost"},
        {"name": "kafka:bank.accounts:1", "reason": "not read by run x, decided before it appeared: read by the next run"},
        {"name": "source_id=bank/copy of updates-20261122T1000.jsonl", "reason": "not a landing file name"}]})
    text = jobs.format_report(jobs.report(cfg, RUN))
    assert "  KAFKA RECORDS LOST  4 (deleted by the broker before any run read them)" in text
    assert "  skipped entries     2 of Kafka, not read by this run:" in text
    assert "  skipped entries     1 in the landing zone, not landing files (not read):" in text


def test_the_report_says_sequence_conflicts_apart_from_the_duplicates(cfg):
    """Other content at a log position already seen is not applied: the report says how many,
    instead of counting them with the redeliveries (the second review)."""
    jobs.write_summary(cfg, RUN, "load", {"strategy": "native", "outcomes": {"duplicate": 3}, "sequence_conflicts": 2})
    assert ("  SEQUENCE CONFLICTS  2 duplicates at a log position already seen, with other content: not applied "
            "(duplicates_quarantine, reason sequence_conflict)") in jobs.format_report(jobs.report(cfg, RUN)).splitlines()


def test_the_report_counts_facts_naming_deleted_members_and_says_a_strict_gate_failed_on_them(cfg):
    """A strict site's gate failed on the deleted members alone: the count and the failure are
    said, no warning is (issue 45 item 8; the warning of the default is tests/etl/test_facts.py's)."""
    not_null = {"table": "orders_fact_references", "expectation": "expect_column_values_to_not_be_null",
                "kwargs": {"column": "deleted"}, "success": True, "severity": "critical"}  # critical whatever the setting
    deleted = {"table": "orders_fact_references", "expectation": "expect_column_values_to_be_between",
               "kwargs": {"column": "deleted", "min_value": 0, "max_value": 0}, "success": False, "severity": "critical"}
    jobs.write_summary(cfg, RUN, "validate", {"success": False, "checks": [not_null, deleted],
                                              "references_deleted": {"customer_sk": 3, "product_sk": 0}})
    lines = jobs.format_report(jobs.report(cfg, RUN), cfg).splitlines()  # strict as the gate ran, whatever the setting now
    assert [ln for ln in lines if "deleted members" in ln] == [(
        "  facts referencing deleted members  customer_sk=3 (the run's live facts whose member was deleted at their "
        "event time, flagged <reference>__deleted; strict_deleted_references: the gate fails)")]
    assert "  validation          failed" in lines and not any("WARNING" in ln for ln in lines)
    # The default: the same count under a warning.
    jobs.write_summary(cfg, RUN, "validate", {"success": True, "checks": [not_null, {**deleted, "severity": "warning"}],
                                              "references_deleted": {"customer_sk": 3, "product_sk": 0}})
    lines = jobs.format_report(jobs.report(cfg, RUN), cfg.replace(strict_deleted_references=True)).splitlines()
    assert [ln for ln in lines if "deleted members" in ln] == [(
        "  facts referencing deleted members  customer_sk=3 (the run's live facts whose member was deleted at their "
        "event time, flagged <reference>__deleted; a warning unless strict_deleted_references)")]
    assert "  validation          passed, 1 warning" in lines


def test_a_run_is_read_again_only_with_the_piece_length_it_was_ingested_with(cfg):
    """A line stamped outside its landing file's piece keeps its window only under the same
    ``piece_seconds``, and the ledger knows the run's batches by window: a rerun or a backfill
    under another piece length is refused, naming the one to use (issue 46)."""
    import pytest

    from etl.core.errors import ConfigError

    jobs.check_piece_seconds(cfg, RUN)  # never ingested
    jobs.write_summary(cfg, RUN, "ingest", {"lines": 4})  # ingested by a version that did not record it
    jobs.check_piece_seconds(cfg.replace(piece_seconds=5), RUN)
    jobs.write_summary(cfg, RUN, "ingest", {"lines": 4, "piece_seconds": 60})
    jobs.check_piece_seconds(cfg, RUN)
    with pytest.raises(ConfigError, match=r"ingested with piece_seconds = 60, not 5: rerun it with --set piece_seconds=60"):
        jobs.check_piece_seconds(cfg.replace(piece_seconds=5), RUN)
