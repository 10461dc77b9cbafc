"""The warehouse's tables at the edges: ``open_tables`` gives the handle the settings name
(``table_store``: Delta, or this process's memory for protocol tests), and the functions below are
that handle's operations for callers that hold a configuration, not a handle (the report, the
gate, the run checks)."""

from __future__ import annotations

from etl.core.config import EtlConfig
from etl.io.delta_tables import DELETION_VECTORS, DELETION_VECTORS_FEATURE, DeltaTables
from etl.io.memory_tables import MemoryTables
from etl.io.table_base import MissingTable, Tables, conform, literal_row, row_frame, schema_of

__all__ = [
    "DELETION_VECTORS", "DELETION_VECTORS_FEATURE", "MissingTable", "Tables", "append", "conform", "ensure_tables",
    "literal_row", "open_tables", "read", "row_frame", "schema_of", "settle_deletion_vectors",
]


def open_tables(spark, cfg: EtlConfig) -> Tables:
    """The warehouse's tables of ``cfg``'s entity, stored as ``cfg.table_store`` says."""
    return MemoryTables(spark, cfg) if cfg.table_store == "memory" else DeltaTables(spark, cfg)


def ensure_tables(spark, cfg: EtlConfig) -> list[str]:
    """Create every warehouse table that does not exist yet (``Tables.ensure``)."""
    return open_tables(spark, cfg).ensure()


def settle_deletion_vectors(spark, cfg: EtlConfig) -> list[str]:
    return open_tables(spark, cfg).settle_deletion_vectors()


def read(spark, cfg: EtlConfig, name: str):
    """A table, or a view (``warehouse.schemas.views``) as the projection of its source."""
    return open_tables(spark, cfg).read(name)


def append(df, cfg: EtlConfig, name: str) -> None:
    open_tables(df.sparkSession, cfg).append(df, name)
