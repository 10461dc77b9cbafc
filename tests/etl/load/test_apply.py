"""The load's table operations on a few rows each, compared as whole frames: both MERGEs change a
row only for a newer batch (so recovery may apply a batch twice), and the key_map MERGE reads
only the segments the batch touches. Each MERGE runs on both implementations of the table handle
(Delta, and the in-memory tables the protocol tests use) against the same expected rows."""

from datetime import datetime
from decimal import Decimal

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from etl.core import merge_rules
from etl.core.delays import Arrivals, Delays, batch_delays
from etl.io.tables import open_tables, read
from etl.io import memory_tables
from etl.io.delta_merges import key_map_merge_condition
from etl.load.apply import arrivals_at, summarise_outcomes
from etl.transforms.history import history_changes, history_validity
from etl.transforms.merge_on_read import merge_on_read
from warehouse.schemas import CUSTOMER_CURRENT, KEY_MAP

T1, T2, T3 = (datetime(2026, 11, 22, 1, 0, s) for s in (1, 2, 3))
CHANGES = ("source_id string, natural_key string, surrogate_key long, applied_row_hash string, max_source_seq long, "
           "last_arrival_ts timestamp, new_arrival_ts timestamp, batch_seq long, is_new boolean, segment_id int")


@pytest.fixture(params=["delta", "memory"])
def store(request, tmp_path):
    """Each MERGE test once per implementation of the table handle (``table_store``)."""
    yield request.param
    memory_tables.forget_under(str(tmp_path))


def handle(spark, cfg, store):
    cfg = cfg.replace(table_store=store)
    tables = open_tables(spark, cfg)
    tables.ensure()
    return cfg, tables


def merge_read_and_written(spark, cfg, tables, changes) -> None:
    """The entity table's MERGE of ``changes`` run two ways: read (``merge_on_read`` of the table
    as it was, by ``merge_rules``) and written (the handle's MERGE); the same rows (issue 46's
    merge-on-read view)."""
    entity = cfg.entity_model
    history = entity.history == "history"
    changes = changes.localCheckpoint(eager=True)  # decided against the table before the MERGE
    before = read(spark, cfg, entity.table)
    before = spark.createDataFrame(before.collect(), before.schema)
    rules = (merge_rules.history(before.columns, entity.inferred, entity.type1) if history else merge_rules.CURRENT)
    on_read = merge_on_read(before, changes if history else tables.conform(changes, entity.table), rules).collect()
    tables.merge_history(changes) if history else tables.merge_current(changes)
    after = read(spark, cfg, entity.table)
    assert_df_equality(spark.createDataFrame(on_read, after.schema), after, ignore_row_order=True, ignore_nullable=True)


def test_merge_key_map_advances_known_keys_inserts_new_ones_and_ignores_a_replay(spark, cfg, store):
    cfg, tables = handle(spark, cfg, store)
    before = [("crm", "1", 1, "h1", 5, T1, T1, 1, 1, 0)]
    tables.append(spark.createDataFrame(before, KEY_MAP), "key_map")
    changes = spark.createDataFrame([
        ("crm", "1", 1, "h2", 7, T2, None, 2, False, 0),  # a known key changed
        ("crm", "2", 2, "h3", 1, T2, T2, 2, True, 1),  # a new key
        ("crm", "3", 3, None, 4, T2, None, 2, False, 1),  # not new and not stored: nothing to insert
    ], CHANGES)
    tables.merge_key_map(changes)
    want = spark.createDataFrame([
        ("crm", "1", 1, "h2", 7, T1, T2, 1, 2, 0),
        ("crm", "2", 2, "h3", 1, T2, T2, 2, 2, 1),
    ], KEY_MAP)
    assert_df_equality(read(spark, cfg, "key_map"), want, ignore_row_order=True, ignore_nullable=True)

    tables.merge_key_map(changes)  # recovery applies the same batch again
    older = spark.createDataFrame([("crm", "1", 1, "h0", 9, T3, None, 1, False, 0)], CHANGES)
    tables.merge_key_map(older)  # and an older batch never overwrites a newer one
    assert_df_equality(read(spark, cfg, "key_map"), want, ignore_row_order=True, ignore_nullable=True)


