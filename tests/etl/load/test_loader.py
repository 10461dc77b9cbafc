"""The contract of DESIGN.md §3 on the native strategy, with real Spark. The protocol's claims
(idempotence, recovery, the ledger, the oracle's outcomes) run on tables in the test process's
memory (``memory_tables``); what is Delta's (an older version's Delta table, a URI warehouse,
deletion vectors, the Spark jobs of a commit) on Delta tables."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

import etl
from benchmarks.measures import delta_commits, jobs_started
from etl import jobs
from etl.core.interval import Interval
from etl.core.oracle import decide
from etl.fresh import fresh
from etl.generator import StreamSpec, generate_stream
from etl.io.tables import read
from etl.load.loader import Loader, OverlappingRunError
from tests.helpers import copy_of, deterministic_tables, die_after, good, land, reference_in_memory
from warehouse.schemas import DETERMINISTIC_TABLES, TABLES

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
RUN = Interval(T0, T0 + timedelta(minutes=2))  # two micro-batches: keys recur across them


def stream(cfg, **over):
    params = dict(start=T0, duration_s=120, rate=12, key_domain=300, new_key_share=0.1, duplicate_share=0.05,
                  unchanged_share=0.05, malformed_share=0.02, b=0.7, seed=11)
    params.update(over)
    return generate_stream(StreamSpec(**params), cfg.landing_path)


def ingest_and_load(spark, cfg, interval=RUN):
    jobs.ingest(spark, cfg, interval)
    return jobs.load(spark, cfg, interval)


def snapshot(spark, cfg, names=tuple(TABLES)):
    """Every table, collected in a canonical order."""
    out = {}
    for name in names:
        df = read(spark, cfg, name)
        out[name] = df.orderBy(*df.columns)
    return out


@pytest.mark.memory_tables
def test_rerunning_the_same_interval_leaves_every_table_unchanged(spark, cfg):
    stream(cfg)
    first = ingest_and_load(spark, cfg)
    assert first["batches_committed"] == 2
    before = {k: v.collect() for k, v in snapshot(spark, cfg).items()}
    again = ingest_and_load(spark, cfg)
    assert again["batches_committed"] == 0 and again["batches_already_done"] == 2
    after = {k: v.collect() for k, v in snapshot(spark, cfg).items()}
    for name in TABLES:
        assert after[name] == before[name], name


@pytest.mark.memory_tables
def test_updates_in_equal_the_sum_of_outcomes(spark, cfg):
    generated = stream(cfg)
    summary = ingest_and_load(spark, cfg)
    rep = jobs.report(cfg, RUN)
    assert rep["updates_in"] == generated.lines
    assert rep["outcomes_total"] == generated.lines
    assert rep["outcomes"]["rejected"] == generated.kinds["malformed"]
    counted = {
        "applied": read(spark, cfg, "applied_changes").count(),
        "quarantined": read(spark, cfg, "duplicates_quarantine").count(),
        "rejected": read(spark, cfg, "rejected_updates").count(),
    }
    assert sum(counted.values()) == generated.lines
    assert counted["applied"] == summary["outcomes"]["matched"] + summary["outcomes"]["new"]
    assert summary["keys_allocated"] == read(spark, cfg, "key_map").count() == summary["outcomes"]["new"]


@pytest.mark.memory_tables
def test_outcomes_and_keys_equal_the_oracle(spark, cfg):
    stream(cfg, key_domain=60)  # few keys: many repeats inside and across batches
    ingest_and_load(spark, cfg)
    updates = [r.asDict() for r in read(spark, cfg, "ingested_updates").collect()]
    expected, final_state = decide(updates)
    got = read(spark, cfg, "outcome_log").select("update_id", "outcome", "reason", "surrogate_key")
    want = spark.createDataFrame([(d.update_id, d.outcome, d.reason, d.surrogate_key) for d in expected], got.schema)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    key_map = read(spark, cfg, "key_map").select("source_id", "natural_key", "surrogate_key", "last_source_seq", "row_hash")
    want_km = spark.createDataFrame(
        [(s, k, v.surrogate_key, v.last_source_seq, v.row_hash) for (s, k), v in final_state.items()], key_map.schema
    )
    assert_df_equality(key_map, want_km, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.memory_tables
def test_a_natural_key_in_two_batches_and_two_runs_keeps_one_surrogate_key(spark, cfg):
    land(cfg, [good("42", seq=1, arrival_ts="2026-11-22T01:00:10Z"), good("7", seq=1)], minute=T0)
    land(cfg, [good("42", seq=2, arrival_ts="2026-11-22T01:01:10Z", attributes={"city": "Lima"})], minute=T0 + timedelta(minutes=1))
    ingest_and_load(spark, cfg, Interval(T0, T0 + timedelta(minutes=2)))
    later = Interval(T0 + timedelta(minutes=2), T0 + timedelta(minutes=3))
    land(cfg, [good("42", seq=3, arrival_ts="2026-11-22T01:02:10Z", attributes={"city": "Quito"})], minute=later.start)
    ingest_and_load(spark, cfg, later)

    keys = read(spark, cfg, "applied_changes").where("natural_key = '42'").select("outcome", "surrogate_key", "source_seq")
    # Key 7 arrived first (01:00:02) and got 1; key 42 got 2 in its first batch and keeps it.
    expected = spark.createDataFrame([("new", 2, 1), ("matched", 2, 2), ("matched", 2, 3)], keys.schema)
    assert_df_equality(keys, expected, ignore_row_order=True, ignore_nullable=True)
    assert read(spark, cfg, "key_map").where("natural_key = '42'").count() == 1
    current = read(spark, cfg, "customer_current").where("natural_key = '42'").select("surrogate_key", "city", "last_source_seq")
    assert [tuple(r) for r in current.collect()] == [(2, "Quito", 3)]


@pytest.mark.memory_tables
def test_a_loader_reused_after_another_load_continues_the_ledger(spark, cfg):
    """The loader keeps the ledger's state in memory while it holds the lock; a second load on the
    same loader must see what another loader committed in between: no reused batch_seq or key, and
    the other loader's batch is not taken for a crash's leftover and applied again."""
    minutes = [Interval(T0 + timedelta(minutes=m), T0 + timedelta(minutes=m + 1)) for m in range(3)]
    for m, interval in enumerate(minutes):
        at = (T0 + timedelta(minutes=m, seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
        land(cfg, [good(f"k{m}", seq=1, arrival_ts=at)], minute=interval.start)
        jobs.ingest(spark, cfg, interval)
    kept = Loader(spark, cfg)
    kept.load(minutes[0])
    jobs.load(spark, cfg, minutes[1])  # another loader (another process, in production)
    third = kept.load(minutes[2])

    assert (third.recovered_batches, len(third.batches)) == (0, 1)

    ledger = read(spark, cfg, "batch_ledger").select("batch_seq", "next_surrogate_key")
    assert sorted(tuple(r) for r in ledger.collect()) == [(1, 2), (2, 3), (3, 4)]
    keys = read(spark, cfg, "key_map").select("natural_key", "surrogate_key")
    assert sorted(tuple(r) for r in keys.collect()) == [("k0", 1), ("k1", 2), ("k2", 3)]


@pytest.mark.memory_tables
def test_micro_batch_split_does_not_change_the_warehouse(spark, cfg, tmp_path):
    stream(cfg, key_domain=80)
    ingest_and_load(spark, cfg)
    fine = cfg.replace(warehouse_root=str(tmp_path / "fine"), runs_root=str(tmp_path / "fine-runs"), micro_batch_seconds=30)
    assert ingest_and_load(spark, fine)["batches_committed"] == 4

    def content(c, name, drop):
        df = read(spark, c, name).drop(*drop)
        return df.orderBy(*df.columns)

    for name, drop in (
        ("key_map", ("created_batch_seq", "updated_batch_seq")),
        ("customer_current", ("updated_batch_seq",)),
        # is_last_applied and stored_source_seq describe a batch, so they depend on the split.
        ("outcome_log", ("batch_seq", "batch_index", "is_last_applied", "stored_source_seq")),
    ):
        assert_df_equality(content(cfg, name, drop), content(fine, name, drop), ignore_nullable=True)


@pytest.mark.memory_tables
def test_a_step_that_releases_nothing_takes_no_batch_seq(spark, cfg, tmp_path):
    """MESHJOIN over one disk segment releases each batch at its own step, so the end-of-run flush
    releases nothing. Its ledger row takes no batch_seq: [a, b) then [b, c) number their batches
    as one run over [a, c) does (an outside audit found them one apart per run boundary)."""
    cfg = cfg.replace(k=1)
    stream(cfg)
    whole = cfg.replace(warehouse_root=str(tmp_path / "whole"), runs_root=str(tmp_path / "whole-runs"))
    for half in (Interval(T0, T0 + timedelta(minutes=1)), Interval(T0 + timedelta(minutes=1), RUN.end)):
        jobs.ingest(spark, cfg, half)
        jobs.load(spark, cfg, half, strategy="meshjoin")
    jobs.ingest(spark, whole, RUN)
    jobs.load(spark, whole, RUN, strategy="meshjoin")
    for name, cols in (
        ("outcome_log", ("update_id", "batch_seq", "surrogate_key")),
        ("key_map", ("source_id", "natural_key", "surrogate_key", "created_batch_seq", "updated_batch_seq")),
        ("customer_current", ("surrogate_key", "updated_batch_seq")),
    ):
        assert_df_equality(read(spark, cfg, name).select(*cols), read(spark, whole, name).select(*cols),
                           ignore_row_order=True)
    flushes = read(spark, cfg, "batch_ledger").where("batch_index = -1").select("batch_seq", "updates_in")
    assert sorted(tuple(r) for r in flushes.collect()) == [(0, 0), (0, 0)]


@pytest.mark.memory_tables
def test_an_interval_overlapping_a_loaded_one_is_refused(spark, cfg):
    land(cfg, [good("1")], minute=T0)
    ingest_and_load(spark, cfg, Interval(T0, T0 + timedelta(minutes=2)))
    overlapping = Interval(T0 + timedelta(minutes=1), T0 + timedelta(minutes=3))
    with pytest.raises(OverlappingRunError, match="overlaps"):
        jobs.ingest(spark, cfg, overlapping)  # before it writes (tests/etl/test_runs.py)
    with pytest.raises(OverlappingRunError, match="overlaps"):
        Loader(spark, cfg).load(overlapping)


@pytest.mark.memory_tables
@pytest.mark.parametrize("point, recovered", [("load.current_merged", 1), ("load.key_map_merged", 0)])
def test_a_batch_cut_short_after_a_merge_ends_as_one_run_does(spark, cfg, tmp_path, monkeypatch, point, recovered):
    """Cut short after the entity table's MERGE, the restart applies the logged batch again (that
    MERGE changes nothing the second time); cut short after both (key_map's is the last), the
    batch is done and nothing is applied again. Either way the ledger has one row and every table
    equals an uninterrupted run's."""
    import etl.load.protocol as protocol_module

    stream(cfg, duration_s=60, key_domain=50, duplicate_share=0.3)
    whole = cfg.replace(warehouse_root=str(tmp_path / "whole"), runs_root=str(tmp_path / "whole-runs"))
    one = Interval(T0, T0 + timedelta(minutes=1))
    for c in (cfg, whole):
        jobs.ingest(spark, c, one)
    jobs.load(spark, whole, one)

    def killed_at(p):
        if p == point:
            raise RuntimeError(f"killed at {p}")

    monkeypatch.setattr(protocol_module, "crash_point", killed_at)
    with pytest.raises(RuntimeError, match="killed"):
        jobs.load(spark, cfg, one)
    monkeypatch.undo()
    assert read(spark, cfg, "batch_ledger").count() == 1  # logged before it was applied
    assert read(spark, cfg, "customer_current").count() == read(spark, whole, "customer_current").count()
    assert read(spark, cfg, "key_map").count() == (read(spark, whole, "key_map").count() if recovered == 0 else 0)
    assert jobs.load(spark, cfg, one)["batches_recovered"] == recovered
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, whole)
    assert read(spark, cfg, "join_metrics").count() == 1


