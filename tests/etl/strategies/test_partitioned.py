"""partitioned-range / partitioned-hash against the reference join, with a tiny and an ample join
memory, on streams chosen to stress them; and a run killed mid-way equals an uninterrupted one.
The strategies' claims run on tables in the test process's memory (``memory_tables``): their
Delta reads and commits are test_contract.py's and the crash matrix's."""

import json
import logging
from datetime import datetime, timedelta, timezone

import pytest

from etl import jobs
from etl.core.interval import Interval
from etl.core.sizing import configured_sizes, segment_bytes
from etl.generator import StreamSpec, generate_stream
from etl.io.tables import open_tables, read
from etl.load.loader import Loader
from tests.helpers import assert_equals_oracle, deterministic_tables, die_after, reference_in_memory
from warehouse.schemas import TABLES

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
FIRST = Interval(T0, T0 + timedelta(minutes=2))
SECOND = Interval(T0 + timedelta(minutes=2), T0 + timedelta(minutes=4))

# Ledger columns a restart may change: wall-clock times and the join's measurements (a
# recovered batch has none).
WALL_CLOCK_AND_STATS = {f.name for f in TABLES["batch_ledger"].schema.fields[7:]}
TINY = dict(memory_budget=3000, n_invoke=15, wait_buffer_tuples=60, r_wb=0.4, tau=50)
DERIVED = dict(memory_budget=3000, r_wb=0.4, tau=50)  # n_invoke and the wait buffer derived: a handful of tuples
AMPLE = dict(memory_budget=64 << 20, n_invoke=15, wait_buffer_tuples=10_000, tau=50)
STREAMS = {
    "skewed": dict(key_domain=400, p=0.6, q=0.1, r=0.25, s=0.05),
    "all_new": dict(key_domain=400, new_key_share=1.0, duplicate_share=0.0, unchanged_share=0.0, malformed_share=0.0),
    "single_hot_key": dict(key_domain=1, new_key_share=0.0),
    "bursty": dict(key_domain=300, b=0.9),
}


def run_two_intervals(spark, cfg, strategy, stream) -> list[str]:
    """What the loads said (progress): a run's batches, then its end-of-run release."""
    params = dict(start=T0, duration_s=240, rate=6, seed=21, **STREAMS[stream])
    generate_stream(StreamSpec(**params), cfg.landing_path)
    said = []
    for interval in (FIRST, SECOND):
        jobs.ingest(spark, cfg, interval)
        jobs.load(spark, cfg, interval, strategy=strategy, progress=said.append)
    return said


@pytest.mark.parametrize(
    "strategy, memory, stream",
    [
        ("partitioned-range", TINY, "skewed"),
        # Ample memory: probed segments admitted, never evicted.
        ("partitioned-range", AMPLE, "single_hot_key"),
        ("partitioned-hash", TINY, "all_new"),
        ("partitioned-hash", AMPLE, "bursty"),
    ],
)
@pytest.mark.memory_tables
def test_equals_the_oracle(spark, cfg, strategy, memory, stream):
    cfg = cfg.replace(join_strategy=strategy, **memory)
    said = run_two_intervals(spark, cfg, strategy, stream)
    assert_equals_oracle(spark, cfg)
    # A long flush is followed too (issue 45): each run's release said once it committed.
    assert sum(m.startswith("end-of-run release 1 committed") for m in said) == 2, said
    metrics = read(spark, cfg, "join_metrics").collect()
    assert sum(m.segments_probed for m in metrics) > 0 and sum(m.segments_admitted for m in metrics) > 0
    if memory is TINY:
        assert max(m.resident_bytes for m in metrics) <= memory["memory_budget"]
    # Each run's flush releases exactly the tuples its last step left waiting.
    for run_key in {m.run_key for m in metrics}:
        steps = sorted((m.batch_index, m) for m in metrics if m.run_key == run_key)
        assert steps[0][0] == -1 and steps[0][1].updates_in == steps[-1][1].wait_buffer_tuples, steps


@pytest.mark.memory_tables
def test_a_wait_bound_probes_every_overdue_segment_and_stays_exact(spark, cfg):
    """With n_invoke out of reach and a buffer that never fills, only the wait bound probes before
    the flush: an update is released at the first step where it has waited max_wait_s of stream
    time (latest arrival seen), never later, and outcomes still equal the oracle's."""
    from pyspark.sql import functions as F

    bound = 60.0
    cfg = cfg.replace(join_strategy="partitioned-range", micro_batch_seconds=30, memory_budget=3000, n_invoke=1000,
                      wait_buffer_tuples=10_000, tau=50, max_wait_s=bound)
    run_two_intervals(spark, cfg, "partitioned-range", "skewed")
    assert_equals_oracle(spark, cfg)
    ingested = read(spark, cfg, "ingested_updates")
    # Stream time after each step: the latest arrival of the run's batches so far.
    marks = {
        (r.run_key, r.batch_index): r.last.timestamp()
        for r in ingested.groupBy("run_key", "batch_index").agg(F.max("arrival_ts").alias("last")).collect()
    }
    released = read(spark, cfg, "outcome_log").select("run_key", "update_id", F.col("batch_index").alias("released"))
    rows = ingested.join(released, ["run_key", "update_id"]).select("run_key", "batch_index", "released", "arrival_ts").collect()
    by_age = 0
    for r in rows:
        steps = sorted(i for rk, i in marks if rk == r.run_key)
        now = {i: max(marks[(r.run_key, j)] for j in steps if j <= i) for i in steps}
        arrived = r.arrival_ts.timestamp()
        waited_through = [i for i in steps if r.batch_index <= i and (r.released < 0 or i < r.released)]
        assert all(now[i] - arrived < bound for i in waited_through), r  # never pending while overdue
        by_age += r.released > r.batch_index
    assert by_age > 0  # the bound, not the flush, released the waiting updates


