"""The contract every strategy keeps (DESIGN.md §3): on the same data, each one's warehouse
equals the reference join's decisions and every other strategy's, up to key numbering."""

from etl.core import registry
from etl.io.tables import read
from etl.load.results import NO_BATCH
from tests.helpers import SEEDED_SECOND as SECOND
from tests.helpers import assert_equals_oracle, assert_same_warehouse


def test_every_strategy_gives_the_reference_join_s_warehouse(spark, loaded):
    assert set(loaded) == set(registry.NAMES)
    for strategy, cfg in loaded.items():
        assert_equals_oracle(spark, cfg)
        if strategy != "native":
            assert_same_warehouse(spark, loaded["native"], cfg)


def commits(cfg) -> dict[str, int]:
    """Delta commits so far per table directory of the warehouse (commit files in its log)."""
    return {log.parent.name: len(list(log.glob("*.json"))) for log in cfg.warehouse_path.glob("*/_delta_log")}


def test_every_strategy_commits_what_the_protocol_says(spark, seeded, loaded):
    """A released batch is three commits (its ledger row with its outcomes, the key_map MERGE, the
    customer_current MERGE; docs/decisions/commit-protocol.md), a step that releases nothing one
    (its ledger row), whatever the strategy: the partitioned join's wait buffer writes nothing.
    Counted from the tables' logs: any other commit fails this."""
    empty_steps = 0
    for strategy, cfg in loaded.items():
        before = commits(seeded[registry.spec(strategy).new_layout])
        made = {t: n - before.get(t, 0) for t, n in commits(cfg).items() if n != before.get(t, 0)}
        steps = read(spark, cfg, "batch_ledger").where(f"run_key = '{SECOND.run_key}'").select("batch_seq").collect()
        released = sum(1 for r in steps if r.batch_seq != NO_BATCH)
        assert released > 0, strategy
        empty_steps += len(steps) - released
        expected = {"batch_ledger": len(steps), "key_map": released, "customer_current": released}
        assert made == expected, strategy
    assert empty_steps > 0  # both kinds of step were met