def _killed_at(monkeypatch, point: str) -> None:
    """Raise at the ``n``-th passage of crash point ``name`` (``point`` is ``name`` or ``name:n``),
    in the commit protocol and the ledger, as a SIGKILL there would stop the load."""
    import etl.load.ledger as ledger_module
    import etl.load.protocol as protocol_module

    name, _, nth = point.partition(":")
    seen = []

    def crash_point(p):
        if p == name:
            seen.append(p)
            if len(seen) == int(nth or 1):
                raise RuntimeError(f"killed at {point}")

    for module in (protocol_module, ledger_module):
        monkeypatch.setattr(module, "crash_point", crash_point)


@pytest.mark.memory_tables
def test_batches_logged_ahead_of_their_merges_are_applied_together_and_recovered_from_the_log(spark, cfg, tmp_path,
                                                                                               monkeypatch):
    """``apply_interval_seconds``: a run's batches are logged one by one and applied together at
    its end, one MERGE per table, the join reading key_map with the logged tail merged over it
    meanwhile. The second of two runs cut short with batches logged and not applied (after its
    second write-ahead commit, or between the two MERGEs of its end: key_map's is the last), the
    next load applies exactly the batches logged after the last applied one, from the log, and
    goes on; the tables are those of batches applied one by one, and no batch is decided twice.
    Each case starts from a copy of one ingested warehouse."""
    from etl.io.tables import open_tables

    first, second = Interval(T0, T0 + timedelta(minutes=1)), Interval(T0 + timedelta(minutes=1), T0 + timedelta(minutes=2))
    cfg = cfg.replace(micro_batch_seconds=20, apply_interval_seconds=3600)  # three batches a run
    stream(cfg, key_domain=60)  # keys recur across batches and runs: the tail answers for them
    for run in (first, second):
        jobs.ingest(spark, cfg, run)
    one_by_one = copy_of(cfg, tmp_path, "one-by-one").replace(apply_interval_seconds=0)
    for run in (first, second):
        applied_at_once = jobs.load(spark, one_by_one, run)
        assert all(0 < b["visible_s"] <= b["applied_s"] for b in applied_at_once["batches"] if b["batch_seq"])
    want = deterministic_tables(spark, one_by_one)

    ahead = copy_of(cfg, tmp_path, "ahead")
    jobs.load(spark, ahead, first)
    tables = open_tables(spark, ahead)
    versions = {name: tables.version(name) for name in ("key_map", "customer_current", "batch_ledger")}
    summary = jobs.load(spark, ahead, second)
    assert summary["batches_committed"] == 3 and summary["keys_allocated"] > 0
    # Visible when their one MERGE committed: the first batch waited longest; none is unapplied.
    waits = [b["visible_s"] for b in summary["batches"] if b["batch_seq"]]
    assert len(waits) == 3 and waits == sorted(waits, reverse=True) and waits[-1] > 0, waits
    assert summary["batches_visible_unknown"] == 0 and summary["visible_delay_avg_s"] > summary["delay_avg_s"]
    # three write-ahead commits, one MERGE per table
    assert {name: tables.version(name) - v for name, v in versions.items()} == {"key_map": 1, "customer_current": 1,
                                                                                 "batch_ledger": 3}
    assert deterministic_tables(spark, ahead) == want

    jobs.load(spark, cfg, first)  # applied: the cases below must not apply it again
    for point, recovered in (("load.logged:2", 2), ("load.current_merged", 3), ("load.key_map_merged", 0)):
        killed = copy_of(cfg, tmp_path, point.replace(":", "-"))
        _killed_at(monkeypatch, point)
        with pytest.raises(RuntimeError, match="killed"):
            jobs.load(spark, killed, second)
        monkeypatch.undo()
        # Read fresh (etl.fresh, merge-on-read) while the batches wait: the tables their apply
        # leaves; where the entity table holds them already (killed between the MERGEs) too.
        fresh_rows = {name: fresh(spark, killed, name).collect() for name in ("customer_current", "key_map")}
        again = jobs.load(spark, killed, second)
        assert again["batches_recovered"] == recovered, point
        assert all(b["visible_s"] > 0 for b in again["batches"] if b["batch_seq"]), point  # the batch decided after it
        assert deterministic_tables(spark, killed) == want, point
        if point != "load.logged:2":  # the run's third batch was decided after the kill
            for name, rows in fresh_rows.items():
                table = read(spark, killed, name)
                assert_df_equality(spark.createDataFrame(rows, table.schema), table, ignore_row_order=True,
                                   ignore_nullable=True)
        decided = read(spark, killed, "outcome_log").groupBy("update_id").count()
        assert decided.where("count > 1").count() == 0, point


