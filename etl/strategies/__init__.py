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
    if name in ("partitioned-range", "partitioned-hash"):
        from etl.strategies.partitioned import PartitionedJoin

        variant = name.split("-", 1)[1]
        if layout.kind != variant:
            raise ConfigError(
                f"setting 'join_strategy' = {name!r}: this warehouse's key_map is laid out by {layout.kind}, "
                f"{name} needs a {variant} layout; convert it with `etl maintain --steps relayout --join-strategy {name}`"
            )
        return PartitionedJoin(spark, cfg, layout, variant)
    from etl.strategies.meshjoin import MeshJoin

    return MeshJoin(spark, cfg, layout)


__all__ = ["JoinStats", "JoinStrategy", "get_strategy"]
