"""``etl show``: a table or view of an entity's warehouse, read as the jobs read it (the same Spark
session settings, the views the package defines), with a filter and a limit. The first look at
the tables after a load, as ``dbt show`` is for a dbt project (docs/model.md, "Looking at the
tables")."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core.config import ConfigError, EtlConfig
from etl.core.model import Entity
from etl.fresh import fresh as fresh_rows
from etl.io.tables import open_tables, read
from etl.load.references import with_deleted_references
from warehouse.schemas import tables, views

MAX_CELL = 40  # characters of a value in the text table; --json prints whole values


def names(entity: Entity) -> list[str]:
    """What ``etl show`` can print for the entity: its tables, then the views over them."""
    return [*tables(entity), *views(entity)]


def check_name(entity: Entity, name: str) -> str:
    if name not in names(entity):
        raise ConfigError(f"{name!r} is no table or view of entity {entity.name}: {', '.join(names(entity))}")
    return name


def exists(spark, cfg: EtlConfig, name: str) -> bool:
    """Whether table ``name``, or the table under view ``name``, is in the warehouse yet."""
    entity_views = views(cfg.entity_model)
    while name in entity_views:
        name = entity_views[name].source
    return open_tables(spark, cfg).stored(name) is not None


def with_dimension_keys(spark, cfg: EtlConfig, facts: DataFrame) -> DataFrame:
    """A fact's rows with, beside each reference, the natural key its surrogate key stands for
    (``<reference>__natural_key``, from the dimension's ``key_map``) and whether that member was
    deleted at the fact's event time (``<reference>__deleted``, read now: docs/model.md, "Facts")."""
    order = []
    for column in facts.columns:
        order.append(column)
        if any(r.name == column for r in cfg.entity_model.references):
            order.extend((f"{column}__natural_key", f"{column}__deleted"))
    for ref in cfg.entity_model.references:
        keys = read(spark, cfg.for_entity(ref.dimension), "key_map").select(
            F.col("surrogate_key").alias(ref.name), F.col("natural_key").alias(f"{ref.name}__natural_key"))
        facts = facts.join(keys, ref.name, "left")
    return with_deleted_references(spark, cfg, facts).select(order)


def check_fresh(entity: Entity, name: str) -> str:
    """``--fresh`` reads the entity's table or ``key_map`` with the logged tail merged over it."""
    check_name(entity, name)
    if name not in (entity.table, "key_map"):
        raise ConfigError(f"--fresh reads {entity.table} or key_map with the logged batches merged over them, not {name}")
    return name


def shown(spark, cfg: EtlConfig, name: str, run_key: str = "", where: str = "", columns: tuple[str, ...] = (),
          fresh: bool = False) -> DataFrame:
    """The rows ``etl show`` prints: table or view ``name`` (``fresh``: with the logged, unapplied
    batches merged over it, ``etl.fresh``), of one run, where a condition holds."""
    entity = cfg.entity_model
    check_fresh(entity, name) if fresh else check_name(entity, name)
    if not exists(spark, cfg, name):
        raise ConfigError(f"the warehouse at {cfg.warehouse_uri} has no {name} yet: run etl init, or load a run first")
    try:
        df = fresh_rows(spark, cfg, name) if fresh else read(spark, cfg, name)
        if run_key:
            if "run_key" not in df.columns:
                with_run = [n for n in names(entity) if "run_key" in _columns(cfg, n)]
                raise ConfigError(f"{name} has no run_key: --run filters {', '.join(with_run)}")
            df = df.where(F.col("run_key") == run_key)
        if where:
            df = df.where(where)
        if name == entity.table and entity.is_fact:
            df = with_dimension_keys(spark, cfg, df)
        if columns:
            df = df.select(*columns)
        df.schema  # a bad condition or column fails here, before any row is read
    except AnalysisException as exc:
        raise ConfigError(f"etl show {name}: {str(exc).splitlines()[0]}") from None
    return df


def _columns(cfg: EtlConfig, name: str) -> list[str]:
    view = views(cfg.entity_model).get(name)
    return (view.schema if view else tables(cfg.entity_model)[name].schema).fieldNames()


def counts(spark, cfg: EtlConfig) -> list[tuple[str, int | None]]:
    """Every table and view with its rows (``None``: not created yet)."""
    return [(name, read(spark, cfg, name).count() if exists(spark, cfg, name) else None) for name in names(cfg.entity_model)]


def _text(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return str(value)


def format_rows(columns: list[str], rows: list[tuple], more: bool) -> str:
    """Rows as a text table, values cut at ``MAX_CELL`` characters."""
    cells = [[_text(v) for v in row] for row in rows]
    cells = [[c if len(c) <= MAX_CELL else c[: MAX_CELL - 3] + "..." for c in row] for row in cells]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

    def line(values) -> str:
        return " | ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    out = [line(columns), "-+-".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    out.append(f"({len(rows)} rows{'; more with a higher --limit' if more else ''})")
    return "\n".join(out)


def json_lines(rows) -> str:
    """Rows as JSON objects, whole values (nested rows with their field names)."""
    def plain(v):
        return str(v) if isinstance(v, (Decimal, datetime, date)) else v
    return "\n".join(json.dumps(r.asDict(recursive=True), default=plain) for r in rows)


def show(spark, cfg: EtlConfig, name: str, run_key: str = "", where: str = "", limit: int = 20,
         columns: tuple[str, ...] = (), as_json: bool = False, fresh: bool = False) -> str:
    if limit < 0:
        raise ConfigError(f"--limit {limit}: must be 0 or more")
    df = shown(spark, cfg, name, run_key, where, columns, fresh)
    try:
        rows = df.limit(limit + 1).collect()
    except PySparkException as exc:  # a condition that fails on the rows (a cast under ANSI mode)
        raise ConfigError(f"etl show {name}: {str(exc).splitlines()[0]}") from None
    if as_json:
        return json_lines(rows[:limit])
    return format_rows(df.columns, [tuple(r) for r in rows[:limit]], len(rows) > limit)


def listing(spark, cfg: EtlConfig) -> str:
    lines = [f"entity {cfg.entity_model.name} at {cfg.warehouse_uri}:"]
    for name, n in counts(spark, cfg):
        kind = "view " if name in views(cfg.entity_model) else "table"
        lines.append(f"  {kind} {name:<24} {'not created' if n is None else f'{n} rows'}")
    lines.append("etl show <name> [--run RUN_KEY] [--where CONDITION] [--limit N] [--columns a,b] [--json]")
    return "\n".join(lines)
