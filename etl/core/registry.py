"""The join strategies, each declared once: its name, the ``key_map`` layout it needs, whether its
batches may span several arrival windows (block granularity, papers/004 §6.3.4), its own settings,
and where its mechanism lives. Configuration, the CLI, the DAG, the loader, maintenance, the
simulator and the benchmark all ask here, so a fifth strategy is one entry plus its mechanism."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from etl.core.errors import ConfigError

DEFAULT_LAYOUT = "range"  # what a new warehouse is laid out by when its strategy needs no layout


@dataclass(frozen=True)
class StrategySpec:
    name: str
    mechanism: str  # "module:Class" of the JoinStrategy that runs it on Spark
    layout: str | None = None  # the key_map layout it reads by: "range", "hash", or None (any)
    block_batches: bool = False  # may one load batch span several arrival windows
    settings: tuple[str, ...] = ()  # the settings a run may choose with this strategy
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the mechanism

    @property
    def new_layout(self) -> str:
        """The layout a warehouse gets when this strategy creates it."""
        return self.layout or DEFAULT_LAYOUT

    def mechanism_class(self):
        module, _, name = self.mechanism.partition(":")
        return getattr(import_module(module), name)


_PARTITIONED_SETTINGS = (
    "n_invoke", "r_wb", "alpha", "tau", "rho", "memory_budget", "wait_buffer_tuples", "s_bytes", "max_wait_s",
    "h_mark", "l_mark", "block_factor",
)

SPECS: tuple[StrategySpec, ...] = (
    StrategySpec("native", "etl.strategies.native:NativeJoin"),
    StrategySpec("meshjoin", "etl.strategies.meshjoin:MeshJoin", settings=("k", "d")),
    StrategySpec("partitioned-range", "etl.strategies.partitioned:PartitionedJoin", layout="range", block_batches=True,
                 settings=_PARTITIONED_SETTINGS, options={"variant": "range"}),
    StrategySpec("partitioned-hash", "etl.strategies.partitioned:PartitionedJoin", layout="hash", block_batches=True,
                 settings=_PARTITIONED_SETTINGS, options={"variant": "hash"}),
)
STRATEGIES: dict[str, StrategySpec] = {s.name: s for s in SPECS}
NAMES: tuple[str, ...] = tuple(STRATEGIES)


def spec(name: str, setting: str = "join_strategy") -> StrategySpec:
    """The strategy called ``name``; a ``ConfigError`` naming the valid ones otherwise."""
    try:
        return STRATEGIES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"setting '{setting}' = {name!r}: unknown join strategy; valid values are {', '.join(NAMES)}") from None


def check_layout(name: str, layout_kind: str) -> None:
    """Refuse a strategy whose mechanism needs another layout than the warehouse has."""
    wanted = spec(name).layout
    if wanted is not None and wanted != layout_kind:
        raise ConfigError(
            f"setting 'join_strategy' = {name!r}: this warehouse's key_map is laid out by {layout_kind}, "
            f"{name} needs a {wanted} layout; convert it with `etl maintain --steps relayout --join-strategy {name}`"
        )

