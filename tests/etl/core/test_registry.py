"""The strategy registry: each strategy declared once, and every place that names strategies
asks it (configuration, CLI, DAG parameter, simulator, benchmark)."""

import pytest

from etl.core import registry
from etl.core.config import ConfigError, EtlConfig, strategy_settings_schema
from etl.core.policy import Granularity  # noqa: F401  (the policy the block-granular ones plan with)


def test_names_are_declared_once_and_in_the_product_s_order():
    assert registry.NAMES == ("native", "meshjoin", "partitioned-range", "partitioned-hash")
    assert len(set(registry.NAMES)) == len(registry.NAMES)


def test_an_unknown_name_is_refused_naming_the_valid_ones():
    with pytest.raises(ConfigError, match="valid values are native, meshjoin, partitioned-range, partitioned-hash"):
        registry.spec("nativ")
    with pytest.raises(ConfigError, match="setting 'strategy'"):
        registry.spec(None, setting="strategy")


def test_each_strategy_declares_its_layout_granularity_and_settings():
    table = {s.name: (s.layout, s.new_layout, s.block_batches) for s in registry.SPECS}
    assert table == {
        "native": (None, "range", False),
        "meshjoin": (None, "range", False),
        "partitioned-range": ("range", "range", True),
        "partitioned-hash": ("hash", "hash", True),
    }
    assert registry.spec("meshjoin").settings == ("k", "d")
    assert "max_wait_s" in registry.spec("partitioned-hash").settings


def test_a_strategy_needing_another_layout_is_refused_with_the_relayout_command():
    registry.check_layout("native", "hash")  # any layout will do
    with pytest.raises(ConfigError, match="etl maintain --steps relayout --join-strategy partitioned-range"):
        registry.check_layout("partitioned-range", "hash")


def test_the_mechanism_is_found_by_its_declared_path():
    from etl.strategies.base import JoinStrategy

    for s in registry.SPECS:
        assert issubclass(s.mechanism_class(), JoinStrategy), s.name


def test_every_place_that_lists_strategies_asks_the_registry():
    from etl.entrypoints.cli import build_parser
    from etl.simulator.engine import STRATEGIES as SIMULATED

    def strategy_choices(parser):
        for action in parser._actions:
            if action.option_strings and {"--join-strategy", "--strategy"} & set(action.option_strings):
                yield tuple(action.choices)
            for sub in (getattr(action, "choices", None) or {}).values() if isinstance(action.choices, dict) else ():
                yield from strategy_choices(sub)

    found = list(strategy_choices(build_parser()))
    assert len(found) > 5 and set(found) == {registry.NAMES}  # every command's, and `simulate run --strategy`
    assert set(SIMULATED) == set(registry.NAMES)  # the simulator models each strategy
    settings = strategy_settings_schema()["properties"]
    assert set(settings) == {n for s in registry.SPECS for n in s.settings}
    EtlConfig(join_strategy=registry.NAMES[-1])  # the configuration validates against it
