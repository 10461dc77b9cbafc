"""What several test modules share: where the project is, one landing line and file, and the two
ways a warehouse is compared (with the reference join, and with another warehouse up to key
numbering, DESIGN.md §3.3)."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import functions as F

from etl.core.config import EtlConfig
from etl.core.interval import Interval
from etl.core.oracle import decide, entity_rows
from etl.io import memory_tables
from etl.io.landing import landing_file
from etl.io.tables import read
from etl.transforms.outcomes import INFER, with_natural_keys
from tests.processes import settings_json
from warehouse.schemas import deterministic_tables as deterministic

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)


def good(key="1", seq=5, **over) -> str:
    """One valid landing line of source ``crm``; ``over`` replaces or adds top-level fields."""
    rec = {
        "source_id": "crm", "natural_key": key, "op": "upsert", "source_seq": seq,
        "event_ts": "2026-11-22T01:00:01Z", "arrival_ts": "2026-11-22T01:00:02Z",
        "attributes": {"name": "A", "email": "a@x", "city": "Oslo", "balance": "12.50"},
    }
    rec.update(over)
    return json.dumps(rec)


def land(cfg, lines, source="crm", minute=T0) -> Path:
    """``lines`` as the landing file of ``source`` and ``minute``."""
    path = landing_file(cfg.landing_path, source, minute)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def inferred_keys(spark, cfg) -> set:
    """A dimension's keys a fact's load allocated as inferred members (op ``infer`` in its log);
    none for an entity no fact references."""
    if not cfg.entity_model.inferred:
        return set()
    return {(r.source_id, r.natural_key) for r in read(spark, cfg, "outcome_log").where(F.col("op") == INFER).collect()}


def assert_equals_oracle(spark, cfg) -> None:
    """Every ingested update decided exactly once, as the reference join decides it, with the same
    surrogate keys up to numbering, and key_map holding exactly the reference's final state. A
    dimension's inferred members, allocated by a fact after its own updates (keys it never had), are
    left out of both."""
    updates = [r.asDict() for r in read(spark, cfg, "ingested_updates").collect()]
    expected, final = decide(updates, append_only=cfg.entity_model.append_only)
    inferred = inferred_keys(spark, cfg)
    assert not inferred & set(final)  # keys the dimension had never fill an inferred member here
    got = {r.update_id: r for r in read(spark, cfg, "outcome_log").where(F.col("op") != INFER).collect()}
    assert len(got) == len(updates)  # every update decided exactly once
    key_of = {}
    for d in expected:
        row = got[d.update_id]
        assert (row.outcome, row.reason) == (d.outcome, d.reason), d.update_id
        assert key_of.setdefault(d.surrogate_key, row.surrogate_key) == row.surrogate_key  # same key, always
    assert len(set(key_of.values())) == len(key_of)  # and never one key for two natural keys
    km = {(r.source_id, r.natural_key): r for r in read(spark, cfg, "key_map").collect()}
    assert set(km) - inferred == set(final)
    for k, state in final.items():
        assert (km[k].surrogate_key, km[k].last_source_seq, km[k].row_hash) == (
            key_of[state.surrogate_key], state.last_source_seq, state.row_hash
        )


def assert_entity_equals_oracle(spark, cfg) -> None:
    """The entity's table (current or history) holds exactly the rows the reference expects from
    the ingested updates, with the surrogate keys ``key_map`` gives their natural keys."""
    entity = cfg.entity_model
    updates = [r.asDict() for r in read(spark, cfg, "ingested_updates").collect()]
    decisions, final = decide(updates)
    expected = entity_rows(updates, decisions, tuple(c.name for c in entity.columns), entity.history, entity.type1)
    inferred = inferred_keys(spark, cfg)
    km = {(r.source_id, r.natural_key): r.surrogate_key for r in read(spark, cfg, "key_map").collect()
          if (r.source_id, r.natural_key) not in inferred}
    got = [r.asDict() for r in read(spark, cfg, entity.table).drop("updated_batch_seq").collect()
           if (r.source_id, r.natural_key) not in inferred]
    for row in expected:
        row["surrogate_key"] = km[(row["source_id"], row["natural_key"])]
        if entity.inferred:  # a dimension some fact references; no fact loaded here
            row["is_inferred"] = False
    order = ("surrogate_key", "source_seq") if entity.history == "history" else ("surrogate_key",)
    key = lambda r: tuple(r[c] for c in order)  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert {k: v.surrogate_key for k, v in final.items()}.keys() == km.keys()


# Columns that record how a run was cut into releases, not what it decided (the entity's table:
# its updated_batch_seq, whatever its name).
BOOKKEEPING = {
    "key_map": ("created_batch_seq", "updated_batch_seq", "segment_id"),  # segment_id: placement, by layout
    "customer_current": ("updated_batch_seq",),
    "outcome_log": ("batch_seq", "batch_index", "is_last_applied", "stored_source_seq"),
    "applied_changes": ("batch_seq", "batch_index", "is_last_applied", "stored_source_seq"),
    "duplicates_quarantine": ("batch_seq", "batch_index", "is_last_applied", "stored_source_seq"),
}


def canonical(spark, cfg, name: str):
    """``name`` with each surrogate key replaced by the natural key it stands for."""
    entity_table = ("updated_batch_seq",) if name == cfg.entity_model.table else ()
    df = read(spark, cfg, name).drop(*BOOKKEEPING.get(name, entity_table))
    if "surrogate_key" in df.columns:
        df = with_natural_keys(df, read(spark, cfg, "key_map"))
    return df.select(sorted(df.columns)).orderBy(*sorted(df.columns))


def assert_same_warehouse(spark, a, b, tables=None) -> None:
    """Warehouses ``a`` and ``b`` hold the same rows up to the numbering of keys allocated."""
    entity_table = a.entity_model.table
    for name in tables or [n if n != "customer_current" else entity_table for n in BOOKKEEPING]:
        assert_df_equality(canonical(spark, a, name), canonical(spark, b, name), ignore_nullable=True)


# The process-level tests (crash harness, concurrent jobs) share one small stream, ingested once,
# and per strategy its uninterrupted run (fixtures in tests/etl/conftest.py).
CRASH_T0 = datetime(2026, 11, 22, 5, 0, tzinfo=timezone.utc)
CRASH_RUN = Interval(CRASH_T0, CRASH_T0 + timedelta(minutes=2))
# make crash-matrix's last line: the table services' crash points (tests/etl/test_crash.py)
CRASH_SERVICES = os.environ.get("ETL_CRASH_SERVICES", "") == "1"
CRASH_SETTINGS = dict(
    micro_batch_seconds=40, key_domain=300, n_part=8, k=3, d=1, memory_budget=3000, n_invoke=15,
    wait_buffer_tuples=60, tau=50, spark_shuffle_partitions=2, spark_master="local[2]",
    # These tables are far below deletion_vectors_from_bytes, so the default rewrites;
    # `ETL_CRASH_DELETION_VECTORS=on make crash-matrix` runs the harness with deletion vectors in use.
    deletion_vectors=os.environ.get("ETL_CRASH_DELETION_VECTORS", "auto"),
    # With the table services' points (`ETL_CRASH_SERVICES=1`), segments of at most 20 rows: the
    # run's keys grow its segments past them, so partitioned-range's end splits them (the default
    # bound of 16; otherwise it finds nothing due, and only records and settles what it owes).
    theta=10 if CRASH_SERVICES else EtlConfig.theta,
)


def crash_config(root: Path, landing: Path) -> EtlConfig:
    return EtlConfig(
        warehouse_root=str(root / "warehouse"), landing_root=str(landing), gx_root=str(root / "gx"),
        runs_root=str(root / "runs"), reports_root=str(root / "reports"), **CRASH_SETTINGS,
    )


def crash_settings_json(cfg: EtlConfig) -> str:
    """``--settings-json`` for an `etl` process of the crash harness: ``cfg``'s roots and settings."""
    return settings_json(cfg, ("warehouse_root", "landing_root", "gx_root", "runs_root", "reports_root", "model_file",
                               "entity", "apply_interval_seconds", "key_map_files_per_segment", *CRASH_SETTINGS))