@pytest.mark.memory_tables
def test_a_run_starts_warm_from_where_the_previous_run_ended_and_crashes_do_not_change_it(spark, cfg, tmp_path,
                                                                                         monkeypatch):
    """Issue 47: the second run begins with the resident segments the first ended with (no cold
    start). The same two runs killed at each one's flush, right after it recorded that state and
    before it committed (the second's restart warms from its run snapshot, not from the state
    its killed flush wrote), end with the same tables row for row, as does a first run killed
    after its flush committed (settled: the state it recorded is kept); runs that each start
    cold (``carry_join_state = false``) decide every update as the reference join does too, with
    more probes."""
    from etl.core import faults
    from etl.strategies.partitioned import join as join_module

    began = {}
    original = join_module.PartitionedJoin.begin

    def spy(self, run_key, *args, **kwargs):
        original(self, run_key, *args, **kwargs)
        began.setdefault(self.cfg.warehouse_root, {}).setdefault(run_key, []).append(sorted(self.policy.resident))

    monkeypatch.setattr(join_module.PartitionedJoin, "begin", spy)
    warm = cfg.replace(join_strategy="partitioned-range", **TINY)
    killed = reference_in_memory(warm, tmp_path / "killed")
    settled = reference_in_memory(warm, tmp_path / "settled")
    cold = reference_in_memory(warm, tmp_path / "cold").replace(carry_join_state=False)
    generate_stream(StreamSpec(start=T0, duration_s=240, rate=6, seed=21, **STREAMS["skewed"]), warm.landing_path)
    state = lambda c: json.loads((c.meta_path / "join_state" / "partitioned-range.json").read_text())  # noqa: E731

    class Killed(RuntimeError):
        pass

    def killed_after_recording(point):
        if point == "partitioned.join_state_carried":
            raise Killed(point)

    for c in (warm, cold):
        for interval in (FIRST, SECOND):
            jobs.ingest(spark, c, interval)
            jobs.load(spark, c, interval)
            if c is warm and interval is FIRST:
                carried = state(warm)
    for interval in (FIRST, SECOND):
        jobs.ingest(spark, killed, interval)
    for interval in (FIRST, SECOND):
        monkeypatch.setattr(join_module, "crash_point", killed_after_recording)
        with pytest.raises(Killed):
            jobs.load(spark, killed, interval)
        monkeypatch.setattr(join_module, "crash_point", faults.crash_point)
        if interval is FIRST:
            assert state(killed) == carried
        else:  # the state its killed flush recorded: its restart must not warm from it
            assert state(killed)["run_key"] == SECOND.run_key
        jobs.load(spark, killed, interval)  # warmed from its snapshot, replayed, the flush again
    assert state(killed) == state(warm)

    # killed after the flush's commit, before the run's end: settling keeps what the flush recorded
    jobs.ingest(spark, settled, FIRST)
    real_end, ends = join_module.PartitionedJoin.end, []

    def killed_at_the_end(self):
        ends.append(1)
        if len(ends) == 1:
            raise Killed("end")
        return real_end(self)

    monkeypatch.setattr(join_module.PartitionedJoin, "end", killed_at_the_end)
    with pytest.raises(Killed):
        jobs.load(spark, settled, FIRST)
    jobs.load(spark, settled, FIRST)
    assert len(ends) == 2 and state(settled) == carried

    assert "partitioned.join_state_carried" in faults.PARTITIONED_POINTS
    assert carried["run_key"] == FIRST.run_key and carried["resident"]
    assert began[warm.warehouse_root] == {FIRST.run_key: [[]], SECOND.run_key: [carried["resident"]]}
    # the killed second run began warm; its restart (warmed from the snapshot, or else from the
    # state its killed flush wrote) is held to the uninterrupted run by the state and tables below
    assert began[killed.warehouse_root][SECOND.run_key][0] == carried["resident"]
    assert began[cold.warehouse_root] == {FIRST.run_key: [[]], SECOND.run_key: [[]]}
    assert not (cold.meta_path / "join_state").exists()
    assert not list((warm.meta_path / "run_ends").glob("*"))  # nothing was due: the records settled
    assert deterministic_tables(spark, killed) == deterministic_tables(spark, warm)
    for c in (warm, cold):
        assert_equals_oracle(spark, c)
    probes = {c.warehouse_root: sum(m.segments_probed for m in read(spark, c, "join_metrics").collect())
              for c in (warm, cold)}
    assert probes[warm.warehouse_root] < probes[cold.warehouse_root], probes