def test_the_logged_tail_is_applied_beside_the_next_decisions_which_read_key_map_as_that_apply_found_it(
        spark, cfg, tmp_path, monkeypatch):
    """``apply_concurrently``: the logged tail's MERGEs run in a thread of their own while the next
    batch is decided and logged. Held right after its ``key_map`` MERGE committed (the worst
    moment: the latest ``key_map`` holds the applied batch's new keys, and the tail still merges
    them over it), the next batch is decided and logged beside it, reading ``key_map`` pinned at
    the version the apply started from; the tables equal batches applied one by one (read at
    the latest version, the held batch's new keys would be read twice). On Delta: its reads see
    the latest version at each action, the in-memory store's are pinned already."""
    import threading

    import etl.load.ledger as ledger_module
    import etl.load.protocol as protocol_module

    cfg = cfg.replace(micro_batch_seconds=20, apply_interval_seconds=0.001)  # due as soon as a batch is logged
    stream(cfg, duration_s=60, key_domain=40)  # keys recur across the run's three batches
    one = Interval(T0, T0 + timedelta(minutes=1))
    jobs.ingest(spark, cfg, one)
    one_by_one = copy_of(cfg, tmp_path, "one-by-one").replace(apply_interval_seconds=0)
    jobs.load(spark, one_by_one, one)

    merged, released, beside = threading.Event(), threading.Event(), []

    def point(name):
        if name == "load.key_map_merged" and threading.current_thread() is not threading.main_thread():
            merged.set()
            released.wait(120)  # until a batch is logged beside this apply
        elif name == "load.logged" and merged.is_set() and not released.is_set():
            beside.append(name)
            released.set()

    real_decide = protocol_module.CommitProtocol.decide

    def decide(self, *args, **kwargs):
        if self.applying is not None and not released.is_set():
            merged.wait(120)  # decided once the apply's key_map MERGE has committed
        return real_decide(self, *args, **kwargs)

    for module in (protocol_module, ledger_module):
        monkeypatch.setattr(module, "crash_point", point)
    monkeypatch.setattr(protocol_module.CommitProtocol, "decide", decide)
    summary = jobs.load(spark, cfg, one)
    monkeypatch.undo()
    assert beside, "no batch was logged while the tail's apply ran"
    assert summary["batches_committed"] == 3 and summary["batches_visible_unknown"] == 0
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, one_by_one)
    assert spark.conf.get("spark.sql.adaptive.enabled") == "false"  # the session's own, put back by both threads