def deterministic_tables(spark, cfg, without_inferred: bool = False) -> dict:
    """Every table whose content is a pure function of input and starting state, as sorted rows;
    ``without_inferred``: a dimension's rows of the inferred members a fact allocated left out."""
    inferred = inferred_keys(spark, cfg) if without_inferred else set()
    return {name: sorted(r for r in read(spark, cfg, name).collect()
                         if not ({"source_id", "natural_key"} <= set(r.asDict()) and (r.source_id, r.natural_key) in inferred))
            for name in deterministic(cfg.entity_model)}


def reference_in_memory(cfg: EtlConfig, root: Path) -> EtlConfig:
    """``cfg`` for a warehouse under ``root`` that a test loads in its own session only to compare
    another with (the same job's runs one after the other): its tables in this process's memory
    (``table_store = memory``), since Delta is not what such a reference claims, the warehouse it
    is compared with stays on Delta, and every MERGE is held equal on both stores
    (tests/etl/load/test_apply.py). About a third of the time of the same loads on Delta. Under a
    test's ``tmp_path``, the ``memory_tables_dropped`` fixture (tests/conftest.py) drops it after
    the test; a session fixture drops its own (``etl.io.memory_tables.forget_under``)."""
    return cfg.replace(table_store="memory", warehouse_root=str(root / "warehouse"), runs_root=str(root / "runs"),
                       gx_root=str(root / "gx"), reports_root=str(root / "reports"))