# A partitioned run killed mid-way, with and without the wait bound: the loader's recovery on the
# in-memory tables in make test, the wait bound's on Delta too in make test-slow (a process killed
# at each commit point on Delta, without the wait bound: the crash harness, tests/etl/test_crash.py).
@pytest.mark.parametrize("max_wait_s, sizes", [
    # The sizes derived from the memory (n_invoke and the wait buffer unset), kept across the kill.
    pytest.param(0.0, DERIVED, marks=pytest.mark.memory_tables, id="0.0"),
    pytest.param(45.0, TINY, marks=pytest.mark.memory_tables, id="45.0"),
    pytest.param(45.0, TINY, marks=pytest.mark.slow, id="45.0-on-delta"),
])
def test_a_run_killed_midway_ends_with_the_same_tables(spark, cfg, tmp_path, max_wait_s, sizes):
    cfg = cfg.replace(join_strategy="partitioned-range", micro_batch_seconds=30, max_wait_s=max_wait_s, **sizes)
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=8, seed=3, key_domain=200), cfg.landing_path)
    whole = reference_in_memory(cfg, tmp_path / "whole")
    for c in (cfg, whole):
        jobs.ingest(spark, c, FIRST)
    jobs.load(spark, whole, FIRST)

    loader = Loader(spark, cfg)
    die_after(loader, 2, "killed in the middle of the run")
    with pytest.raises(RuntimeError, match="killed"):
        loader.load(FIRST)
    jobs.load(spark, cfg, FIRST)  # restart: recovers the logged batch, replays the policy, goes on
    assert sum(m.segments_probed for m in read(spark, cfg, "join_metrics").collect()) > 0

    for name, drop in (
        ("key_map", ()),
        ("customer_current", ()),
        ("outcome_log", ()),
    ):
        a = read(spark, cfg, name).drop(*drop)
        b = read(spark, whole, name).drop(*drop)
        assert sorted(a.collect()) == sorted(b.collect()), name


@pytest.mark.memory_tables
def test_block_granularity_groups_windows_by_backlog_and_survives_a_restart(spark, cfg, tmp_path, monkeypatch):
    """Bursts above h_mark make one load batch span block_factor arrival windows; the plan is
    replayed on restart, and the result is still the oracle's. Here the wait buffer folds its
    parts into one whenever it holds two (``MAX_PARTS`` is 16 otherwise)."""
    from etl.strategies.partitioned import wait_buffer

    held = []
    forget = wait_buffer.WaitBuffer.forget_released

    def counting(self, last_probe_step):
        held.append(len(self.parts))
        forget(self, last_probe_step)

    monkeypatch.setattr(wait_buffer, "MAX_PARTS", 1)
    monkeypatch.setattr(wait_buffer.WaitBuffer, "forget_released", counting)
    block_granularity_survives_a_restart(spark, cfg, tmp_path)
    assert max(held) > 1  # folded


@pytest.mark.slow
def test_block_granularity_survives_a_restart_on_delta(spark, cfg, tmp_path):
    """The same on Delta's tables (the one above runs on the in-memory ones in make test)."""
    block_granularity_survives_a_restart(spark, cfg, tmp_path)


def block_granularity_survives_a_restart(spark, cfg, tmp_path):
    from etl.core.policy import Granularity, plan_batches

    cfg = cfg.replace(join_strategy="partitioned-range", micro_batch_seconds=10, h_mark=40, l_mark=10, block_factor=3, **TINY)
    # A minute of bursts: windows 1-3 form one block, 4-5 another, window 0 stands alone.
    generate_stream(StreamSpec(start=T0, duration_s=60, rate=5, b=0.85, seed=2, key_domain=200), cfg.landing_path)
    whole = reference_in_memory(cfg, tmp_path / "whole")
    for c in (cfg, whole):
        jobs.ingest(spark, c, FIRST)
    jobs.load(spark, whole, FIRST)

    counts = {r[0]: r[1] for r in read(spark, whole, "ingested_updates").groupBy("batch_index").count().collect()}
    plan = plan_batches(counts, Granularity(10, 10, 40, 3))
    assert any(len(g) > 1 for g in plan) and any(len(g) == 1 for g in plan)  # both granularities occur
    ledger = sorted(r.batch_index for r in read(spark, whole, "batch_ledger").collect() if r.batch_index >= 0)
    assert ledger == [g[0] for g in plan]  # one committed batch per planned batch
    assert_equals_oracle(spark, whole)

    loader = Loader(spark, cfg)
    die_after(loader, 2, "killed in the middle of the run")
    with pytest.raises(RuntimeError, match="killed"):
        loader.load(FIRST)
    jobs.load(spark, cfg, FIRST)
    for name in ("key_map", "customer_current", "outcome_log", "batch_ledger"):
        cols = [c for c in read(spark, cfg, name).columns if c not in WALL_CLOCK_AND_STATS]
        assert sorted(read(spark, cfg, name).select(cols).collect()) == sorted(read(spark, whole, name).select(cols).collect()), name