def test_coalesced_applies_compact_key_map_segments_between_batches_and_change_no_row(spark, cfg, tmp_path):
    """The table service after each coalesced apply (issue 47): every batch applied beside the
    next one's decisions, key_map's segments end with at most ``key_map_files_per_segment``
    files (the same MERGEs without the service leave more), by OPTIMIZE commits of the segments
    above it, and the warehouse is the one the MERGEs alone give."""
    from delta.tables import DeltaTable

    from etl.core.services import files_per_segment

    # With deletion vectors a MERGE marks rows and adds files (below deletion_vectors_from_bytes it
    # rewrites every file it touches, and a segment's count barely grows), as at full size.
    cfg = cfg.replace(warehouse_root=str(cfg.warehouse_path.parent / "with-vectors"), deletion_vectors="on",
                      micro_batch_seconds=20, apply_interval_seconds=0.001,  # each batch applied beside the next
                      key_map_files_per_segment=1)  # this stream's MERGEs leave more than 1 file in a segment
    run = Interval(T0, T0 + timedelta(minutes=2))
    stream(cfg, duration_s=100)
    jobs.ingest(spark, cfg, run)
    without = copy_of(cfg, tmp_path, "without-services").replace(key_map_files_per_segment=0)
    jobs.load(spark, without, run)
    jobs.load(spark, cfg, run)

    def files(c):
        return files_per_segment(read(spark, c, "key_map").inputFiles())

    assert max(files(without).values()) > 1, files(without)
    assert max(files(cfg).values()) <= cfg.key_map_files_per_segment == 1, files(cfg)
    history = DeltaTable.forPath(spark, cfg.table_path("key_map")).history()
    assert history.where("operation = 'OPTIMIZE'").count() >= 1
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, without)