def start_from(ingested: Path, root: Path) -> None:
    """A copy of the ingested warehouse (and its run summaries) under ``root``."""
    for part in ("warehouse", "runs"):
        shutil.copytree(ingested / part, root / part, dirs_exist_ok=True)


# The strategy tests' seeded warehouses (tests/etl/strategies/conftest.py): FIRST loaded by native,
# SECOND ingested; each test loads SECOND into a copy (``copy_of``).
SEEDED_T0 = datetime(2026, 11, 22, 3, 0, tzinfo=timezone.utc)
SEEDED_FIRST = Interval(SEEDED_T0, SEEDED_T0 + timedelta(minutes=2))
SEEDED_SECOND = Interval(SEEDED_T0 + timedelta(minutes=2), SEEDED_T0 + timedelta(minutes=4))
SEEDED_SETTINGS = dict(
    micro_batch_seconds=40, key_domain=300, n_part=8, k=3, d=1,  # d=1 byte: three disk segments
    memory_budget=3000, n_invoke=15, wait_buffer_tuples=60, tau=50,
)


def seeded_warehouses(spark, cfg: EtlConfig, root: Path, layouts, strategies=()) -> tuple[dict, dict]:
    """The seeded warehouse, built one way for every module that needs it: per ``layout`` (range,
    hash) a warehouse under ``root`` with SEEDED_FIRST loaded by ``native`` (so ``key_map`` is not
    empty and MESHJOIN really cycles over its disk segments) and SEEDED_SECOND ingested, from
    ``cfg``'s landing zone; then SECOND loaded by each of ``strategies`` into a copy of its
    layout's seed, side by side. Returns (per layout, per strategy) configurations."""
    from etl import jobs
    from etl.core import registry
    from etl.io.layout_store import load_layout

    seeds = {}
    for kind in sorted(set(layouts) | {registry.spec(s).new_layout for s in strategies}):
        seed = cfg.replace(warehouse_root=str(root / kind / "warehouse"), runs_root=str(root / kind / "runs"),
                           gx_root=str(root / kind / "gx"))
        load_layout(seed, kind)
        one_batch = seed.replace(micro_batch_seconds=120)  # the seed's own cut does not matter: keep it cheap
        jobs.ingest(spark, one_batch, SEEDED_FIRST)
        jobs.load(spark, one_batch, SEEDED_FIRST, strategy="native")
        jobs.ingest(spark, seed, SEEDED_SECOND)
        seeds[kind] = seed
    loaded = {}
    for strategy in strategies:
        loaded[strategy] = copy_of(seeds[registry.spec(strategy).new_layout], root / "loads", strategy)
        jobs.load(spark, loaded[strategy], SEEDED_SECOND, strategy=strategy)
    return seeds, loaded


def copy_of(seed: EtlConfig, tmp_path, name: str) -> EtlConfig:
    """A copy of the warehouse of ``seed`` under ``tmp_path/name``, with its own runs."""
    copy = seed.replace(warehouse_root=str(tmp_path / name / "warehouse"), runs_root=str(tmp_path / name / "runs"))
    shutil.copytree(seed.warehouse_path, copy.warehouse_path)  # the meta files, and a Delta warehouse's tables
    if seed.table_store == "memory":
        memory_tables.copy(seed, copy)
    return copy


class FakeClock:
    """Time for ``etl.stream.Stream`` that passes only when it sleeps: every landing minute closes
    while the stream waits for it, and a test never waits for the wall clock."""

    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=max(seconds, 0.001))


def die_after(loader, applies: int, message: str = "killed") -> None:
    """The ``loader``'s apply after its first ``applies`` raises, as a kill between a batch's
    write-ahead commit and its MERGEs would stop the load there."""
    original, seen = loader.protocol.apply, {"n": 0}

    def dying(*args, **kwargs):
        seen["n"] += 1
        if seen["n"] > applies:
            raise RuntimeError(message)
        return original(*args, **kwargs)

    loader.protocol.apply = dying