@pytest.mark.parametrize("stream, apply_every, beside", [("single_hot_key", None, False), ("skewed", None, False),
                                                         ("skewed", 2, False), ("skewed", 2, True)])
@pytest.mark.memory_tables
def test_while_the_merges_wait_the_resident_copy_answers_for_the_logged_batches(spark, cfg, monkeypatch, stream,
                                                                                apply_every, beside):
    """With ``apply_interval_seconds`` the MERGEs wait (for the run's end, or here for every
    ``apply_every`` logged batches); meanwhile a batch's resident tuples must meet the keys earlier
    logged batches gave or changed (the hot key's every update after its first joins the resident
    copy, which each logged batch is folded into). The outcomes are the reference join's; applied
    in turn, exactly one apply per ``apply_every`` batches; applied ``beside`` the next decisions
    (``apply_concurrently``), a tail logged while one runs waits for the next, so at most that."""
    from etl.load.protocol import CommitProtocol

    applies, real_apply = [], CommitProtocol._apply_rows
    monkeypatch.setattr(CommitProtocol, "_apply_rows", lambda self, tail: applies.append(1) or real_apply(self, tail))
    if apply_every:  # due by count, not by the wall clock: the same applies on any machine
        monkeypatch.setattr(CommitProtocol, "tail_due", lambda self, overdue=False: len(self.tail.batches) >= apply_every)
    cfg = cfg.replace(join_strategy="partitioned-range", apply_interval_seconds=3600, micro_batch_seconds=20,
                      apply_concurrently=beside, **AMPLE)
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=6, seed=21, **STREAMS[stream]), cfg.landing_path)
    jobs.ingest(spark, cfg, FIRST)
    summary = jobs.load(spark, cfg, FIRST)
    metrics = read(spark, cfg, "join_metrics").collect()
    assert sum(m.segments_admitted for m in metrics) > 0
    logged = sum(1 for b in summary["batches"] if b["batch_seq"])  # a step that released nothing is no batch
    expected = 1 if apply_every is None else -(-logged // apply_every)
    assert logged >= 4 and (1 < len(applies) <= expected if beside else len(applies) == expected), (applies, logged)
    assert_equals_oracle(spark, cfg)


@pytest.mark.memory_tables
def test_a_segment_admitted_then_evicted_in_one_probe_is_not_kept_in_memory(spark, cfg):
    """Two segments probed at once: the first is admitted into free memory, the second (hotter)
    takes its place. The in-memory copy must then hold the second only: a copy of the first left
    behind would no longer be refreshed by commits, and once the first is admitted again its keys
    would be joined twice (found by the benchmark: DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW)."""
    from pyspark.sql import functions as F

    from etl.io.layout_store import load_layout
    from etl.strategies import get_strategy

    # Cold runs: each begin below starts from an empty resident set, not from the load's end.
    cfg = cfg.replace(join_strategy="partitioned-range", carry_join_state=False)
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=6, seed=5, key_domain=400), cfg.landing_path)
    jobs.ingest(spark, cfg, FIRST)
    jobs.load(spark, cfg, FIRST)
    key_map = read(spark, cfg, "key_map")
    rows = {int(r.segment_id): int(r["count"]) for r in key_map.groupBy("segment_id").count().collect()}
    cold, hot = sorted(rows, key=lambda s: (-rows[s], s))[:2]  # the cold one has more rows: probed first

    # The defaults: the wait buffer and n_invoke derived at the run's start from memory_budget and
    # key_map's segments as they are then, kept in the run snapshot (docs/partitioned-join.md): a
    # restart probes as the run did, whatever the settings say since, and a run an older version
    # began goes on with the fixed sizes that version had.
    row_bytes = cfg.r_bytes  # a row counts r_bytes (test_a_run_sizes_key_map_by_its_rows_whatever_its_files)
    segment = segment_bytes(cfg.theta, row_bytes, sum(rows.values()), len(rows))
    three = cfg.replace(memory_budget=int(3.5 * segment))  # three segments as they are
    derived = configured_sizes(three, segment)
    assert derived.resident_segments == 3
    for run_key, snapshot, want in (
        ("sizes-test", None, (derived.n_invoke, derived.wait_buffer_tuples)),
        ("sizes-restart", {"n_invoke": 7, "wait_buffer_tuples": 70}, (7, 70)),
        ("sizes-older", {}, (3000, 65536)),
    ):
        sized = get_strategy("partitioned-range", spark, three, load_layout(cfg))
        if snapshot is not None:  # a run that began before: its snapshot is on disk
            sized.run_key = run_key
            sized.run_snapshot(lambda: {**sized._sizes_now(), **snapshot})
        sized.begin(run_key, None, [], [])
        assert sized.sizes.row_bytes == pytest.approx(row_bytes)
        assert (sized.policy.n_invoke, sized.policy.capacity) == want, run_key
        sized.forget_snapshot()

    strategy = get_strategy("partitioned-range", spark, cfg, load_layout(cfg))
    strategy.begin("probe-test", None, [], [])
    policy = strategy.policy
    policy.memory_budget = max(strategy.sizes.bytes(cold), strategy.sizes.bytes(hot))  # one segment fits, not two
    policy.freq.observe_counts({0: {hot: 1000}})
    hold_waiting(spark, cfg, strategy, {cold: 2, hot: 1})
    release = strategy._probe([cold, hot], 0, [])
    assert release.count() == 3  # the tuples waiting, released with their segments

    assert set(policy.resident) == {hot}
    held = strategy.resident.df
    assert {r.segment_id for r in held.select("segment_id").distinct().collect()} == {hot}
    want = strategy.lookup_columns(key_map.where(F.col("segment_id") == hot))
    assert sorted(held.drop("segment_id").collect()) == sorted(want.collect())  # each key once, current values
    strategy.forget_snapshot()