@pytest.mark.memory_tables
def test_a_batch_the_key_map_first_version_left_between_its_merges_is_applied_again(spark, cfg, tmp_path, monkeypatch):
    """Until 2026-11-27 key_map was merged first: a load of that version cut short after it left
    its last batch marked in key_map and not in the entity table it changes. Upgraded, the next
    load applies that batch again (the key_map MERGE changes nothing the second time) and the
    tables equal an uninterrupted run's."""
    import etl.load.protocol as protocol_module
    from etl.transforms.outcomes import key_map_changes

    stream(cfg, duration_s=60, key_domain=50)
    one = Interval(T0, T0 + timedelta(minutes=1))
    jobs.ingest(spark, cfg, one)
    whole = copy_of(cfg, tmp_path, "whole")
    jobs.load(spark, whole, one)

    def key_map_first(self, outcomes, segments=None, new_keys=None, held=False, fold=True, several_batches=False, changes=None):
        self.tables.merge_key_map(key_map_changes(outcomes, self.segment_of), segments)
        raise RuntimeError("killed after the key_map MERGE")

    monkeypatch.setattr(protocol_module.CommitProtocol, "apply", key_map_first)
    with pytest.raises(RuntimeError, match="killed"):
        jobs.load(spark, cfg, one)
    monkeypatch.undo()
    assert read(spark, cfg, "key_map").count() > 0 and read(spark, cfg, "customer_current").count() == 0
    assert jobs.load(spark, cfg, one)["batches_recovered"] == 1
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, whole)


@pytest.mark.memory_tables
def test_a_tail_kept_between_pieces_is_dropped_when_someone_else_applied_it(spark, cfg, tmp_path, monkeypatch):
    """The always-on loader keeps its logged tail from piece to piece while no one else writes
    key_map; a fact's lookups (or any load) in between apply it from the log, and the loader then
    takes the run up again as after a restart instead of merging its tail over key_map twice.
    While nobody else held the lock, a step reads neither the ledger nor a table's version, and
    plans from the counts of what was ingested since (the lock's previous holder says so), and
    decides the windows its ingest holds in memory without reading ``ingested_updates`` back."""
    from etl.core.stream_plan import n_windows
    from etl.load.results import HeldWindows

    cfg = cfg.replace(micro_batch_seconds=20, apply_interval_seconds=3600)
    stream(cfg, key_domain=60)
    one_by_one = cfg.replace(warehouse_root=str(tmp_path / "one-by-one"), runs_root=str(tmp_path / "obo-runs"),
                             apply_interval_seconds=0)
    for c in (cfg, one_by_one):
        jobs.ingest(spark, c, RUN)
    jobs.load(spark, one_by_one, RUN)

    streaming = Loader(spark, cfg)
    assert len(streaming.load_ready(RUN, 2).batches) == 2
    assert read(spark, cfg, "key_map").count() == 0  # logged, not applied: the tail is kept
    third_rows = read(spark, cfg, "ingested_updates").where("batch_index = 2").localCheckpoint(eager=True)
    third = {2: third_rows.count()}
    reads, real_read = [], streaming.tables.read
    monkeypatch.setattr(streaming.tables, "read", lambda name: reads.append(name) or real_read(name))
    frames = type(real_read("ingested_updates"))  # pyspark's classic DataFrame, which has its own groupBy
    grouped, real_group_by = [], frames.groupBy
    monkeypatch.setattr(frames, "groupBy", lambda df, *cols: grouped.append(cols) or real_group_by(df, *cols))
    held = HeldWindows(2, 3, third_rows)
    assert len(streaming.load_ready(RUN, 3, counts=third, held=[held]).batches) == 1 and len(streaming.tail.batches) == 3  # kept: no one wrote
    assert "batch_ledger" not in reads and "ingested_updates" not in reads, reads  # decided from the held rows
    assert not streaming._held  # its batch committed: let go
    assert ("batch_index",) not in grouped, grouped  # planned from the counts, not by grouping the run's rows again
    with Loader(spark, cfg).attached("a fact's lookups", 5):
        pass  # recovers: applies the three logged batches
    assert read(spark, cfg, "key_map").count() > 0
    reads.clear()
    streaming.load_ready(RUN, n_windows(RUN, 20))
    assert "batch_ledger" in reads  # someone else held the lock: the ledger is read again
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, one_by_one)
    assert read(spark, cfg, "batch_ledger").where("batch_seq > 0").count() == 6


