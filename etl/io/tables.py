"""Delta I/O at the edges: create the warehouse tables, read them, and write idempotently."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from etl.core.config import EtlConfig
from etl.core.model import Entity
from warehouse.schemas import DEFAULT_ENTITY, tables, views

DELETION_VECTORS = "delta.enableDeletionVectors"
DELETION_VECTORS_FEATURE = "delta.feature.deletionVectors"


def ensure_tables(spark, cfg: EtlConfig) -> list[str]:
    """Create every warehouse table that does not exist yet; a no-op on an existing warehouse.

    ``deletion_vectors`` is applied when a table is created: turning the feature on for an
    existing table upgrades its Delta protocol, which older readers cannot follow, so that stays
    the owner's decision (docs/operations.md). With ``auto`` the feature is part of the protocol
    from the start and ``settle_deletion_vectors`` only switches its use on."""
    import fcntl

    if not cfg.warehouse_on_object_store:
        cfg.warehouse_path.mkdir(parents=True, exist_ok=True)
    cfg.meta_path.mkdir(parents=True, exist_ok=True)
    # Two first runs at once (two intervals ingested together, or `etl init` beside a run) would
    # both create the same tables; the loser's commit fails half-way. Creation is serialised by
    # an advisory lock, released by the kernel when its process dies (no stale lock possible).
    with open(cfg.meta_path / "tables.lock", "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            return [t.name for t in tables(cfg.entity_model).values() if _create(spark, cfg, t)]
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


def _create(spark, cfg: EtlConfig, table) -> bool:
    """Create one table unless it exists; ``True`` if this call created it."""
    path = cfg.table_path(table.name)
    if DeltaTable.isDeltaTable(spark, path):
        _add_missing_columns(spark, path, table.schema)
        return False
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(table.schema)
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    if table.merge_target and cfg.deletion_vectors != "off":
        builder = builder.property(DELETION_VECTORS_FEATURE, "supported")
        builder = builder.property(DELETION_VECTORS, "true" if cfg.deletion_vectors == "on" else "false")
    builder.execute()
    return True


def settle_deletion_vectors(spark, cfg: EtlConfig) -> list[str]:
    """With ``deletion_vectors = auto``: switch deletion vectors on for each MERGE target that
    now holds ``deletion_vectors_from_bytes`` (one way; a metadata change, since the feature is
    in the table's protocol from its creation). Called at a run's start, never per batch. Returns
    the tables switched; a table made without the feature (``off``, or an older version) is left
    as it is."""
    if cfg.deletion_vectors != "auto":
        return []
    switched = []
    for table in tables(cfg.entity_model).values():
        if not table.merge_target:
            continue
        path = cfg.table_path(table.name)
        detail = DeltaTable.forPath(spark, path).detail().select("properties", "tableFeatures", "sizeInBytes").first()
        if (detail["properties"] or {}).get(DELETION_VECTORS) == "true":
            continue
        if "deletionVectors" not in (detail["tableFeatures"] or []):
            continue
        if int(detail["sizeInBytes"] or 0) < cfg.deletion_vectors_from_bytes:
            continue
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{DELETION_VECTORS}' = 'true')")
        switched.append(table.name)
    return switched


def _add_missing_columns(spark, path: str, schema) -> None:
    """A warehouse made by an older version gains the (nullable) columns added since."""
    have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
    names = schema.fieldNames()
    for i, f in enumerate(schema.fields):
        if f.name in have:
            continue
        where = f"AFTER `{names[i - 1]}`" if i else "FIRST"  # keep the schema's column order
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (`{f.name}` {f.dataType.simpleString()} {where})")
        have.add(f.name)


def read(spark, cfg: EtlConfig, name: str):
    """A table, or a view (``warehouse.schemas.views``) as the projection of its source."""
    view = views(cfg.entity_model).get(name)
    if view is None:
        return spark.read.format("delta").load(cfg.table_path(name))
    columns = [F.col(f.name).cast(f.dataType) for f in view.schema.fields]
    df = read(spark, cfg, view.source).where(view.where)
    if view.explode:
        beside = [c for c in view.schema.fieldNames() if c in df.columns and c != view.explode]
        df = df.select(*beside, F.explode(view.explode).alias("_element")).select(*beside, "_element.*")
    df = df.select(columns)
    if view.older_rows_kept_apart and DeltaTable.isDeltaTable(spark, cfg.table_path(name)):
        older = spark.read.format("delta").load(cfg.table_path(name))
        # A column added to the view since that table's last write (join_metrics' clock_skew) is null there.
        df = df.unionByName(older.select([F.col(f.name).cast(f.dataType) if f.name in older.columns
                                          else F.lit(None).cast(f.dataType).alias(f.name) for f in view.schema.fields]))
    return df


def schema_of(name: str, entity: Entity | None = None) -> StructType:
    """Table ``name``'s schema in ``entity``'s warehouse (default: the customer's)."""
    return tables(entity or DEFAULT_ENTITY)[name].schema


def conform(df, name: str, entity: Entity | None = None):
    """Cast and order ``df``'s columns as the table's schema says."""
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema_of(name, entity).fields])


def append(df, cfg: EtlConfig, name: str) -> None:
    """A plain append. A batch's rows are written once in steady state (its ``batch_seq`` is new
    under the load lock), so they carry no Delta ``txnAppId``/``txnVersion``: that marker made a
    1-row append 3.7x slower (1.05 s against 0.28 s; docs/decisions/commit-protocol.md)."""
    conform(df, name, cfg.entity_model).write.format("delta").mode("append").save(cfg.table_path(name))


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


def replace_where(df, cfg: EtlConfig, name: str, predicate: str) -> None:
    """Overwrite exactly the rows ``predicate`` selects (``df``'s rows must all satisfy it)."""
    conform(df, name, cfg.entity_model).write.format("delta").mode("overwrite").option("replaceWhere", predicate).save(cfg.table_path(name))


def table_bytes(spark, cfg: EtlConfig, name: str) -> int:
    return int(DeltaTable.forPath(spark, cfg.table_path(name)).detail().select("sizeInBytes").first()[0] or 0)