def test_a_run_sizes_key_map_by_its_rows_whatever_its_files(spark, cfg):
    """The same warehouse whichever loader loaded it (issue 47) needs runs that size alike: the
    segment sizes a partitioned run starts from, and MESHJOIN's cycle, count key_map's rows, each
    ``r_bytes``, never the table's stored bytes over its rows, which the table service's
    compaction (on after coalesced applies, off for scheduled runs) and deletion vectors move."""
    from pyspark.sql import functions as F

    from etl.io.layout_store import load_layout
    from etl.strategies import get_strategy
    from etl.transforms.layout import segment_column

    tables = open_tables(spark, cfg)
    layout = load_layout(cfg)
    keys = spark.range(600).select(  # spread over the key domain, so over every segment
        F.lit("crm").alias("source_id"),
        F.format_string("%07d", F.col("id") * 7919 % F.lit(cfg.key_domain)).alias("natural_key"),
        (F.col("id") + 1).alias("surrogate_key"), F.sha2(F.col("id").cast("string"), 256).alias("row_hash"),
        F.lit(1).alias("last_source_seq"), F.lit(T0).alias("first_arrival_ts"), F.lit(T0).alias("last_arrival_ts"),
        F.lit(1).alias("created_batch_seq"), F.lit(1).alias("updated_batch_seq"))
    segment_of = segment_column(layout)
    keys = keys.dropDuplicates(["natural_key"]).withColumn("segment_id", segment_of(F.col("source_id"), F.col("natural_key")))
    tables.append(keys.repartition(4), "key_map")  # up to four files a segment
    rows = keys.count()

    def sized():
        partitioned = get_strategy("partitioned-range", spark, cfg, load_layout(cfg))._sizes_now()
        mesh = get_strategy("meshjoin", spark, cfg.replace(d=10_000), load_layout(cfg))
        mesh.begin("sizes-by-rows", spark.range(0).withColumnRenamed("id", "batch_index"), [], [])
        mesh.forget_snapshot()
        return partitioned, (len(mesh.boundaries), mesh.row_bytes), tables.bytes("key_map")

    before = sized()
    # The files rewritten, one a segment where there were several, no row changed: as a compaction.
    path = cfg.table_path("key_map")
    spark.read.format("delta").load(path).repartition(2, "segment_id").write.format("delta").mode("overwrite") \
        .option("dataChange", "false").partitionBy("segment_id").save(path)
    after = sized()
    assert after[2] != before[2], (before, after)  # the stored bytes moved
    assert after[:2] == before[:2]
    assert before[0]["row_bytes"] == cfg.r_bytes and sum(before[0]["sizes"].values()) == rows
    assert len(before[0]["sizes"]) > 1 and before[1][0] > 1  # several segments, a cycle of several


@pytest.mark.memory_tables
def test_a_probe_that_admits_reads_key_map_once(spark, cfg):
    """The probe's read of a segment also fills the in-memory copy (no second read of key_map),
    and the copy and the release both carry the segment's current rows."""
    from pyspark.sql import functions as F

    from etl.io.layout_store import load_layout
    from etl.strategies import get_strategy

    cfg = cfg.replace(join_strategy="partitioned-range", carry_join_state=False)  # a cold begin below
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=6, seed=5, key_domain=400), cfg.landing_path)
    jobs.ingest(spark, cfg, FIRST)
    jobs.load(spark, cfg, FIRST)
    key_map = read(spark, cfg, "key_map")
    seg = int(key_map.groupBy("segment_id").count().orderBy(F.desc("count")).first().segment_id)

    strategy = get_strategy("partitioned-range", spark, cfg, load_layout(cfg))
    strategy.begin("probe-read-test", None, [], [])
    strategy.policy.freq.observe_counts({0: {seg: 1000}})
    hold_waiting(spark, cfg, strategy, {seg: 1})
    reads = []
    real_key_map = strategy.key_map
    strategy.key_map = lambda: reads.append(1) or real_key_map()
    strategy._probe([seg], 0, [])

    assert set(strategy.policy.resident) == {seg}
    assert len(reads) == 1
    want = strategy.lookup_columns(key_map.where(F.col("segment_id") == seg))
    assert sorted(strategy.resident.df.drop("segment_id").collect()) == sorted(want.collect())
    strategy.forget_snapshot()


