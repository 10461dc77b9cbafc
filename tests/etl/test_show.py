"""`etl show`: the tables after a load, a run's rows, a filter, a limit; a user's mistakes named."""

from __future__ import annotations

import json
from datetime import timedelta
from unittest import mock

import pytest

from etl import jobs
from etl.core.config import ConfigError
from etl.core.interval import Interval
from etl.entrypoints.cli import build_parser
from etl.load.protocol import CommitProtocol
from etl.show import format_rows, json_lines, listing, show
from tests.helpers import T0, good, land

RUN = Interval(T0, T0 + timedelta(minutes=2))


def test_rows_print_as_a_table_cut_to_the_cell_width_or_as_json_lines():
    text = format_rows(["natural_key", "raw_line"], [("1", "x" * 100), ("2", None)], more=True)
    head, rule, first, second, tail = text.splitlines()
    assert head.split(" | ") == ["natural_key", "raw_line"] and set(rule) <= {"-", "+"}
    assert first.endswith("x" * 37 + "...") and second.endswith("NULL")
    assert tail == "(2 rows; more with a higher --limit)"
    from pyspark.sql import Row

    nested = Row(run_key="r", outcomes=[Row(natural_key="1", outcome="new")], committed=None)
    assert [json.loads(ln) for ln in json_lines([nested]).splitlines()] == [
        {"run_key": "r", "outcomes": [{"natural_key": "1", "outcome": "new"}], "committed": None}]


def test_the_command_line_takes_a_name_a_run_a_condition_a_limit_and_columns():
    args = build_parser().parse_args(["show", "outcome_log", "--run", RUN.run_key, "--where", "outcome = 'new'",
                                      "--limit", "5", "--columns", "natural_key,outcome", "--json"])
    assert (args.name, args.run, args.where, args.limit, args.columns, args.json) == (
        "outcome_log", RUN.run_key, "outcome = 'new'", 5, "natural_key,outcome", True)
    assert build_parser().parse_args(["show"]).name is None  # the listing


@pytest.mark.memory_tables
def test_after_a_load_show_prints_a_run_s_outcomes_rejects_and_keys(spark, cfg):
    with pytest.raises(ConfigError, match="no key_map yet: run etl init"):
        show(spark, cfg.replace(warehouse_root=str(cfg.warehouse_path / "elsewhere")), "key_map")
    land(cfg, [good("1", seq=1), good("2", seq=1), good("1", seq=2, attributes={"name": "B"}), "{not json",
               good("3", attributes={"balance": "lots"})])
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN)

    text = show(spark, cfg, "outcome_log", RUN.run_key, "outcome = 'new'", columns=("natural_key", "outcome"))
    assert sorted(ln.split(" | ")[0].strip() for ln in text.splitlines()[2:-1]) == ["1", "2"]
    rejects = show(spark, cfg, "rejected_updates", RUN.run_key, columns=("line_number", "reason", "reason_detail"), as_json=True)
    assert sorted((r["line_number"], r["reason"], r["reason_detail"]) for r in map(json.loads, rejects.splitlines())) == [
        (4, "malformed_json", None), (5, "bad_attribute_type", "attributes.balance")]
    assert show(spark, cfg, "key_map", limit=1).splitlines()[-1] == "(1 rows; more with a higher --limit)"
    assert "customer_current" in listing(spark, cfg) and "applied_changes" in listing(spark, cfg)

    with pytest.raises(ConfigError, match="'custmer_current' is no table or view of entity customer: key_map, customer_current"):
        show(spark, cfg, "custmer_current")
    with pytest.raises(ConfigError, match="key_map has no run_key: --run filters ingested_updates"):
        show(spark, cfg, "key_map", run_key=RUN.run_key)
    with pytest.raises(ConfigError, match="etl show customer_current: .*ctiy"):
        show(spark, cfg, "customer_current", where="ctiy = 'Oslo'")
    with pytest.raises(ConfigError, match="--limit -1: must be 0 or more"):
        show(spark, cfg, "key_map", limit=-1)

    # --fresh (issue 46): a later run's batch logged and not applied yet, as a load killed after its
    # write-ahead commit leaves it: the table read fresh has it merged over it, the table not yet.
    later = Interval(RUN.end, RUN.end + timedelta(minutes=1))
    stamps = {"event_ts": "2026-11-22T01:02:01Z", "arrival_ts": "2026-11-22T01:02:02Z"}
    land(cfg, [good("1", seq=3, attributes={"name": "C"}, **stamps), good("4", seq=1, **stamps)], minute=RUN.end)
    jobs.ingest(spark, cfg, later)
    with mock.patch.object(CommitProtocol, "apply_tail", lambda self: None):
        jobs.load(spark, cfg.replace(apply_interval_seconds=3600), later)

    def names(**fresh):
        text = show(spark, cfg, "customer_current", columns=("natural_key", "name"), as_json=True, **fresh)
        return sorted((r["natural_key"], r["name"]) for r in map(json.loads, text.splitlines()))

    assert names() == [("1", "B"), ("2", "A")]
    assert names(fresh=True) == [("1", "C"), ("2", "A"), ("4", "A")]
    four = dict(columns=("natural_key", "surrogate_key"), where="natural_key = '4'", as_json=True)
    assert show(spark, cfg, "key_map", **four) == ""  # not applied yet
    assert [json.loads(ln)["natural_key"] for ln in show(spark, cfg, "key_map", fresh=True, **four).splitlines()] == ["4"]
    with pytest.raises(ConfigError, match="--fresh reads customer_current or key_map .* not outcome_log"):
        show(spark, cfg, "outcome_log", fresh=True)
