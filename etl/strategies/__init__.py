"""Join strategies behind one interface (DESIGN.md §4). ``get_strategy`` is the only switch."""

from __future__ import annotations

from etl.config import JOIN_STRATEGIES, ConfigError
from etl.strategies.base import JoinStats, JoinStrategy


def get_strategy(name: str, spark, cfg, layout) -> JoinStrategy:
    if name not in JOIN_STRATEGIES:
        raise ConfigError(f"setting 'join_strategy' = {name!r}: unknown; valid values are {', '.join(JOIN_STRATEGIES)}")
    if name == "native":
        from etl.strategies.native import NativeJoin

        return NativeJoin(spark, cfg, layout)
    raise ConfigError(
        f"setting 'join_strategy' = {name!r}: not available in this version yet; use 'native'"
    )


__all__ = ["JoinStats", "JoinStrategy", "get_strategy"]
