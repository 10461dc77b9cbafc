"""The warehouse's tables as Delta tables: the product's implementation of ``Tables``."""

from __future__ import annotations

import hashlib
from pathlib import Path

from delta.tables import DeltaTable
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.sql import DataFrame

from etl.core import services
from etl.io import delta_merges
from etl.io.table_base import Tables
from warehouse.schemas import tables

DELETION_VECTORS = "delta.enableDeletionVectors"
DELETION_VECTORS_FEATURE = "delta.feature.deletionVectors"


class DeltaTables(Tables):
    """One table a directory under ``warehouse_uri``. ``deletion_vectors`` is applied when a table
    is created: turning the feature on for an existing table upgrades its Delta protocol, which
    older readers cannot follow, so that stays the owner's decision (docs/operations.md). With
    ``auto`` the feature is part of the protocol from the start and ``settle_deletion_vectors``
    only switches its use on."""

    def path(self, name: str) -> str:
        return self.cfg.table_path(name)

    def delta_table(self, name: str) -> DeltaTable:
        return DeltaTable.forPath(self.spark, self.path(name))

    def ensure(self) -> list[str]:
        """As ``Tables.ensure``. On a local warehouse whose every table this version has made or
        checked before (a marker in the warehouse's own directory, named by the tables' schemas:
        a warehouse restored from an older copy brings back its own markers) and whose tables still
        have a Delta log, a few directory checks: reading each table's schema again took 0.5-0.7 s
        at every command's and every load's start."""
        if self.cfg.warehouse_on_object_store:
            return super().ensure()
        self.cfg.warehouse_path.mkdir(parents=True, exist_ok=True)
        checked = self.cfg.warehouse_path / f".tables-checked-{self._schemas_digest()}"
        if checked.exists() and all(_has_commits(self.cfg.warehouse_path / name) for name in tables(self.entity)):
            return []
        checked.unlink(missing_ok=True)  # a creation cut short leaves no marker behind
        created = super().ensure()
        checked.touch()
        return created

    def _schemas_digest(self) -> str:
        text = "".join(t.name + t.schema.json() + str(t.partition_by) for t in tables(self.entity).values())
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def stored(self, name: str) -> DataFrame | None:
        return self._table(name) if DeltaTable.isDeltaTable(self.spark, self.path(name)) else None

    def _table(self, name: str) -> DataFrame:
        return self.spark.read.format("delta").load(self.path(name))

    def _create(self, table) -> bool:
        path = self.path(table.name)
        if DeltaTable.isDeltaTable(self.spark, path):
            self._add_missing_columns(path, table.schema)
            return False
        builder = DeltaTable.createIfNotExists(self.spark).location(path).addColumns(table.schema)
        if table.partition_by:
            builder = builder.partitionedBy(*table.partition_by)
        if table.merge_target and self.cfg.deletion_vectors != "off":
            builder = builder.property(DELETION_VECTORS_FEATURE, "supported")
            builder = builder.property(DELETION_VECTORS, "true" if self.cfg.deletion_vectors == "on" else "false")
        builder.execute()
        return True

    def _add_missing_columns(self, path: str, schema) -> None:
        """A warehouse made by an older version gains the (nullable) columns added since."""
        have = {f.name for f in self.spark.read.format("delta").load(path).schema.fields}
        names = schema.fieldNames()
        for i, f in enumerate(schema.fields):
            if f.name in have:
                continue
            where = f"AFTER `{names[i - 1]}`" if i else "FIRST"  # keep the schema's column order
            self.spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (`{f.name}` {f.dataType.simpleString()} {where})")
            have.add(f.name)

    def settle_deletion_vectors(self) -> list[str]:
        """With ``deletion_vectors = auto``: switch deletion vectors on for each MERGE target that
        now holds ``deletion_vectors_from_bytes`` (one way; a metadata change, since the feature is
        in the table's protocol from its creation). Called at a run's start, never per batch.
        Returns the tables switched; a table made without the feature (``off``, or an older
        version) is left as it is."""
        if self.cfg.deletion_vectors != "auto":
            return []
        switched = []
        for table in tables(self.entity).values():
            if not table.merge_target:
                continue
            if not self.cfg.warehouse_on_object_store and \
                    not _holds_at_least(self.cfg.warehouse_path / table.name, self.cfg.deletion_vectors_from_bytes):
                continue  # every file of it, removed ones and its log included, is below the size
            detail = self.delta_table(table.name).detail().select("properties", "tableFeatures", "sizeInBytes").first()
            if (detail["properties"] or {}).get(DELETION_VECTORS) == "true":
                continue
            if "deletionVectors" not in (detail["tableFeatures"] or []):
                continue
            if int(detail["sizeInBytes"] or 0) < self.cfg.deletion_vectors_from_bytes:
                continue
            self.spark.sql(f"ALTER TABLE delta.`{self.path(table.name)}` SET TBLPROPERTIES ('{DELETION_VECTORS}' = 'true')")
            switched.append(table.name)
        return switched

    def version(self, name: str) -> int:
        """The table's latest version, from its log as Delta's own reader updates it: a listing of
        ``_delta_log`` and no Spark job (``history(1)`` was a job and a snapshot's state, about
        0.3 s); ``history`` where the log's class or method is not there (another Delta build)."""
        try:
            jvm = self.spark.sparkContext._jvm
            log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.spark._jsparkSession, self.path(name))
            none = jvm.scala.Option.empty()
            return int(log.update(False, none, none).version())
        except Py4JJavaError:
            raise  # the log's own error (the table is unreadable): as history would raise it
        except Py4JError:  # no such class or method in this Delta build
            return int(self.delta_table(name).history(1).select("version").first()[0])

    def pinned(self, name: str) -> DataFrame:
        """The table's current version, read at that version by every later action (time travel)."""
        return self.spark.read.format("delta").option("versionAsOf", self.version(name)).load(self.path(name))

    def append(self, df: DataFrame, name: str) -> None:
        """A plain append. A batch's rows are written once in steady state (its ``batch_seq`` is new
        under the load lock), so they carry no Delta ``txnAppId``/``txnVersion``: that marker made a
        1-row append 3.7x slower (1.05 s against 0.28 s; docs/decisions/commit-protocol.md)."""
        self.conform(df, name).write.format("delta").mode("append").save(self.path(name))

    def replace_where(self, df: DataFrame, name: str, predicate: str) -> None:
        self.conform(df, name).write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(self.path(name))

    def delete_where(self, name: str, predicate: str) -> None:
        self.delta_table(name).delete(predicate)

    def merge_key_map(self, changes: DataFrame, segments: list[int] | None = None) -> None:
        delta_merges.merge_key_map(self.delta_table("key_map"), changes, segments)

    def files_per_segment(self, name: str) -> dict[int, int]:
        return services.files_per_segment(self._table(name).inputFiles())

    def compact_segments(self, name: str, segments: list[int]) -> None:
        delta_merges.compact_segments(self.delta_table(name), segments)

    def merge_current(self, state: DataFrame, held: bool = False) -> None:
        delta_merges.merge_current(self.delta_table(self.entity.table), state, held=held, entity=self.entity)

    def merge_history(self, changes: DataFrame) -> None:
        delta_merges.merge_history(self.delta_table(self.entity.table), changes, self.entity)

    def bytes(self, name: str) -> int:
        return int(self.delta_table(name).detail().select("sizeInBytes").first()[0] or 0)

    def holds_keys(self) -> bool:
        """Whether ``key_map`` holds data files (a local warehouse; an object store's is not listed)."""
        if self.cfg.warehouse_on_object_store:
            return False
        table = Path(self.path("key_map"))
        return table.is_dir() and any(table.rglob("*.parquet"))


def _has_commits(table: Path) -> bool:
    log = table / "_delta_log"
    return log.is_dir() and any(log.glob("*.json"))


def _holds_at_least(directory: Path, size: int) -> bool:
    """Whether a local table's directory holds ``size`` bytes, an upper bound of the table's size:
    a file listing takes milliseconds, where Delta's ``detail()`` took 0.6-0.7 s a table at every
    run's start."""
    if size <= 0:
        return True
    total = 0
    for f in directory.rglob("*"):
        if f.is_file():
            total += f.stat().st_size
            if total >= size:
                return True
    return False
