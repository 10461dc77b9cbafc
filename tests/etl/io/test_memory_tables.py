"""The two implementations of the table handle do the same to a table: append, replace_where
(refusing a row outside its predicate), delete_where, and a view over the ledger, compared as
whole frames (the MERGEs: tests/etl/load/test_apply.py). The in-memory one is for tests only:
the command line refuses it."""

from datetime import datetime, timedelta, timezone

import pytest
from chispa import assert_df_equality

from etl.entrypoints.cli import EXIT_CONFIG, main
from etl.io import memory_tables
from etl.io.tables import MissingTable, open_tables
from warehouse.schemas import TABLES

T1 = datetime(2026, 11, 22, 1, 0, 1)
MINUTE = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)


@pytest.fixture
def both(spark, cfg, tmp_path):
    out = {}
    for store in ("delta", "memory"):
        c = cfg.replace(table_store=store, warehouse_root=str(tmp_path / store))
        out[store] = open_tables(spark, c)
        out[store].ensure()
    yield out
    memory_tables.forget_under(str(tmp_path))


def rejected(spark, run_key, *ids, at=T1):
    return spark.createDataFrame([(run_key, f"u{i}", "crm", "f.jsonl", i, "malformed_json", "{", at, None) for i in ids],
                                 TABLES["rejected_updates"].schema)


def micros(t: datetime) -> int:
    return int(t.timestamp() * 1e6)


def test_appends_replacements_and_deletes_leave_the_same_rows_in_both(spark, both):
    for tables in both.values():
        tables.append(rejected(spark, "r1", 1, 2), "rejected_updates")
        tables.append(rejected(spark, "r2", 3), "rejected_updates")
        tables.replace_where(rejected(spark, "r1", 4), "rejected_updates", "run_key = 'r1'")
        with pytest.raises(Exception, match="(?i)replace|predicate|does not satisfy|DELTA_REPLACE_WHERE"):
            tables.replace_where(rejected(spark, "r3", 5), "rejected_updates", "run_key = 'r1'")
        tables.append(rejected(spark, "r4", 6, 7), "rejected_updates")
        tables.delete_where("rejected_updates", "run_key = 'r4' AND update_id = 'u6'")
        # Pieces of a run written over, as the always-on loader's ingest writes them (etl.jobs.
        # ingest_pieces): ranges of ordinary columns inside the run's partition, the rest kept.
        second = MINUTE + timedelta(minutes=1)
        tables.append(rejected(spark, "r5", 8, at=MINUTE), "rejected_updates")
        tables.append(rejected(spark, "r5", 9, at=second), "rejected_updates")
        tables.replace_where(rejected(spark, "r5", 10, at=second), "rejected_updates",
                             f"run_key = 'r5' AND unix_micros(arrival_minute) >= {micros(second)} "
                             f"AND unix_micros(arrival_minute) < {micros(second + timedelta(minutes=1))}")
        tables.replace_where(rejected(spark, "r5", 11, at=second), "rejected_updates",
                             "run_key = 'r5' AND line_number >= 10 AND line_number < 12")
    got = {store: t.read("rejected_updates") for store, t in both.items()}
    assert sorted(r.update_id for r in got["memory"].collect()) == ["u11", "u3", "u4", "u7", "u8"]
    assert_df_equality(got["memory"], got["delta"], ignore_row_order=True, ignore_nullable=True)


def test_a_view_reads_the_same_from_both_and_only_the_memory_one_is_empty_of_files(spark, both, tmp_path):
    for tables in both.values():
        assert tables.read("join_metrics").count() == 0 and tables.stored("outcome_log") is None
        assert not tables.holds_keys()
    assert (tmp_path / "delta" / "key_map").is_dir() and not (tmp_path / "memory" / "key_map").exists()
    with pytest.raises(MissingTable):
        open_tables(spark, both["memory"].cfg.replace(warehouse_root=str(tmp_path / "elsewhere"))).read("key_map")


def test_the_command_line_refuses_tables_that_would_die_with_its_process(capsys):
    assert main(["init", "--set", "table_store=memory"]) == EXIT_CONFIG
    assert "table_store" in capsys.readouterr().err