@pytest.mark.memory_tables
def test_a_logged_but_unapplied_batch_is_recovered_not_redecided(spark, cfg):
    """A crash right after the write-ahead commit: the next run applies the log."""
    stream(cfg, duration_s=60, key_domain=50)
    jobs.ingest(spark, cfg, Interval(T0, T0 + timedelta(minutes=1)))
    loader = Loader(spark, cfg)
    die_after(loader, 0, "killed after the log append")
    with pytest.raises(RuntimeError, match="killed"):
        loader.load(Interval(T0, T0 + timedelta(minutes=1)))
    assert read(spark, cfg, "key_map").count() == 0 and read(spark, cfg, "outcome_log").count() > 0
    result = jobs.load(spark, cfg, Interval(T0, T0 + timedelta(minutes=1)))
    assert result["batches_recovered"] == 1 and result["batches_committed"] == 0
    assert read(spark, cfg, "batch_ledger").count() == 1
    assert read(spark, cfg, "key_map").count() == read(spark, cfg, "outcome_log").where("outcome = 'new'").count()


@pytest.mark.memory_tables
def test_a_logged_batch_that_changes_no_current_row_is_known_applied_by_key_map(spark, cfg, monkeypatch):
    """A batch of duplicates only changes ``key_map`` (its arrival times), no current row: recovery
    knows whether it was applied from ``key_map``. Unapplied, it is applied again; applied, not."""
    import etl.load.ledger as ledger_module

    first, second = Interval(T0, T0 + timedelta(minutes=1)), Interval(T0 + timedelta(minutes=1), T0 + timedelta(minutes=2))
    land(cfg, [good("1"), good("2")], minute=T0)
    land(cfg, [good("1", arrival_ts="2026-11-22T01:01:02Z"), good("2", arrival_ts="2026-11-22T01:01:03Z")],
         minute=T0 + timedelta(minutes=1))
    ingest_and_load(spark, cfg, first)
    jobs.ingest(spark, cfg, second)

    def killed_at(p):
        if p == "load.logged":
            raise RuntimeError(f"killed at {p}")

    monkeypatch.setattr(ledger_module.Ledger, "record", _then(ledger_module.Ledger.record, killed_at))
    with pytest.raises(RuntimeError, match="killed"):
        jobs.load(spark, cfg, second)
    monkeypatch.undo()
    logged = read(spark, cfg, "outcome_log").where("batch_seq = 2")
    assert logged.count() == 2 and logged.where("applies").count() == 0
    assert read(spark, cfg, "key_map").where("updated_batch_seq = 2").count() == 0
    assert jobs.load(spark, cfg, second)["batches_recovered"] == 1
    assert read(spark, cfg, "key_map").where("updated_batch_seq = 2").count() == 2
    assert Loader(spark, cfg).load(second).recovered_batches == 0  # applied: known from key_map


def test_a_batch_an_older_version_logged_but_did_not_apply_is_recovered(spark, cfg, tmp_path):
    """A warehouse left by a crash of the version that logged batches in an ``outcome_log`` table
    and wrote the ledger row last: the batch is applied from that table, gets its ledger row, and
    the warehouse equals one run's; its outcomes are read from the older table, once."""
    from delta.tables import DeltaTable

    from etl.io.tables import ensure_tables
    from warehouse.schemas import OUTCOME_LOG

    stream(cfg, duration_s=60, key_domain=50)
    one = Interval(T0, T0 + timedelta(minutes=1))
    whole = reference_in_memory(cfg, tmp_path / "whole")  # one run's warehouse, only compared with
    ingest_and_load(spark, whole, one)
    jobs.ingest(spark, cfg, one)
    ensure_tables(spark, cfg)
    older = cfg.table_path("outcome_log")
    DeltaTable.createIfNotExists(spark).location(older).addColumns(OUTCOME_LOG).partitionedBy("run_key").execute()
    read(spark, whole, "outcome_log").write.format("delta").mode("append").save(older)

    result = jobs.load(spark, cfg, one)
    assert result["batches_recovered"] == 1 and result["batches_committed"] == 0
    assert deterministic_tables(spark, cfg) == deterministic_tables(spark, whole)
    assert read(spark, cfg, "batch_ledger").where("outcomes IS NOT NULL").count() == 0