def test_merge_key_map_keeps_a_value_the_batch_does_not_know_and_matches_only_in_the_named_segments(spark, cfg, store):
    """The edges where an implementation could differ from Delta: a null in the batch keeps the
    stored value (coalesce, greatest), a key stored in a segment the condition does not name is
    no match, and two changes of one key are refused."""
    cfg, tables = handle(spark, cfg, store)
    tables.append(spark.createDataFrame([("crm", "1", 1, "h1", 5, T1, T2, 1, 1, 0), ("crm", "2", 2, "h2", 3, T1, T1, 1, 1, 1)],
                                        KEY_MAP), "key_map")
    tables.merge_key_map(spark.createDataFrame([
        ("crm", "1", 1, None, None, None, None, 2, False, 0),  # known, nothing new about it
        ("crm", "2", 9, "h9", 4, T3, T3, 2, True, 1),  # stored in segment 1, which is not named
    ], CHANGES), segments=[0])
    want = spark.createDataFrame([
        ("crm", "1", 1, "h1", 5, T1, T2, 1, 2, 0),
        ("crm", "2", 2, "h2", 3, T1, T1, 1, 1, 1),
        ("crm", "2", 9, "h9", 4, T3, T3, 2, 2, 1),
    ], KEY_MAP)
    assert_df_equality(read(spark, cfg, "key_map"), want, ignore_row_order=True, ignore_nullable=True)
    twice = spark.createDataFrame([("crm", "1", 1, "h3", 6, T3, None, 3, False, 0)] * 2, CHANGES)
    with pytest.raises(Exception, match="(?i)multiple source rows|two source rows"):
        tables.merge_key_map(twice)


OUTCOMES = ("source_id string, natural_key string, surrogate_key long, outcome string, is_last_applied boolean, "
            "row_hash string, source_seq long, arrival_ts timestamp, batch_seq long")


