"""Join strategies behind one interface (DESIGN.md §4): the mechanisms that run on Spark. Which
strategy exists, and what it needs, is declared in ``etl.core.registry``; ``get_strategy`` builds one."""

from __future__ import annotations

from etl.core import registry
from etl.strategies.base import JoinStats, JoinStrategy


def get_strategy(name: str, spark, cfg, layout, tables=None) -> JoinStrategy:
    """Strategy ``name`` over ``layout``, reading ``tables`` (default: the handle the settings name)."""
    spec = registry.spec(name)
    registry.check_layout(name, layout.kind)
    return spec.mechanism_class()(spark, cfg, layout, tables=tables, **spec.options)


__all__ = ["JoinStats", "JoinStrategy", "get_strategy"]
