"""The warehouse's tables behind one handle: what the loader, the ledger, the strategies and the
jobs do to a table (read, append, replace, delete, the load's three MERGEs, size), with two
implementations: Delta (``etl.io.delta_tables``, the product) and this process's memory
(``etl.io.memory_tables``, for protocol tests where Delta is not the claim). ``etl.io.tables``
opens the one the settings name. Also the tables' schema helpers, which both share."""

from __future__ import annotations

import fcntl
from abc import ABC, abstractmethod

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from etl.core.config import EtlConfig
from etl.core.model import Entity
from warehouse.schemas import DEFAULT_ENTITY, tables, views


class MissingTable(LookupError):
    """A table that is not in the warehouse (``ensure`` creates them)."""


class Tables(ABC):
    """One entity's warehouse tables (``cfg.entity_model``), as one process sees them."""

    def __init__(self, spark, cfg: EtlConfig) -> None:
        self.spark = spark
        self.cfg = cfg
        self.entity = cfg.entity_model

    # ------------------------------------------------------------------ what each implementation does

    @abstractmethod
    def stored(self, name: str) -> DataFrame | None:
        """The stored table ``name``, or ``None`` when the warehouse has no such table."""

    @abstractmethod
    def _table(self, name: str) -> DataFrame:
        """The stored table ``name`` (it exists: read without asking first)."""

    @abstractmethod
    def _create(self, table) -> bool:
        """Create one declared table unless it exists; ``True`` if this call created it."""

    @abstractmethod
    def version(self, name: str) -> int:
        """A number that changes with every write of table ``name`` (Delta's table version)."""

    @abstractmethod
    def append(self, df: DataFrame, name: str) -> None:
        """``df``'s rows added to table ``name`` (conformed to its schema)."""

    @abstractmethod
    def replace_where(self, df: DataFrame, name: str, predicate: str) -> None:
        """Exactly the rows ``predicate`` selects replaced by ``df``'s (which must all satisfy it)."""

    @abstractmethod
    def delete_where(self, name: str, predicate: str) -> None:
        """The rows ``predicate`` selects removed."""

    @abstractmethod
    def merge_key_map(self, changes: DataFrame, segments: list[int] | None = None) -> None:
        """``transforms.outcomes.key_map_changes`` into ``key_map`` (``delta_merges.merge_key_map``)."""

    @abstractmethod
    def merge_current(self, state: DataFrame, held: bool = False) -> None:
        """``transforms.outcomes.current_state_rows`` into the entity's current-state table."""

    @abstractmethod
    def merge_history(self, changes: DataFrame) -> None:
        """``transforms.history.history_changes`` into the entity's history table."""

    @abstractmethod
    def bytes(self, name: str) -> int:
        """The table's size in bytes, as the strategies' memory decisions count it."""

    @abstractmethod
    def holds_keys(self) -> bool:
        """Whether ``key_map`` holds any row, known without Spark (checked before a session exists)."""

    def settle_deletion_vectors(self) -> list[str]:
        """Delta's: switch deletion vectors on for the MERGE targets grown large enough."""
        return []

    def files_per_segment(self, name: str) -> dict[int, int]:
        """Data files per ``segment_id`` of a partitioned table's current version (Delta's; a
        store without files has none)."""
        return {}

    def compact_segments(self, name: str, segments: list[int]) -> None:
        """Each segment's files rewritten as one, no row changed (Delta's; nothing to do without files)."""

    # ------------------------------------------------------------------ shared

    def ensure(self) -> list[str]:
        """Create every warehouse table that does not exist yet; a no-op on an existing warehouse.
        Two first runs at once (two intervals ingested together, or ``etl init`` beside a run) would
        both create the same tables; creation is serialised by an advisory lock, released by the
        kernel when its process dies (no stale lock possible)."""
        self.cfg.meta_path.mkdir(parents=True, exist_ok=True)
        with open(self.cfg.meta_path / "tables.lock", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                return [t.name for t in tables(self.entity).values() if self._create(t)]
            finally:
                fcntl.flock(guard, fcntl.LOCK_UN)

    def read(self, name: str) -> DataFrame:
        """A table, or a view (``warehouse.schemas.views``) as the projection of its source."""
        view = views(self.entity).get(name)
        if view is None:
            return self._table(name)
        columns = [F.col(f.name).cast(f.dataType) for f in view.schema.fields]
        df = self.read(view.source).where(view.where)
        if view.explode:
            beside = [c for c in view.schema.fieldNames() if c in df.columns and c != view.explode]
            df = df.select(*beside, F.explode(view.explode).alias("_element")).select(*beside, "_element.*")
        df = df.select(columns)
        older = self.stored(name) if view.older_rows_kept_apart else None
        if older is not None:
            # A column added to the view since that table's last write (join_metrics' clock_skew) is null there.
            df = df.unionByName(older.select([F.col(f.name).cast(f.dataType) if f.name in older.columns
                                              else F.lit(None).cast(f.dataType).alias(f.name) for f in view.schema.fields]))
        return df

    def pinned(self, name: str) -> DataFrame:
        """Table ``name`` as it is now, for every later action, while a write of it goes on beside
        (what the decisions read while the coalesced apply MERGEs ``key_map``). This store's reads
        are the rows of their moment already; Delta's read the latest version at each action."""
        return self.read(name)

    def conform(self, df: DataFrame, name: str) -> DataFrame:
        return conform(df, name, self.entity)


def schema_of(name: str, entity: Entity | None = None) -> StructType:
    """Table ``name``'s schema in ``entity``'s warehouse (default: the customer's)."""
    return tables(entity or DEFAULT_ENTITY)[name].schema


def conform(df, name: str, entity: Entity | None = None):
    """Cast and order ``df``'s columns as the table's schema says."""
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema_of(name, entity).fields])


def _known_columns(name: str, names, entity: Entity | None = None) -> StructType:
    """Table ``name``'s schema, once every one of ``names`` is a column of it."""
    schema = schema_of(name, entity)
    unknown = set(names) - set(schema.fieldNames())
    if unknown:
        raise ValueError(f"table {name} has no column {', '.join(sorted(unknown))}")
    return schema


def row_frame(spark, name: str, values: dict, entity: Entity | None = None):
    """One row of table ``name`` as a DataFrame; columns missing from ``values`` are null, a name
    the table does not have is an error (a misspelt measurement would otherwise vanish)."""
    schema = _known_columns(name, values, entity)
    return spark.createDataFrame([tuple(values.get(f.name) for f in schema.fields)], schema)


def literal_row(name: str, values: dict, entity: Entity | None = None, **columns) -> list:
    """The columns of one row of table ``name``: ``values`` as literals, ``columns`` as given
    (aggregates, to be selected by ``DataFrame.agg``), the rest null; as strict as ``row_frame``."""
    schema = _known_columns(name, [*values, *columns], entity)
    return [(columns[f.name] if f.name in columns else F.lit(values.get(f.name))).cast(f.dataType).alias(f.name)
            for f in schema.fields]