def test_the_flush_reads_the_segments_it_does_not_admit_narrowed_to_the_pending_keys(spark, cfg):
    """At a run's end the flush probes every segment with a tuple waiting (at 20 million keys, 17
    million rows of key_map for 99,208 tuples): the rows of the segments it does not admit are
    narrowed to the pending keys as they are read, by a broadcast semi-join, not shuffled whole;
    a probe within the run, and an admitted segment, read their segments whole. The release is
    the same rows either way."""
    from pyspark.sql import functions as F

    from etl.io.layout_store import load_layout
    from etl.strategies import get_strategy
    from etl.strategies.base import KEY

    cfg = cfg.replace(join_strategy="partitioned-range", carry_join_state=False)  # a cold begin below
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=6, seed=5, key_domain=400), cfg.landing_path)
    jobs.ingest(spark, cfg, FIRST)
    jobs.load(spark, cfg, FIRST)
    key_map = read(spark, cfg, "key_map")
    counted = key_map.groupBy("segment_id").count().orderBy(F.desc("count")).collect()
    segments = [int(r.segment_id) for r in counted[:3]]

    def released(step: int, memory_budget: int):
        strategy = get_strategy("partitioned-range", spark, cfg, load_layout(cfg))
        strategy.begin(f"flush-test-{step}-{memory_budget}", None, [], [])
        strategy.policy.memory_budget = memory_budget
        hold_waiting(spark, cfg, strategy, {s: 2 for s in segments})
        release = strategy._probe(segments, step, [])
        plan = release._jdf.queryExecution().executedPlan().toString()
        rows = sorted(tuple(r) for r in release.select(*KEY, "update_id", "km_surrogate_key").collect())
        strategy.forget_snapshot()
        return plan, rows, set(strategy.policy.resident)

    flush_plan, flush_rows, flush_resident = released(-1, 0)  # nothing admitted
    probe_plan, probe_rows, _ = released(2, 0)
    admitting_plan, admitting_rows, admitting_resident = released(-1, 1 << 40)  # all three admitted
    assert "LeftSemi" in flush_plan and "BroadcastExchange" in flush_plan and not flush_resident
    assert "LeftSemi" not in probe_plan
    assert "LeftSemi" not in admitting_plan and admitting_resident == set(segments)
    assert len(flush_rows) == 6 and flush_rows == probe_rows == admitting_rows
    assert all(r[3] is not None for r in flush_rows)  # each waiting tuple met its key_map row


def hold_waiting(spark, cfg, strategy, counts: dict[int, int]) -> None:
    """``counts[segment]`` of the ingested updates of that segment waiting in ``strategy``'s wait
    buffer, as a step that routed them there leaves them."""
    from pyspark.sql import functions as F

    ingested = strategy._with_segment(read(spark, cfg, "ingested_updates"))
    for seg, n in counts.items():
        strategy.wait_buffer.append(ingested.where(F.col("segment_id") == seg).limit(n), 0, {seg})
    strategy.policy.pending = dict(counts)


def test_a_probe_of_thousands_of_segments_at_once_selects_exactly_their_pending_rows(spark, cfg):
    """A full buffer over many small segments releases hundreds at once (at 20 million keys a
    nested OR per segment overflowed the JVM's stack); each segment keeps its own last probe step."""
    from etl.strategies.partitioned.wait_buffer import pending_condition

    due = list(range(3000))
    last_probe_step = {s: s for s in due if s % 3}  # every segment its own step; a third never probed
    rows = spark.createDataFrame([(s, s + d) for s in due for d in (0, 1)], "segment_id int, batch_index int")
    got = sorted((r.segment_id, r.batch_index) for r in rows.where(pending_condition(due, last_probe_step)).collect())
    assert got == sorted((s, s + d) for s in due for d in (0, 1) if s % 3 == 0 or d == 1)