def _then(method, after):
    """``method``, then ``after("load.logged")``: a kill right after the write-ahead commit."""
    def wrapped(self, *a, **k):
        method(self, *a, **k)
        after("load.logged")
    return wrapped


@pytest.mark.slow  # in make test-slow while CI cannot afford it (issue 44); its claim: docs/guarantees.md
def test_a_warehouse_given_as_a_uri_with_meta_elsewhere_loads_the_same(spark, cfg, tmp_path):
    """The object-storage shape (docs/deployment.md): tables under a URI, the lock, snapshots and
    layout under a separate meta_root. Here the URI is file://, so it runs without S3."""
    stream(cfg, key_domain=80)
    split = cfg.replace(warehouse_root=f"file://{tmp_path}/uri-wh/", meta_root=str(tmp_path / "meta"),
                        runs_root=str(tmp_path / "uri-runs"), join_strategy="partitioned-range")
    jobs.ingest(spark, split, RUN)
    jobs.load(spark, split, RUN, strategy="partitioned-range")
    plain = cfg.replace(warehouse_root=str(tmp_path / "plain-wh"), runs_root=str(tmp_path / "plain-runs"))
    jobs.ingest(spark, plain, RUN)
    jobs.load(spark, plain, RUN, strategy="partitioned-range")

    assert (tmp_path / "meta" / "segment_layout.json").exists()
    assert not (tmp_path / "uri-wh" / "_meta").exists()
    for name in DETERMINISTIC_TABLES:
        assert_df_equality(snapshot(spark, split, [name])[name], snapshot(spark, plain, [name])[name], ignore_nullable=True)


@pytest.mark.slow  # in make test-slow while CI cannot afford it (issue 44); its claim: docs/guarantees.md
def test_merges_use_deletion_vectors_as_the_setting_says_and_auto_switches_them_on_by_size(spark, cfg, tmp_path):
    """``on``: the MERGEs into key_map and customer_current mark changed rows in deletion vectors
    and copy no unchanged row. ``off``: they rewrite the touched files. ``auto``: the tables are
    created with the feature but unused; a run that starts once a table holds
    ``deletion_vectors_from_bytes`` switches it on for good. The warehouse's content is the same."""
    from delta.tables import DeltaTable

    from etl.io.tables import DELETION_VECTORS

    first, second = Interval(T0, T0 + timedelta(minutes=1)), Interval(T0 + timedelta(minutes=1), T0 + timedelta(minutes=2))
    cfg = cfg.replace(micro_batch_seconds=30)  # two batches a run: a run's second MERGE meets its first's rows
    modes = {
        mode: cfg.replace(warehouse_root=str(tmp_path / mode), runs_root=str(tmp_path / f"{mode}-runs"), deletion_vectors=mode)
        for mode in ("on", "off")
    }
    modes["auto"] = cfg.replace(deletion_vectors="auto", deletion_vectors_from_bytes=1)  # the fixture's tables: auto's
    stream(cfg, key_domain=60, malformed_share=0.0)  # keys recur inside and across batches; the same landing zone
    merges = {}
    for mode, c in modes.items():
        for interval in (first, second):
            ingest_and_load(spark, c, interval)
            for name in ("key_map", "customer_current"):
                table = DeltaTable.forPath(spark, c.table_path(name))
                history = table.history().where("operation = 'MERGE'").collect()
                total = lambda key: sum(int(h.operationMetrics.get(key, 0)) for h in history)  # noqa: E731
                merges[mode, interval.run_key, name] = (table.detail().first().properties.get(DELETION_VECTORS),
                                                        total("numTargetDeletionVectorsAdded"), total("numTargetRowsCopied"))

    for name in ("key_map", "customer_current"):
        enabled, vectors, copied = merges["on", second.run_key, name]
        assert enabled == "true" and vectors > 0 and copied == 0, (name, enabled, vectors, copied)
        enabled, vectors, copied = merges["off", second.run_key, name]
        assert enabled is None and vectors == 0 and copied > 0, (name, enabled, vectors, copied)
        # auto: the first run starts on empty tables (below the size) and rewrites; the second
        # starts on tables of more than a byte and marks
        enabled, vectors, copied = merges["auto", first.run_key, name]
        assert enabled == "false" and vectors == 0 and copied > 0, (name, enabled, vectors, copied)
        enabled, vectors_after, copied_after = merges["auto", second.run_key, name]
        assert enabled == "true" and vectors_after > 0 and copied_after == copied, (name, enabled, vectors_after, copied_after)
        for mode in ("off", "auto"):
            assert_df_equality(snapshot(spark, modes["on"], [name])[name], snapshot(spark, modes[mode], [name])[name],
                               ignore_nullable=True)


# The partitioned join as the thesis runs it: tuples wait, segments are probed when their share
# reaches n_invoke, and a probe admits a segment into a memory that holds fewer than the 8.
WAITING = dict(n_invoke=40, tau=50, wait_buffer_tuples=400, memory_budget=8_000)  # about one segment of 76-B rows


