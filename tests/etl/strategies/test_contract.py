"""The contract every strategy keeps (DESIGN.md §3): on the same data, each one's warehouse
equals the reference join's decisions and every other strategy's, up to key numbering."""

from etl.core import registry
from tests.helpers import assert_equals_oracle, assert_same_warehouse


def test_every_strategy_gives_the_reference_join_s_warehouse(spark, loaded):
    assert set(loaded) == set(registry.NAMES)
    for strategy, cfg in loaded.items():
        assert_equals_oracle(spark, cfg)
        if strategy != "native":
            assert_same_warehouse(spark, loaded["native"], cfg)
