"""The ledger's one read per load call (``Ledger.facts``): the state, the last batch that logged
updates and the rows of the run the lock is held for, as the separate reads it replaced give them."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from etl.io.runs import RunOwnedByAnotherStrategy, check_owner, run_finished, run_owner
from etl.io.tables import open_tables
from etl.load.ledger import Ledger
from etl.load.results import FLUSH_STEP, NO_BATCH, Step
from etl.strategies import JoinStats

A, B = "20261122T0100-20261122T0110", "20261122T0110-20261122T0120"


def step(run_key, batch_index, batch_seq, next_key, updates_in=0, new=0, strategy="native"):
    counts = {"matched": 0, "new": new, "duplicate": 0, "stale": 0}
    return Step(run_key, batch_index, batch_seq, strategy, 0.0, 1.0, next_key, updates_in=updates_in, counts=counts)


def separate_reads(ledger: Ledger, run_key: str):
    """What the loader read before, one Spark job each."""
    t = ledger.table()
    state = t.agg(F.max("batch_seq"), F.max("next_surrogate_key")).first()
    logged = t.where((F.col("batch_seq") > 0) & (F.col("updates_in") > 0)).orderBy(F.col("batch_seq").desc()).limit(1).collect()
    rows = [r.asDict() for r in t.where(f"run_key = '{run_key}'").collect()]
    return (int(state[0] or 0), int(state[1] or 1)), (logged[0].asDict() if logged else None), rows


@pytest.mark.memory_tables
def test_one_read_gives_the_state_the_last_logged_batch_and_the_run_s_rows(spark, cfg):
    tables = open_tables(spark, cfg)
    ledger = Ledger(tables)
    assert ledger.facts(A) == (A, (0, 1), None, [])  # an empty warehouse

    for s in (step(A, 0, 1, 1, updates_in=5, new=3), step(A, 1, NO_BATCH, 4),  # a step that released nothing
              step(B, 0, 2, 4, updates_in=2, new=2),
              step(B, 1, 3, 6, updates_in=0)):  # a batch of nothing but rejected lines' windows: no updates
        ledger.record(s, JoinStats())

    for run_key in (A, B, "20261122T0120-20261122T0130"):
        fresh = Ledger(tables)
        facts = fresh.facts(run_key)
        state, last, rows = separate_reads(fresh, run_key)
        assert facts.state == fresh.state() == state == (3, 6)
        assert facts.last_logged == fresh.last_logged() == last
        assert last["batch_seq"] == 2  # not the later batch without updates, nor a step without a batch
        assert sorted(facts.run_rows, key=lambda r: r["batch_index"]) == sorted(rows, key=lambda r: r["batch_index"])
        assert fresh.rows(run_key) == facts.run_rows


@pytest.mark.memory_tables
def test_the_run_s_rows_are_read_again_after_a_row_is_appended_and_say_its_owner(spark, cfg):
    tables = open_tables(spark, cfg)
    ledger = Ledger(tables)
    ledger.facts(A)
    assert ledger.rows(A) == [] and run_owner(spark, cfg, A, ledger.rows(A)) is None
    ledger.record(step(A, 0, 1, 1, updates_in=4, new=4, strategy="meshjoin"), JoinStats())
    assert [r["batch_seq"] for r in ledger.rows(A)] == [1]
    assert ledger.state() == (1, 5) and ledger.last_logged()["batch_seq"] == 1
    rows = ledger.rows(A)
    assert run_owner(spark, cfg, A, rows) == run_owner(spark, cfg, A) == "meshjoin"
    assert run_finished(spark, cfg, A, rows) is run_finished(spark, cfg, A) is False
    with pytest.raises(RunOwnedByAnotherStrategy, match="was started with join strategy 'meshjoin'"):
        check_owner(spark, cfg, A, "native", rows)

    ledger.record(step(A, FLUSH_STEP, NO_BATCH, 5, strategy="meshjoin"), JoinStats())
    rows = ledger.rows(A)
    assert run_finished(spark, cfg, A, rows) is run_finished(spark, cfg, A) is True
    assert check_owner(spark, cfg, A, "native", rows) == "meshjoin"  # finished: any strategy may rerun it


@pytest.mark.memory_tables
def test_a_loader_taking_the_lock_again_sees_what_another_loader_appended_meanwhile(spark, cfg):
    tables = open_tables(spark, cfg)
    mine, other = Ledger(tables), Ledger(tables)
    mine.facts(A)
    assert mine.rows(A) == [] and mine.state() == (0, 1)
    other.record(step(A, 0, 1, 1, updates_in=3, new=3), JoinStats())  # another loader, between two locks of mine

    mine.forget()  # the lock taken again
    assert mine.state() == (1, 4)  # the narrow read, as the always-on loader's steady call makes
    assert [r["batch_seq"] for r in mine.rows(A)] == [1]
    mine.facts(A)
    assert mine.last_logged()["batch_seq"] == 1 and [r["batch_seq"] for r in mine.rows(A)] == [1]