@pytest.mark.parametrize("strategy, deletion_vectors, max_jobs, apply_interval, commits, settings",
                         [("native", "auto", 25, 0, 3, {}),
                          pytest.param("native", "on", 42, 0, 3, {}, marks=pytest.mark.slow),  # (slow: issue 44)
                          ("partitioned-range", "auto", 25, 0, 3, {}),
                          # the MERGEs off the delay path (issue 46)
                          ("native", "auto", 8, 3600, 1, {}),
                          ("partitioned-range", "auto", 8, 3600, 1, WAITING)])
def test_a_steady_state_batch_runs_a_bounded_number_of_spark_jobs(spark, cfg, strategy, deletion_vectors, max_jobs,
                                                                   apply_interval, commits, settings):
    """Under the product's settings (adaptive execution on; this test session turns it off), a
    native batch after the first costs at most ``max_jobs`` Spark jobs, counted between two
    committed batches. Its commit runs without adaptive execution (``COMMIT_SQL_SETTINGS``: 60
    jobs to 46, docs/decisions/commit-without-adaptive-execution.md); its ledger row is one
    aggregate, the MERGE's segments come with the batch's counts, the held batch is stored by its
    first action and the current-state MERGE reads it without copying it (46 to 42); and below
    ``deletion_vectors_from_bytes`` its MERGEs rewrite instead of writing deletion vectors, 7 jobs
    fewer each (docs/decisions/deletion-vectors.md). ``partitioned-range`` with ``n_invoke = 1``
    releases every step (its resident segments, and the one probe, joined in one batch), and takes
    the keys it inserted per segment from the batch's counting pass (25, not 26). With the MERGEs
    off the delay path (``apply_interval_seconds``), a batch is one Delta commit, its write-ahead
    one, and at most 8 jobs: decided without adaptive execution and without planning its join
    with key_map twice, one held tail aggregate (docs/decisions/coalesced-apply.md,
    commit-without-adaptive-execution.md). So is a partitioned batch whose tuples wait and whose
    probes admit a segment (``WAITING``): its batch is held by the job that counts its arrivals,
    its waiting tuples are a view of it, the probed segments are read once, by the release's own
    job, for the join and the copy of those admitted, and a commit's changes are folded into the
    copy by the next job that reads it, and its arrivals are counted without adaptive execution,
    one job, not two (docs/partitioned-join.md, "Spark jobs a step")."""
    if deletion_vectors == "on":
        cfg = cfg.replace(warehouse_root=str(cfg.warehouse_path.parent / "with-vectors"), deletion_vectors="on")
    cfg = cfg.replace(join_strategy=strategy, n_invoke=1, apply_interval_seconds=apply_interval).replace(**settings)
    run = Interval(T0, T0 + timedelta(minutes=4))
    stream(cfg, duration_s=240)
    jobs.ingest(spark, cfg, run)
    marks = []
    # The product's session setting, not a ``sql_settings`` block: with the MERGEs beside the steps,
    # a block of this thread holding it on would make the apply thread's own (off) be refused.
    session_own = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    try:
        summary = jobs.load(spark, cfg, run, progress=lambda message: message.startswith("batch ")
                            and marks.append((jobs_started(spark), delta_commits(cfg.warehouse_path),
                                              spark.conf.get("spark.sql.adaptive.enabled"))))
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", session_own)
    assert {on for _, _, on in marks} == {"true"}  # every step counted ran as the product runs
    marks = [(j, c) for j, c, _ in marks]
    assert summary["batches_committed"] >= 4 and len(marks) == 4
    # every arrival step released a batch (the run's end, index -1, may release nothing)
    assert read(spark, cfg, "batch_ledger").where("batch_index >= 0 AND batch_seq = 0").count() == 0
    steady = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks[1:], marks[2:])]
    assert max(j for j, _ in steady) <= max_jobs and {c for _, c in steady} == {commits}, steady
    if settings:  # the steps counted waited, probed and admitted
        counted = read(spark, cfg, "batch_ledger").where("batch_index IN (2, 3)").agg(
            F.min("wait_buffer_tuples"), F.min("segments_probed"), F.sum("segments_admitted")).first()
        assert counted[0] > 0 and counted[1] > 0 and counted[2] > 0, counted
    assert spark.conf.get("spark.sql.adaptive.enabled") == "false"  # the session's own, put back


def test_the_load_path_does_not_import_the_maintenance_module():
    """The hot path must not depend on the operations module, not even inside a function: it
    settles a staged layout through ``etl.io.layout_store``."""
    import ast

    root = Path(etl.__file__).parent
    load_path = [root / "jobs.py", root / "ingest.py", *root.glob("load/*.py"), *root.glob("strategies/**/*.py"),
                 *root.glob("io/*.py"), *root.glob("transforms/*.py"), *root.glob("core/*.py")]
    offenders = []
    for path in load_path:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(root)}: {n}" for n in names if n.startswith("etl.maintenance")]
    assert len(load_path) > 20 and not offenders, offenders
