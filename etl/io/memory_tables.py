"""The warehouse's tables in this process's memory (setting ``table_store = memory``): for the
protocol tests, whose claims are the loader's decisions, the commit order and recovery, not Delta's
storage, and which paid ~1-2 s of Delta commit per table write (issue 44), and for the reference
warehouses tests build only to compare another with (``tests.helpers.reference_in_memory``). Every handle of one
process on one warehouse (``cfg.warehouse_uri``) shares the same rows, as every reader of a Delta
warehouse shares its files; nothing is written to disk and all is gone when the process ends, so
the command line refuses the setting. The MERGEs are ``etl.core.row_merges``; tests/etl/load/
test_apply.py runs each on both implementations against the same expected rows.

One difference is kept on purpose: a DataFrame read from here is the rows of that moment, where a
Delta DataFrame reads the table's latest version at each action. The loader never relies on
either (what it decides is held by a local checkpoint before anything is written), and each
strategy's exactness is also asserted on Delta (tests/etl/strategies/test_contract.py), so a
missing checkpoint cannot hide behind this store."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core import row_merges
from etl.io.table_base import MissingTable, Tables, schema_of

_STORES: dict[str, dict[str, "_Held"]] = {}


class _Held:
    """One table's rows (dicts), and the DataFrame of them until the next write."""

    def __init__(self, schema) -> None:
        self.schema = schema
        self.columns = schema.fieldNames()
        self.rows: list[dict] = []
        self._frame: DataFrame | None = None
        self.version = 0

    def frame(self, spark) -> DataFrame:
        if self._frame is None:
            self._frame = spark.createDataFrame([tuple(r[c] for c in self.columns) for r in self.rows], self.schema)
        return self._frame

    def replace(self, rows: list[dict]) -> None:
        """As a Delta write, refused when a non-nullable column would hold a null."""
        for f in self.schema.fields:
            if not f.nullable and any(r[f.name] is None for r in rows):
                raise ValueError(f"NOT NULL constraint violated for column: {f.name}")
        self.rows = rows
        self._frame = None
        self.version += 1


def _dicts(df: DataFrame) -> list[dict]:
    return [r.asDict() for r in df.collect()]


def _selected(predicate: str):
    """Rows a SQL predicate selects; a null result selects nothing, as in Delta's predicates."""
    return F.coalesce(F.expr(f"({predicate})"), F.lit(False))


def _approximate_bytes(value) -> int:
    return len(value) if isinstance(value, str) else 8


def forget_under(root: str) -> None:
    """Drop the tables of every warehouse under ``root`` from this process (a test's teardown)."""
    for uri in [u for u in _STORES if u == root or u.startswith(root.rstrip("/") + "/")]:
        del _STORES[uri]


def copy(source_cfg, target_cfg) -> None:
    """Another warehouse with the same rows, as a copy of a Delta warehouse's directory is."""
    copied = {}
    for name, held in _STORES.get(source_cfg.warehouse_uri, {}).items():
        copied[name] = _Held(held.schema)
        copied[name].replace([dict(r) for r in held.rows])
    _STORES[target_cfg.warehouse_uri] = copied


class MemoryTables(Tables):
    def __init__(self, spark, cfg) -> None:
        super().__init__(spark, cfg)
        self._store = _STORES.setdefault(cfg.warehouse_uri, {})

    def _held(self, name: str) -> _Held:
        held = self._store.get(name)
        if held is None:
            raise MissingTable(f"table {name} is not in the in-memory warehouse {self.cfg.warehouse_uri}")
        return held

    def stored(self, name: str) -> DataFrame | None:
        held = self._store.get(name)
        return None if held is None else held.frame(self.spark)

    def _table(self, name: str) -> DataFrame:
        return self._held(name).frame(self.spark)

    def _create(self, table) -> bool:
        if table.name in self._store:
            return False
        self._store[table.name] = _Held(table.schema)
        return True

    def version(self, name: str) -> int:
        return self._held(name).version

    def append(self, df: DataFrame, name: str) -> None:
        held = self._held(name)
        held.replace(held.rows + _dicts(self.conform(df, name)))

    def replace_where(self, df: DataFrame, name: str, predicate: str) -> None:
        """As Delta's ``replaceWhere``: refused when one of ``df``'s rows is outside ``predicate``."""
        selected = _selected(predicate)
        new = self.conform(df, name).withColumn("_selected", selected).collect()
        if not all(r["_selected"] for r in new):
            raise ValueError(f"table {name}: a row written by replace_where does not satisfy {predicate!r}")
        held = self._held(name)
        kept = _dicts(held.frame(self.spark).where(~selected))
        held.replace(kept + [{c: r[c] for c in held.columns} for r in new])

    def delete_where(self, name: str, predicate: str) -> None:
        held = self._held(name)
        held.replace(_dicts(held.frame(self.spark).where(~_selected(predicate))))

    def merge_key_map(self, changes: DataFrame, segments: list[int] | None = None) -> None:
        held = self._held("key_map")
        # Each value cast to the type of the column it goes to, as Delta casts a MERGE's values.
        type_of = {row_merges.KEY_MAP_INSERT[f.name]: f.dataType for f in held.schema.fields}
        created = [F.col("created_batch_seq").cast("long")] if "created_batch_seq" in changes.columns else []
        cast = changes.select(*[F.col(c).cast(t).alias(c) for c, t in type_of.items()], "is_new", *created)
        held.replace(row_merges.merge_key_map_rows(held.rows, _dicts(cast), segments))

    def merge_current(self, state: DataFrame, held: bool = False) -> None:
        table = self._held(self.entity.table)
        table.replace(row_merges.merge_current_rows(table.rows, _dicts(self.conform(state, self.entity.table))))

    def merge_history(self, changes: DataFrame) -> None:
        table = self._held(self.entity.table)
        schema = schema_of(self.entity.table, self.entity)
        cast = changes.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields], "_kind",
                              *(["_closes"] if self.entity.type1 else []))
        table.replace(row_merges.merge_history_rows(table.rows, _dicts(cast), schema.fieldNames(), self.entity.inferred,
                                                    self.entity.type1))

    def bytes(self, name: str) -> int:
        """An estimate (there are no files): 8 bytes a value, a string's length for a string."""
        return sum(_approximate_bytes(v) for r in self._held(name).rows for v in r.values() if v is not None)

    def holds_keys(self) -> bool:
        held = self._store.get("key_map")
        return bool(held and held.rows)