def test_logged_batches_merged_on_read_are_key_map_after_their_merges(spark, cfg, tmp_path, store):
    """Two logged batches (issue 46): ``key_map_on_read`` of their changes (what the join reads
    while they are unapplied) equals key_map after one MERGE of both (the coalesced apply), which
    equals key_map after each batch's own MERGE; a key new in the first batch keeps that batch as
    its ``created_batch_seq``; a filter on the segment gives the same rows on both sides."""
    from etl.transforms.outcomes import combine_changes, key_map_changes, key_map_on_read

    cfg, together = handle(spark, cfg, store)
    apart_cfg, apart = handle(spark, cfg.replace(warehouse_root=str(tmp_path / "apart")), store)
    stored = [("crm", "1", 1, "h1", 5, T1, T1, 1, 1, 0), ("crm", "2", 2, "h2", 3, T1, T1, 1, 1, 1)]
    for t in (together, apart):
        t.append(spark.createDataFrame(stored, KEY_MAP), "key_map")
    second = [("crm", "1", 1, "matched", True, "h1b", 6, T2, 2), ("crm", "3", 3, "new", False, "h3", 1, T2, 2),
              ("crm", "3", 3, "matched", True, "h3b", 2, T2, 2)]
    third = [("crm", "1", 1, "duplicate", False, "h1b", 6, T3, 3), ("crm", "3", 3, "matched", True, "h3c", 3, T3, 3),
             ("crm", "4", 4, "new", True, "h4", 1, T3, 3), ("crm", "2", 2, "stale", False, "h0", 1, T3, 3)]

    def segment_of(source, key):
        return F.when(key.isin("1", "3"), F.lit(0)).otherwise(F.lit(1))

    both = key_map_changes(spark.createDataFrame(second + third, OUTCOMES), segment_of)
    # A tail grown batch by batch: the two batches' changes combined are the changes of both.
    combined = combine_changes(*(key_map_changes(spark.createDataFrame(b, OUTCOMES), segment_of) for b in (second, third)))
    assert_df_equality(combined, both, ignore_row_order=True, ignore_nullable=True, ignore_column_order=True)
    on_read = key_map_on_read(read(spark, cfg, "key_map"), both).localCheckpoint()
    together.merge_key_map(both)
    for batch in (second, third):
        apart.merge_key_map(key_map_changes(spark.createDataFrame(batch, OUTCOMES), segment_of))
    merged = read(spark, cfg, "key_map")
    assert_df_equality(on_read, merged, ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(read(spark, apart_cfg, "key_map"), merged, ignore_row_order=True, ignore_nullable=True)
    assert {r.natural_key: (r.created_batch_seq, r.updated_batch_seq, r.row_hash) for r in merged.collect()} == {
        "1": (1, 3, "h1b"), "2": (1, 3, "h2"), "3": (2, 3, "h3c"), "4": (3, 3, "h4")}
    assert_df_equality(on_read.where("segment_id = 1"), merged.where("segment_id = 1"), ignore_row_order=True,
                       ignore_nullable=True)


def test_merge_current_keeps_the_newest_state_of_each_key(spark, cfg, store):
    cfg, tables = handle(spark, cfg, store)

    def row(key, name, batch_seq, deleted=False):
        return (key, "crm", str(key), name, f"{name}@x", "Oslo", Decimal("1.00"), deleted, f"h-{name}", batch_seq, T1, T2, batch_seq)

    state = spark.createDataFrame([row(1, "a", 1), row(2, "b", 1)], CUSTOMER_CURRENT)
    tables.merge_current(state)
    merge_read_and_written(spark, cfg, tables, spark.createDataFrame([row(1, "a2", 3, deleted=True), row(2, "stale", 0)],
                                                                     CUSTOMER_CURRENT))
    merge_read_and_written(spark, cfg, tables, spark.createDataFrame([row(1, "a2", 3, deleted=True)], CUSTOMER_CURRENT))  # a replay
    want = spark.createDataFrame([row(1, "a2", 3, deleted=True), row(2, "b", 1)], CUSTOMER_CURRENT)
    assert_df_equality(read(spark, cfg, "customer_current"), want, ignore_row_order=True, ignore_nullable=True)


def test_a_batch_summary_counts_outcomes_and_knows_its_first_new_key(spark):
    rows = [("u1", "new", None, 7, T1), ("u2", "new", None, 8, T2), ("u3", "matched", None, 3, T2),
            ("u4", "duplicate", "sequence_conflict", 3, T3)]
    outcomes = spark.createDataFrame(rows, "update_id string, outcome string, reason string, surrogate_key long, arrival_ts timestamp")
    summary = summarise_outcomes(outcomes, cut_s=T3.timestamp())
    assert summary["n"] == 4 and summary["min_new_key"] == 7 and summary["sequence_conflicts"] == 1
    assert summary["counts"] == {"matched": 1, "new": 2, "duplicate": 1, "stale": 0}
    assert summary["arrivals"] == Arrivals(T3.timestamp(), 4, sum(r[-1].timestamp() for r in rows) / 4, T1.timestamp(), 0, None)
    assert summarise_outcomes(outcomes)["arrivals"] is None  # recovery's summary: no delays


def test_a_batch_summary_splits_arrivals_after_the_commit_off_as_clock_skew(spark):
    """A replayed producer stamped two updates months after the commit; a third lies between the
    summary's cut and the commit: the split is taken again at the commit, where it is on time."""
    future = datetime(2027, 3, 10, 10, 20)
    rows = [("u1", "new", 7, T1), ("u2", "new", 8, future), ("u3", "matched", 7, future), ("u4", "matched", 8, T3)]
    outcomes = spark.createDataFrame(rows, "update_id string, outcome string, surrogate_key long, arrival_ts timestamp") \
        .withColumn("reason", F.lit(None).cast("string"))
    cut, commit = T2.timestamp(), T3.timestamp() + 1
    arrivals = summarise_outcomes(outcomes, cut_s=cut)["arrivals"]
    assert arrivals == Arrivals(cut, 1, T1.timestamp(), T1.timestamp(), 3, T3.timestamp())
    assert not arrivals.split_as_at(commit)
    at_commit = arrivals_at(outcomes, commit)
    assert at_commit == Arrivals(commit, 2, (T1.timestamp() + T3.timestamp()) / 2, T1.timestamp(), 2, future.timestamp())
    assert batch_delays(commit, at_commit) == Delays(commit - (T1.timestamp() + T3.timestamp()) / 2,
                                                     commit - T1.timestamp(), measured=2, clock_skew=2)


def test_the_key_map_merge_reads_only_the_segments_the_batch_touches(spark, tmp_path):
    """A file of a segment the batch does not touch is removed from disk: the MERGE with the
    loader's condition never opens it (so key_map is not scanned whole every batch), while the
    MERGE on the keys alone does and fails."""
    path = str(tmp_path / "km")
    rows = [(s, f"k{s}-{i}", s * 10 + i, s) for s in range(3) for i in range(3)]
    spark.createDataFrame(rows, "source_id int, natural_key string, surrogate_key long, segment_id int") \
        .write.format("delta").partitionBy("segment_id").save(path)
    victim = next((tmp_path / "km" / "segment_id=2").glob("*.parquet"))
    victim.unlink()
    changes = spark.createDataFrame([(0, "k0-1", 99, 0), (0, "new", 100, 0)],
                                    "source_id int, natural_key string, surrogate_key long, segment_id int")

    def merge(condition):
        (DeltaTable.forPath(spark, path).alias("t").merge(changes.alias("s"), condition)
         .whenMatchedUpdate(set={"surrogate_key": "s.surrogate_key"}).whenNotMatchedInsertAll().execute())

    assert key_map_merge_condition(changes).startswith("t.segment_id IN (0) AND ")
    merge(key_map_merge_condition(changes))
    seg0 = spark.read.format("delta").load(path).where(F.col("segment_id") == 0)
    assert sorted((r.natural_key, r.surrogate_key) for r in seg0.collect()) == [
        ("k0-0", 0), ("k0-1", 99), ("k0-2", 2), ("new", 100)
    ]
    with pytest.raises(Exception, match="(?i)not exist|FileNotFound|FAILED_READ_FILE"):
        merge("t.source_id = s.source_id AND t.natural_key = s.natural_key")



def test_compacting_segments_leaves_one_file_in_each_named_segment_and_changes_no_row(spark, tmp_path):
    """A segment's files after three appends become one; another segment keeps its files; the
    rows are the same, and the version before the compaction still reads (a pinned reader's)."""
    from etl.core.services import files_per_segment
    from etl.io.delta_merges import compact_segments

    path = str(tmp_path / "km")
    for batch in range(3):  # three MERGE-like appends: a file more in each segment each time
        rows = [(f"k{s}-{batch}-{i}", batch * 10 + i, s) for s in range(2) for i in range(2)]
        spark.createDataFrame(rows, "natural_key string, surrogate_key long, segment_id int").coalesce(1) \
            .write.format("delta").mode("append").partitionBy("segment_id").save(path)
    table = DeltaTable.forPath(spark, path)
    before_version = table.history(1).first().version
    before = spark.read.format("delta").load(path)
    before = spark.createDataFrame(before.collect(), before.schema)
    assert files_per_segment(spark.read.format("delta").load(path).inputFiles()) == {0: 3, 1: 3}

    compact_segments(table, [1])

    after = spark.read.format("delta").load(path)
    assert files_per_segment(after.inputFiles()) == {0: 3, 1: 1}
    assert_df_equality(after, before, ignore_row_order=True, ignore_nullable=True)
    pinned = spark.read.format("delta").option("versionAsOf", before_version).load(path)
    assert_df_equality(pinned, before, ignore_row_order=True, ignore_nullable=True)
    assert table.history(1).first().operation == "OPTIMIZE"



HISTORY_MODEL = """
[entities.account]
key = { number = "integer" }
attributes = { holder = "string" }
history = "history"
"""
LOGGED = ("update_id string, surrogate_key long, source_id string, natural_key string, number long, holder string, "
          "op string, row_hash string, source_seq long, event_ts timestamp, arrival_ts timestamp, applies boolean, batch_seq long")


def history_applier(spark, cfg, tables):
    """Logged rows (``LOGGED``) -> the history MERGE of ``cfg``'s account entity, as the loader applies them."""
    entity = cfg.entity_model

    def apply(rows):
        logged = spark.createDataFrame(rows, LOGGED)
        opened = read(spark, cfg, "account_history").where("is_current")
        merge_read_and_written(spark, cfg, tables, history_changes(logged, opened, entity))

    return apply


def test_merge_history_closes_the_open_version_inserts_the_batch_s_and_ignores_a_replay(spark, cfg, tmp_path, store):
    model = tmp_path / "model.toml"
    model.write_text(HISTORY_MODEL)
    cfg, tables = handle(spark, cfg.replace(model_file=str(model), warehouse_root=str(tmp_path / "history-warehouse")), store)
    apply = history_applier(spark, cfg, tables)

    first = [("u1", 1, "crm", "1", 1, "A", "upsert", "h1", 10, T2, T2, True, 1)]
    apply(first)
    second = [
        ("u2", 1, "crm", "1", 1, "B", "upsert", "h2", 11, T1, T3, True, 2),  # its event time is earlier: starts at T2
        ("u3", 1, "crm", "1", 1, "C", "upsert", "h3", 12, T3, T3, True, 2),
        ("u4", 1, "crm", "1", 1, "old", "upsert", "h4", 9, T3, T3, False, 2),  # stale: never a version
        ("u5", 2, "crm", "2", 2, None, "delete", "h5", 3, T3, T3, True, 2),  # a new key, deleted: one version
    ]
    apply(second)
    apply(second)  # recovery applies the batch again
    got = read(spark, cfg, "account_history").select(
        "surrogate_key", "holder", "is_deleted", "source_seq", "valid_from", "valid_to", "is_current", "updated_batch_seq")
    want = spark.createDataFrame([
        (1, "A", False, 10, T2, T2, False, 2),
        (1, "B", False, 11, T2, T3, False, 2),
        (1, "C", False, 12, T3, None, True, 2),
        (2, None, True, 3, T3, None, True, 2),
    ], "surrogate_key long, holder string, is_deleted boolean, source_seq long, valid_from timestamp, "
       "valid_to timestamp, is_current boolean, updated_batch_seq long")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    validity = history_validity(read(spark, cfg, "account_history")).orderBy("surrogate_key").collect()
    assert [(r.open_versions, r.last_open, r.overlaps, r.gaps, r.inverted) for r in validity] == [(1, 1, 0, 0, 0)] * 2


def test_logged_batches_applied_together_after_part_of_them_was_add_only_the_rest(spark, cfg, tmp_path, store):
    """Issue 46: logged batches are applied together, and a group whose first batches a MERGE of
    the history has applied already (a recovery cut short between its two MERGEs) is applied
    again whole: only what is not there is added, and the history is that of each batch applied
    once, in order (no version closed at its own start, none left open beside a newer one)."""
    model = tmp_path / "model.toml"
    model.write_text(HISTORY_MODEL)
    history = cfg.replace(model_file=str(model))
    cfg, tables = handle(spark, history.replace(warehouse_root=str(tmp_path / "together")), store)
    apart_cfg, apart_tables = handle(spark, history.replace(warehouse_root=str(tmp_path / "apart")), store)
    together, apart = history_applier(spark, cfg, tables), history_applier(spark, apart_cfg, apart_tables)
    b1 = [("u1", 1, "crm", "1", 1, "A", "upsert", "h1", 10, T1, T1, True, 1)]
    b2 = [("u2", 1, "crm", "1", 1, "B", "upsert", "h2", 11, T2, T2, True, 2),
          ("u3", 2, "crm", "2", 2, "X", "upsert", "h3", 1, T2, T2, True, 2)]
    b3 = [("u4", 1, "crm", "1", 1, "C", "upsert", "h4", 12, T3, T3, True, 3),
          ("u5", 2, "crm", "2", 2, None, "delete", "h5", 2, T3, T3, True, 3)]
    for batch in (b1, b2, b3):
        apart(batch)
    together(b1)
    together(b1 + b2)  # b1 applied, b2 not: the group again
    together(b1 + b2 + b3)
    together(b1 + b2 + b3)  # and once more, all applied
    want = read(spark, apart_cfg, "account_history")
    assert want.count() == 5
    assert_df_equality(read(spark, cfg, "account_history"), want, ignore_row_order=True, ignore_nullable=True)
    validity = history_validity(read(spark, cfg, "account_history")).collect()
    assert [(r.open_versions, r.last_open, r.overlaps, r.gaps, r.inverted) for r in validity] == [(1, 1, 0, 0, 0)] * 2


def test_history_validity_finds_overlaps_gaps_and_a_second_open_version(spark):
    rows = spark.createDataFrame([
        (1, 1, T1, T3, False), (1, 2, T2, None, True),  # overlap: [T1, T3) and [T2, ..)
        (2, 1, T1, T1, False), (2, 2, T2, None, True),  # gap between T1 and T2
        (3, 1, T1, None, True), (3, 2, T2, None, True),  # two open versions
    ], "surrogate_key long, source_seq long, valid_from timestamp, valid_to timestamp, is_current boolean")
    got = {r.surrogate_key: (r.open_versions, r.overlaps, r.gaps) for r in history_validity(rows).collect()}
    assert got == {1: (1, 1, 0), 2: (1, 0, 1), 3: (2, 1, 0)}


INFERRED_MODEL = HISTORY_MODEL + """
[entities.payments]
kind = "fact"
key = { id = "integer" }
attributes = { number = "integer" }
references = { account_sk = { dimension = "account", by = ["number"] } }
"""


def test_an_inferred_member_s_placeholder_version_gives_way_to_the_first_real_one(spark, cfg, tmp_path, store):
    """A dimension some fact references: the inferred member (op infer, sequence -1) is one open
    version flagged is_inferred; the first real update replaces it (same key, its own start, no
    close of the placeholder), later ones version as usual; a replay changes nothing."""
    model = tmp_path / "model.toml"
    model.write_text(INFERRED_MODEL)
    cfg, tables = handle(spark, cfg.replace(model_file=str(model), entity="account",
                                            warehouse_root=str(tmp_path / "inferred-warehouse")), store)
    assert cfg.entity_model.inferred
    apply = history_applier(spark, cfg, tables)

    apply([("inferred:payments:crm/1", 1, "crm", "1", 1, None, "infer", "", -1, T3, T3, True, 1)])  # a payment at T3 first
    second = [("u1", 1, "crm", "1", 1, "A", "upsert", "h1", 10, T1, T3, True, 2),  # starts at T1, before the payment
              ("u2", 1, "crm", "1", 1, "B", "upsert", "h2", 11, T2, T3, True, 2)]
    apply(second)
    apply(second)
    got = read(spark, cfg, "account_history").select(
        "surrogate_key", "holder", "is_inferred", "source_seq", "valid_from", "valid_to", "is_current")
    want = spark.createDataFrame([(1, "A", False, 10, T1, T2, False), (1, "B", False, 11, T2, None, True)],
                                 "surrogate_key long, holder string, is_inferred boolean, source_seq long, valid_from timestamp, "
                                 "valid_to timestamp, is_current boolean")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


TYPE1_MODEL = """
[entities.account]
key = { number = "integer" }
attributes = { holder = "string", email = "string" }
history = "history"
type1 = ["email"]
"""
TYPE1_LOGGED = LOGGED.replace("holder string, ", "holder string, email string, ")


def digests(version: str, type1: str) -> str:
    """A type1 entity's row hash: the version columns' digest, then the type1 columns' (64 hex each)."""
    return version.ljust(64, "0") + type1.ljust(64, "0")


def test_type1_columns_are_overwritten_on_every_version_and_their_change_alone_makes_none(spark, cfg, tmp_path, store):
    """``type1 = ["email"]``: a change of the e-mail only keeps the open version open and sets the
    e-mail on it; a batch with a new version and a delete sets the last upsert's e-mail on every
    version of the key, old ones included; two e-mail changes in one batch make no version; a
    version whose e-mail is already the key's is not rewritten; a replay changes nothing, also of
    a batch whose first update of a key made no version."""
    model = tmp_path / "model.toml"
    model.write_text(TYPE1_MODEL)
    cfg, tables = handle(spark, cfg.replace(model_file=str(model), warehouse_root=str(tmp_path / "type1-warehouse")), store)
    entity = cfg.entity_model

    def apply(rows):
        logged = spark.createDataFrame(rows, TYPE1_LOGGED)
        merge_read_and_written(spark, cfg, tables,
                               history_changes(logged, read(spark, cfg, "account_history").where("is_current"), entity))

    def got():
        return read(spark, cfg, "account_history").select(
            "surrogate_key", "holder", "email", "is_deleted", "source_seq", "valid_from", "valid_to", "is_current")

    schema = ("surrogate_key long, holder string, email string, is_deleted boolean, source_seq long, valid_from timestamp, "
              "valid_to timestamp, is_current boolean")
    apply([("u1", 1, "crm", "1", 1, "A", "a1", "upsert", digests("A", "a1"), 10, T1, T1, True, 1)])
    apply([("u2", 1, "crm", "1", 1, "A", "a2", "upsert", digests("A", "a2"), 11, T2, T2, True, 2),  # the e-mail only
           ("u3", 2, "crm", "2", 2, "X", "x1", "upsert", digests("X", "x1"), 3, T1, T2, True, 2)])
    assert_df_equality(got(), spark.createDataFrame([
        (1, "A", "a2", False, 10, T1, None, True),
        (2, "X", "x1", False, 3, T1, None, True),
    ], schema), ignore_row_order=True, ignore_nullable=True)
    third = [
        ("u4", 1, "crm", "1", 1, "B", "a3", "upsert", digests("B", "a3"), 12, T2, T3, True, 3),
        ("u5", 1, "crm", "1", 1, None, None, "delete", digests("D", ""), 13, T3, T3, True, 3),  # gone, not a new e-mail
        ("u6", 2, "crm", "2", 2, "X", "x2", "upsert", digests("X", "x2"), 4, T2, T3, True, 3),
        ("u7", 2, "crm", "2", 2, "X", "x3", "upsert", digests("X", "x3"), 5, T3, T3, True, 3),
        ("u8", 2, "crm", "2", 2, "Y", "x9", "upsert", digests("Y", "x9"), 2, T3, T3, False, 3),  # stale: nothing
    ]
    apply(third)
    apply(third)  # recovery applies the batch again
    want = spark.createDataFrame([
        (1, "A", "a3", False, 10, T1, T2, False),
        (1, "B", "a3", False, 12, T2, T3, False),
        (1, None, "a3", True, 13, T3, None, True),
        (2, "X", "x3", False, 3, T1, None, True),
    ], schema)
    assert_df_equality(got(), want, ignore_row_order=True, ignore_nullable=True)
    # A batch whose first update of key 2 changes the e-mail only, its second the holder: replayed,
    # the first is not judged again against the version the second made. Key 1 comes back with its
    # e-mail unchanged: only its open version is rewritten (closed), the older ones keep batch 3.
    fourth = [
        ("u9", 2, "crm", "2", 2, "X", "x4", "upsert", digests("X", "x4"), 6, T2, T3, True, 4),
        ("u10", 2, "crm", "2", 2, "Z", "x5", "upsert", digests("Z", "x5"), 7, T3, T3, True, 4),
        ("u11", 1, "crm", "1", 1, "C", "a3", "upsert", digests("C", "a3"), 14, T3, T3, True, 4),
    ]
    apply(fourth)
    apply(fourth)
    want = spark.createDataFrame([
        (1, "A", "a3", False, 10, T1, T2, False, 3),
        (1, "B", "a3", False, 12, T2, T3, False, 3),
        (1, None, "a3", True, 13, T3, T3, False, 4),
        (1, "C", "a3", False, 14, T3, None, True, 4),
        (2, "X", "x5", False, 3, T1, T3, False, 4),
        (2, "Z", "x5", False, 7, T3, None, True, 4),
    ], schema + ", updated_batch_seq long")
    assert_df_equality(got().join(read(spark, cfg, "account_history").select("surrogate_key", "source_seq", "updated_batch_seq"),
                                  ["surrogate_key", "source_seq"]).select(want.columns),
                       want, ignore_row_order=True, ignore_nullable=True)
    validity = history_validity(read(spark, cfg, "account_history")).collect()
    assert [(r.open_versions, r.last_open, r.overlaps, r.gaps, r.inverted) for r in validity] == [(1, 1, 0, 0, 0)] * 2