@pytest.mark.memory_tables
def test_a_run_s_end_splits_segments_grown_past_two_theta_and_a_kill_or_a_rerun_changes_nothing(spark, cfg, tmp_path,
                                                                                                monkeypatch, caplog):
    """Issue 47's table service between runs: with theta 10, the first run's keys grow several of
    the even layout's segments past 20 rows, and the run's end splits the largest (one a run's
    end, ``split_segments_per_run``), the second run's end the next; with the service off they
    stay grown. Every warehouse decides every update as the reference join does. Killed in the split,
    before its commit or after it, the retries leave the tables and the layout of the runs never
    killed (a retry after the commit must not split the next segment too), and a rerun of a
    finished run splits nothing; the next run starts warm, its carried state named by the new
    segments. (After the first run the warehouses are equal, the join's carried state included,
    so the runs after it are too.)"""
    from etl import maintenance
    from etl.io import rebalance as rebalance_module
    from etl.io.layout_store import split_after, stored_layout
    from etl.transforms.layout import segment_column
    from pyspark.sql import functions as F

    # One batch a run: the splits are a run end's, whatever its batches.
    on = cfg.replace(join_strategy="partitioned-range", theta=10, split_segments_per_run=1, micro_batch_seconds=120, **TINY)
    off = reference_in_memory(on, tmp_path / "off").replace(split_segments_per_run=0)
    before, after = (reference_in_memory(on, tmp_path / name) for name in ("before", "after"))
    generate_stream(StreamSpec(start=T0, duration_s=240, rate=6, seed=21, **STREAMS["skewed"]), on.landing_path)

    def grown(c):  # rows of the segments above 2*theta
        rows = {int(r[0]): int(r[1]) for r in read(spark, c, "key_map").groupBy("segment_id").count().collect()}
        return {seg: n for seg, n in rows.items() if n > 20}

    def misplaced(c):
        seg = segment_column(stored_layout(c))
        return read(spark, c, "key_map").where(seg(F.col("source_id"), F.col("natural_key")) != F.col("segment_id")).count()

    for c in (on, off):
        jobs.ingest(spark, c, FIRST)
        jobs.load(spark, c, FIRST)
    grew = grown(off)
    largest = min(grew, key=lambda seg: (-grew[seg], seg))
    assert len(grew) >= 2 and len(stored_layout(off).segments) == 8
    assert set(grown(on)) == set(grew) - {largest} and len(stored_layout(on).segments) > 8  # the largest split
    assert misplaced(on) == 0 and split_after(on) == FIRST.run_key
    first_layout, left = stored_layout(on), set(grown(on))

    class Killed(BaseException):  # as a kill: nothing catches it
        pass

    real_open_tables = rebalance_module.open_tables

    def killed_before_the_commit(*args):
        raise Killed("before key_map's rewrite")

    def killed_after_the_commit(point):
        if point == "services.key_map_rebalanced":
            raise Killed(point)

    for c, patch in ((before, ("open_tables", killed_before_the_commit)), (after, ("crash_point", killed_after_the_commit))):
        jobs.ingest(spark, c, FIRST)
        monkeypatch.setattr(rebalance_module, *patch)
        with pytest.raises(Killed):
            jobs.load(spark, c, FIRST)
        monkeypatch.setattr(rebalance_module, "open_tables", real_open_tables)
        monkeypatch.setattr(rebalance_module, "crash_point", lambda point: None)
        assert (c.meta_path / "segment_layout.json.next").exists()  # staged, not yet promoted
        with pytest.raises(maintenance.MaintenanceBlocked, match="owe a split"):  # the run ended, its split owed
            maintenance.maintain(spark, c, steps=["rebalance"])
        jobs.load(spark, c, FIRST)  # the retry: settled, the split made (again) or found made
        assert stored_layout(c) == first_layout and misplaced(c) == 0 and set(grown(c)) == left
        assert deterministic_tables(spark, c) == deterministic_tables(spark, on)
    assert_equals_oracle(spark, off)

    # The next run's end splits the largest segment it can: here the largest due one has its rows
    # in a slot that cannot be cut, and is passed over rather than taking the turn (before that
    # was mended this run's end split nothing).
    jobs.ingest(spark, on, SECOND)
    with caplog.at_level(logging.INFO, logger="etl"):
        jobs.load(spark, on, SECOND)
    assert "split or merged since run %s ended: its state is carried" % FIRST.run_key in caplog.text  # warm, not cold
    assert split_after(on) == SECOND.run_key and stored_layout(on) != first_layout and misplaced(on) == 0
    assert not list((on.meta_path / "run_ends").glob("*"))  # each run's end settled what it owed
    assert_equals_oracle(spark, on)
    second_layout = stored_layout(on)
    jobs.load(spark, on, FIRST)  # a rerun of a finished run, the layout another run's since
    assert stored_layout(on) == second_layout and split_after(on) == SECOND.run_key

    # Killed in the second run's flush, its record written and its flush not committed, then
    # another load (a rerun of the first run): the record is the second run's own, left as it is
    # with the run's snapshot (settling it would drop the run's waiting tuples); the retry then
    # ends as the run never killed did.
    from etl.strategies.partitioned import join as join_module

    jobs.ingest(spark, before, SECOND)
    monkeypatch.setattr(join_module.PartitionedJoin, "flush", lambda self: (_ for _ in ()).throw(Killed("in the flush")))
    with pytest.raises(Killed):
        jobs.load(spark, before, SECOND)
    monkeypatch.undo()
    owed_second = [before.meta_path / "run_ends" / f"{SECOND.run_key}.json", before.meta_path / "runs" / f"{SECOND.run_key}.partitioned-range.json"]
    jobs.load(spark, before, FIRST)
    assert all(p.exists() for p in owed_second) and stored_layout(before) == first_layout
    jobs.load(spark, before, SECOND)
    assert not any(p.exists() for p in owed_second) and stored_layout(before) == second_layout
    assert deterministic_tables(spark, before) == deterministic_tables(spark, on)

    # Killed right after the first run's flush was logged (not yet applied, its run snapshot still
    # there), then the next run loaded before that run's retry: the next run applies the flush,
    # settles the run and makes the split its end owes before loading, so the history is the one
    # never killed (before the record of the owed split, the next run loaded under the unsplit
    # layout, and the layout and the tables differed). Maintenance's rebalance refuses meanwhile.
    from etl.load import ledger as ledger_module

    between = reference_in_memory(on, tmp_path / "between")
    jobs.ingest(spark, between, FIRST)
    flushed, real_flush = [], join_module.PartitionedJoin.flush

    def flush_then_mark(self):
        released = real_flush(self)
        flushed.append(1)
        return released

    def killed_once_the_flush_is_logged(point):
        if point == "load.logged" and flushed:
            raise Killed(point)

    monkeypatch.setattr(join_module.PartitionedJoin, "flush", flush_then_mark)
    monkeypatch.setattr(ledger_module, "crash_point", killed_once_the_flush_is_logged)
    with pytest.raises(Killed):
        jobs.load(spark, between, FIRST)
    monkeypatch.undo()
    assert len(stored_layout(between).segments) == 8 and (between.meta_path / "run_ends" / f"{FIRST.run_key}.json").exists()
    with pytest.raises(maintenance.MaintenanceBlocked, match=FIRST.run_key):
        maintenance.maintain(spark, between, steps=["rebalance"])
    jobs.ingest(spark, between, SECOND)
    jobs.load(spark, between, SECOND)
    jobs.load(spark, between, FIRST)  # the retry: its end's split found made
    assert stored_layout(between) == second_layout and not list((between.meta_path / "run_ends").glob("*"))
    assert deterministic_tables(spark, between) == deterministic_tables(spark, on)


