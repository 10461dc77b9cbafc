"""Reading fresh rows: an entity's table, or its ``key_map``, with the logged tail merged over it
(merge-on-read; docs/reading-fresh-rows.md).

With ``apply_interval_seconds`` a batch is decided and durable at its write-ahead commit (its
outcomes in ``outcome_log``) and reaches the entity table only when its MERGEs run, up to that
interval later. ``fresh`` reads the table as the next apply will leave it: the outcomes of every
logged batch after the last applied one, merged over the table by the rules the MERGE itself runs
(``etl.core.merge_rules``; ``key_map`` by ``transforms.outcomes.key_map_on_read``).

The batches applied are those up to the highest ``updated_batch_seq`` of ``key_map``: batches are
applied in order and ``key_map`` is merged last (docs/decisions/coalesced-apply.md). That mark is
read first, and the tables after it: an apply that commits in between has merged the entity
table before ``key_map``, so a batch is either under the mark and in the table, or read from the
log; one read from the log and in the table too changes nothing, the MERGE's rules being
idempotent (and a new key of it already in ``key_map`` is advanced there, not added again).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core import merge_rules
from etl.core.config import ConfigError, EtlConfig
from etl.io.layout_store import configured_layout, stored_layout
from etl.io.tables import open_tables
from etl.transforms.history import history_changes
from etl.transforms.layout import segment_column
from etl.transforms.merge_on_read import merge_on_read
from etl.transforms.outcomes import KEY, current_state_rows, key_map_changes, key_map_on_read

VIEW_SUFFIX = "_fresh"


def applied_through(spark, cfg: EtlConfig) -> int:
    """The last batch applied to the warehouse's tables (0: none)."""
    return int(open_tables(spark, cfg).read("key_map").agg(F.max("updated_batch_seq")).first()[0] or 0)


def logged_tail(spark, cfg: EtlConfig, through: int | None = None) -> DataFrame:
    """The outcomes of the batches logged after batch ``through`` (default: the last applied)."""
    through = applied_through(spark, cfg) if through is None else through
    return open_tables(spark, cfg).read("outcome_log").where(F.col("batch_seq") > F.lit(through))


def fresh(spark, cfg: EtlConfig, name: str | None = None) -> DataFrame:
    """Table ``name`` of ``cfg``'s entity (default: the entity's own table; or ``key_map``) with
    the logged, unapplied batches merged over it: equal to the table after their apply."""
    entity = cfg.entity_model
    name = name or entity.table
    if name not in (entity.table, "key_map"):
        raise ConfigError(f"fresh rows are read of {entity.table} or key_map, not {name!r}")
    tail = logged_tail(spark, cfg)  # the mark first, then the tables (see above)
    tables = open_tables(spark, cfg)
    table = tables.read(name)
    if name == "key_map":
        # With no layout stored nothing is loaded yet, and the tail is empty.
        changes = key_map_changes(tail, segment_column(stored_layout(cfg) or configured_layout(cfg)))
        # A key applied since the mark was read (or since a view was registered) is in key_map
        # already: advanced, not inserted again.
        stored = table.select(*KEY).join(F.broadcast(changes.select(*KEY)), list(KEY), "left_semi")
        changes = changes.join(stored.withColumn("_stored", F.lit(True)), list(KEY), "left").withColumn(
            "is_new", F.col("is_new") & F.col("_stored").isNull()).drop("_stored")
        return key_map_on_read(table, changes)
    if entity.history == "history":
        changes = history_changes(tail, table.where(F.col("is_current")), entity)
        return merge_on_read(table, changes, merge_rules.history(table.columns, entity.inferred, entity.type1))
    return merge_on_read(table, tables.conform(current_state_rows(tail, entity, several_batches=True), entity.table),
                         merge_rules.CURRENT)


def register_fresh_views(spark, cfg: EtlConfig) -> dict[str, str]:
    """Temporary views of this Spark session, usable from Spark SQL: ``<table>_fresh`` for the
    entity's table and ``<entity>_key_map_fresh``. A view holds the applied mark of the moment it
    was registered: it stays exact as later batches are applied (they are in the table then, and
    applying them again on read changes nothing), and reads less of the log when registered again."""
    entity = cfg.entity_model
    made = {}
    for view, table in ((f"{entity.table}{VIEW_SUFFIX}", entity.table), (f"{entity.name}_key_map{VIEW_SUFFIX}", "key_map")):
        fresh(spark, cfg, table).createOrReplaceTempView(view)
        made[view] = table
    return made