@pytest.mark.no_tables
def test_the_resident_copy_is_joined_and_folded_where_it_lies_only_the_small_side_shuffled(spark):
    """The copy is held partitioned by the key: a step's join and a commit's fold shuffle their own
    tuples or changes, never the copy (at 20 million keys a sort-merge join shuffled and sorted its
    1.3 million rows on every step, twice more a fold: 10-15 s of a 15-s step), and the fold's
    result is held the same way, so the next step's join finds it in place too (a fold twice
    leaves it as once). Held without
    adaptive execution even when the step runs with it: an adaptive plan's partitioning is unknown
    to a checkpoint."""
    from pyspark.sql import functions as F

    from etl.io.spark import sql_settings
    from etl.strategies.partitioned.resident import ResidentSet

    def exchanges(df) -> int:
        """Its plan's exchanges, each a shuffle (a shuffled hash join: no sort)."""
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "ShuffledHashJoin" in plan and "Sort " not in plan, plan
        return plan.count("Exchange ")

    key_map = spark.createDataFrame(
        [(src, f"K{i:03d}", 2 * i + (src == "erp"), f"h{i}", 10, i % 4) for i in range(40) for src in ("crm", "erp")],
        "source_id string, natural_key string, km_surrogate_key long, km_row_hash string, km_last_source_seq long, "
        "segment_id int")
    copy = ResidentSet(lambda segments: key_map.where(F.col("segment_id").isin(segments)))
    with sql_settings(spark, {"spark.sql.adaptive.enabled": "true"}):  # as a step's submit runs in the product
        copy.sync({0, 1})
    tuples = spark.createDataFrame([("crm", "K000", "a"), ("erp", "K001", "b"), ("crm", "K999", "c"), ("erp", "K004", "d"),
                                    ("crm", "K000", "a2")],  # a key twice in a step
                                   "source_id string, natural_key string, v string")
    joined = copy.join(tuples)
    assert exchanges(joined) == 1  # the tuples'
    assert sorted(tuple(r) for r in joined.collect()) == [
        ("crm", "K000", "a", 0, "h0", 10), ("crm", "K000", "a2", 0, "h0", 10), ("crm", "K999", "c", None, None, None),
        ("erp", "K001", "b", 3, "h1", 10), ("erp", "K004", "d", 9, "h4", 10)]

    # A commit: K000 advanced, K100 new (segment 0), K003 in a segment the copy does not hold.
    changes = spark.createDataFrame(
        [("crm", "K000", 0, "h0-new", 20, 0), ("crm", "K100", 80, "h100", 5, 0), ("crm", "K003", 6, "h3-new", 20, 3)],
        "source_id string, natural_key string, surrogate_key long, applied_row_hash string, max_source_seq long, "
        "segment_id int")
    later = spark.createDataFrame([("crm", "K000", "e"), ("crm", "K100", "f"), ("crm", "K003", "g")],
                                  "source_id string, natural_key string, v string")
    copy.fold(changes)
    copy.fold(changes)  # folded again (a recovery's apply of a batch folded when it was logged): the same copy
    joined = copy.join(later)
    assert exchanges(joined) == 1
    assert sorted(tuple(r) for r in joined.collect()) == [
        ("crm", "K000", "e", 0, "h0-new", 20), ("crm", "K003", "g", None, None, None), ("crm", "K100", "f", 80, "h100", 5)]
    assert copy.df.count() == 2 * 20 + 1  # segments 0 and 1 of both sources, and the new key
