"""The simulator on small workloads (seconds): it drives the ETL's own policy, conserves tuples,
and shows the thesis's directions."""

import dataclasses
import math

import numpy as np
import pytest

from etl.core.config import EtlConfig
from etl.core.sizing import wait_buffer_for
from etl.simulator.engine import LIVE_STRATEGIES, STRATEGIES, simulate
from etl.simulator.experiments import etl_n_invoke, recommend
from etl.simulator.model import MB, LiveCosts, SimParams
from etl.simulator.workload import Relation, Trace

SMALL = SimParams(rate=400.0, relation_bytes=24 * MB, memory_budget=8 * MB, duration_s=900.0, warmup_s=60.0,
                  wait_buffer_bytes=1 * MB, n_invoke=1000, seed=3)


@pytest.fixture(scope="module")
def small():
    return Trace.generate(SMALL), Relation.generate(SMALL)


@pytest.fixture(scope="module")
def baseline(small):
    """Each strategy simulated once on SMALL, shared by the tests that compare against it (the
    tests only read a result; the trace and relation were shared by them already)."""
    trace, relation = small
    return {s: simulate(s, SMALL, trace, relation) for s in STRATEGIES}


def test_trace_and_relation_are_seeded_and_follow_the_parameters(small):
    trace, relation = small
    again = Trace.generate(SMALL)
    assert np.array_equal(trace.ts, again.ts) and np.array_equal(trace.keys, again.keys)
    assert len(trace) == round(SMALL.rate * SMALL.duration_s)
    assert np.all(np.diff(trace.ts) >= 0) and trace.ts[-1] < SMALL.duration_s
    assert len(relation.keys) == SMALL.relation_tuples
    layout = relation.range_layout()
    assert layout.segment_bytes.sum() == SMALL.relation_bytes
    assert layout.segment_bytes.min() >= SMALL.theta and layout.segment_bytes.max() <= 2 * SMALL.theta


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_tuple_is_produced_or_still_buffered(strategy, small):
    trace, relation = small
    p = SMALL.replace(duration_s=2 * SMALL.duration_s, warmup_s=0.0)  # the trace ends halfway
    res = simulate(strategy, p, trace, relation)
    assert res.arrived == len(trace)
    assert res.processed + res.final_backlog == res.arrived
    assert res.avg_delay_s > 0 and res.p99_delay_s >= res.avg_delay_s


def test_a_relation_that_fits_in_memory_is_probed_once_per_segment_and_never_evicted(small):
    trace, relation = small
    p = SMALL.replace(memory_budget=40 * MB)
    res = simulate("partitioned-range", p, trace, relation)
    assert res.evicted == 0
    assert res.probes <= relation.range_layout().n_segments


def test_a_tiny_wait_buffer_forces_overflow_probes(small, baseline):
    trace, relation = small
    roomy = baseline["partitioned-hash"]
    tight = simulate("partitioned-hash", SMALL.replace(wait_buffer_bytes=64 * 256), trace, relation)
    assert tight.probes > 3 * roomy.probes
    assert tight.avg_delay_s < roomy.avg_delay_s


def test_thesis_directions_on_a_small_workload(small, baseline):
    trace, relation = small
    res = baseline
    # An order of magnitude less delay than MESHJOIN; range reads less of R than hash and native.
    assert res["partitioned-range"].avg_delay_s * 5 < res["meshjoin"].avg_delay_s
    assert res["partitioned-range"].disk_bytes < res["partitioned-hash"].disk_bytes
    assert res["partitioned-range"].disk_bytes * 10 < res["native"].disk_bytes
    # MESHJOIN's delay grows with its memory (longer queue segments); the partitioned join's does not.
    more = SMALL.replace(memory_budget=16 * MB)
    assert simulate("meshjoin", more, trace, relation).avg_delay_s > 1.3 * res["meshjoin"].avg_delay_s
    assert simulate("partitioned-range", more, trace, relation).avg_delay_s <= res["partitioned-range"].avg_delay_s


def test_meshjoin_saturates_where_its_cpu_per_step_exceeds_the_arrivals(small):
    _, relation = small
    # Capacity = w / (disk + (d/r) * (Q/n_bucket) * chain_step): about 900 tuples/s with 8 buckets.
    p = SMALL.replace(n_bucket=8, duration_s=600.0, warmup_s=60.0)
    low = simulate("meshjoin", p.replace(rate=400.0), Trace.generate(p.replace(rate=400.0)), relation)
    high = simulate("meshjoin", p.replace(rate=2000.0), Trace.generate(p.replace(rate=2000.0)), relation)
    w = p.meshjoin_queue_tuples // p.meshjoin_k
    assert low.sustained and low.buffered[-1][1] <= 2 * w  # the input buffer holds at most a queue segment or two
    assert not high.sustained and high.buffered[-1][1] > 0.3 * high.arrived


def test_the_recommendation_is_a_valid_etl_configuration():
    p = SMALL.replace(duration_s=300.0, warmup_s=30.0)
    rec = recommend(p)
    assert rec["recommended"]["join_strategy"] in STRATEGIES
    EtlConfig(**rec["recommended"])  # every recommended setting is a real, valid setting
    assert "wait_buffer_tuples" not in rec["recommended"]  # the ETL derives it from memory_budget
    # A simulated threshold carried over as the same share of the ETL's buffer (127-byte updates,
    # where the simulator's are 64): Table 6.2's 3,000 of 65,536 in 34 MB is 1,512 of 33,026.
    assert wait_buffer_for(34 * MB, EtlConfig.s_bytes) == 33_026
    assert etl_n_invoke(3000, 65_536, 34 * MB) == 1_512
    assert len(rec["candidates"]) == 2 * 4 + 2
    assert all(not math.isnan(c["avg_delay_s"]) for c in rec["candidates"])


def test_a_wait_bound_caps_the_partitioned_joins_delay_tail_at_the_cost_of_probes(small, baseline):
    trace, relation = small
    free = baseline["partitioned-range"]
    bounded = simulate("partitioned-range", SMALL.replace(max_wait_s=30.0), trace, relation)
    assert free.p99_delay_s > 60  # without the bound, cold segments' tuples wait for n_invoke or overflow
    assert bounded.p99_delay_s <= 30.0 + 1.0  # the bound plus the probe's own time
    assert bounded.avg_delay_s < free.avg_delay_s and bounded.probes > free.probes


def test_a_partitioned_recommendation_leaves_the_wait_buffer_to_the_etl(monkeypatch):
    """The mapping from the simulated winner to ETL settings (the simulations themselves are the
    tests above): no wait buffer (the ETL derives it from memory_budget), n_invoke as the same share
    of the ETL's buffer."""
    from etl.simulator import experiments
    from etl.simulator.engine import SimResult

    def simulated(strategy, q, trace, relation):
        delay = 1.0 if (strategy, q.n_invoke) == ("partitioned-range", 3000) else 9.0
        return SimResult(strategy, q.rate, q.memory_budget / MB, q.b, arrived=1, processed=1, avg_delay_s=delay,
                         p99_delay_s=delay)

    monkeypatch.setattr(experiments.Relation, "generate", classmethod(lambda cls, p: None))
    monkeypatch.setattr(experiments.Trace, "generate", classmethod(lambda cls, p: None))
    monkeypatch.setattr(experiments, "simulate", simulated)
    p = SimParams()
    rec = experiments.recommend(p)["recommended"]
    assert rec["join_strategy"] == "partitioned-range" and "wait_buffer_tuples" not in rec
    assert rec["n_invoke"] == etl_n_invoke(3000, p.wait_buffer_tuples, rec["memory_budget"]) == 1_512
    EtlConfig(**rec)


# ---------------------------------------------------------------- the loader on Spark (``live``)

LIVE = SMALL.replace(duration_s=600.0, warmup_s=0.0, tick_s=10.0, live=LiveCosts(), run_s=300.0)
FREE = LiveCosts(grace_s=0.0, ingest_s=0.0, step_fixed_s=0.0, per_update_s=0.0, apply_overlap_s=0.0, run_end_hold_s=0.0,
                per_probe_s=0.0)


@pytest.fixture(scope="module")
def live_trace():
    return Trace.generate(LIVE), Relation.generate(LIVE)


@pytest.mark.parametrize("strategy", LIVE_STRATEGIES)
def test_live_every_update_is_committed_by_its_runs_end_flush_at_the_latest(strategy, live_trace):
    trace, relation = live_trace
    res = simulate(strategy, LIVE, trace, relation)
    assert res.arrived == res.processed == len(trace) and res.final_backlog == 0
    # No update waits past its run's end: its grace, the last piece's ingest and the flush's step.
    costs = LIVE.live
    flush = costs.step_seconds(len(trace)) + costs.apply_overlap_s
    assert res.p99_delay_s <= LIVE.run_s + costs.grace_s + costs.ingest_s + flush
    assert res.probes > 0 and 0 < res.busy_s < res.wall_clock_s


def test_live_shorter_runs_cut_the_tail_until_their_ends_hold_the_loop(live_trace):
    trace, relation = live_trace
    by_run = {run_s: simulate("partitioned-range", LIVE.replace(run_s=run_s), trace, relation) for run_s in (600.0, 300.0, 60.0)}
    assert by_run[300.0].p99_delay_s < by_run[600.0].p99_delay_s  # flushed twice as often
    assert by_run[300.0].probes > by_run[600.0].probes
    # A minute's run spends most of it on its end (the last MERGE pair and the split): worse.
    assert by_run[60.0].avg_delay_s > 1.5 * by_run[300.0].avg_delay_s
    assert by_run[60.0].busy_s / by_run[60.0].wall_clock_s > 0.9


def test_live_with_nothing_to_pay_an_update_waits_for_its_window_and_the_loader_keeps_up(live_trace):
    trace, relation = live_trace
    base = simulate("partitioned-range", LIVE.replace(live=FREE), trace, relation)
    assert base.avg_delay_s >= LIVE.tick_s / 2  # half a window at least
    assert base.sustained and simulate("partitioned-range", LIVE, trace, relation).sustained


@pytest.mark.parametrize("cost", ["grace_s", "ingest_s", "step_fixed_s"])
def test_live_a_wait_before_or_in_every_step_adds_itself_to_every_updates_delay(cost, live_trace):
    trace, relation = live_trace
    base = simulate("partitioned-range", LIVE.replace(live=FREE), trace, relation)
    dearer = simulate("partitioned-range", LIVE.replace(live=dataclasses.replace(FREE, **{cost: 3.0})), trace, relation)
    assert dearer.avg_delay_s == pytest.approx(base.avg_delay_s + 3.0, abs=1e-6)


def test_live_an_apply_beside_and_a_runs_end_hold_slow_the_steps_after_them(live_trace):
    trace, relation = live_trace
    base = simulate("partitioned-range", LIVE.replace(live=FREE), trace, relation)
    for cost in ("apply_overlap_s", "run_end_hold_s", "per_update_s", "per_probe_s"):
        value = {"per_update_s": 1e-4, "run_end_hold_s": 60.0, "per_probe_s": 0.5}.get(cost, 20.0)  # a hold longer than a block of windows
        dearer = simulate("partitioned-range", LIVE.replace(live=dataclasses.replace(FREE, **{cost: value})), trace, relation)
        assert dearer.avg_delay_s > base.avg_delay_s + 0.5, cost


@pytest.mark.parametrize("run_s", [60.0, 300.0])
def test_live_a_loader_dearer_than_its_arrivals_falls_behind(run_s, live_trace):
    trace, relation = live_trace
    slow = simulate("partitioned-range", LIVE.replace(live=LiveCosts(per_update_s=4e-3), run_s=run_s), trace, relation)
    assert not slow.sustained and slow.busy_s > 0.95 * slow.wall_clock_s
    assert slow.wall_clock_s > 1.5 * LIVE.duration_s  # 1.6 s of steps for every second of arrivals


def test_live_is_refused_for_the_joins_it_does_not_model_and_runs_need_it(live_trace):
    trace, relation = live_trace
    for strategy in set(STRATEGIES) - set(LIVE_STRATEGIES):
        with pytest.raises(ValueError, match="not modelled on Spark"):
            simulate(strategy, LIVE, trace, relation)
    with pytest.raises(ValueError, match="run_s"):
        SMALL.replace(run_s=60.0)
    with pytest.raises(ValueError, match="run_s"):
        LIVE.replace(run_s=65.0)  # not a whole number of 10-s windows
    for bad in (dict(apply_interval_s=0.0), dict(ingest_s=math.inf), dict(grace_s=-1.0), dict(step_fixed_s=True)):
        with pytest.raises(ValueError, match="invalid live costs"):
            LiveCosts(**bad)


def test_a_live_recommendation_weighs_only_the_joins_modelled_on_spark():
    rec = recommend(LIVE.replace(duration_s=120.0, run_s=60.0))
    assert {c["strategy"] for c in rec["candidates"]} == set(LIVE_STRATEGIES)
    assert rec["recommended"]["join_strategy"] in LIVE_STRATEGIES
    EtlConfig(**rec["recommended"])


def test_live_a_wait_bound_pays_for_its_probes_and_with_dear_probes_costs_more_than_it_saves(live_trace):
    """The wait bound probes many more segments within a run; with a cost per probe (as a step's
    commit computing the probes' join pays on Spark) its steps lengthen, and once a probe costs
    enough the loader that bounds the wait delays more than the one that does not."""
    trace, relation = live_trace
    cheap = LIVE.replace(live=dataclasses.replace(LIVE.live, per_probe_s=0.0))
    bound = cheap.replace(max_wait_s=30.0)
    free = simulate("partitioned-range", bound, trace, relation)
    unbounded = simulate("partitioned-range", cheap, trace, relation)
    assert free.probes > unbounded.probes and free.avg_delay_s < unbounded.avg_delay_s  # probes free: the bound helps
    dear = dataclasses.replace(LIVE.live, per_probe_s=1.0)
    slowed = simulate("partitioned-range", bound.replace(live=dear), trace, relation)
    assert slowed.busy_s > free.busy_s + 0.5 * free.probes
    assert slowed.avg_delay_s > simulate("partitioned-range", LIVE.replace(live=dear), trace, relation).avg_delay_s


def test_live_a_runs_flush_is_not_charged_per_probe(live_trace):
    """The flush reads only the keys waiting, not the whole segments ``per_probe_s`` was fitted
    on: with no ``n_invoke`` reached and a buffer that hardly overflows, nearly every probe is a
    flush's, and a dear probe barely moves the loop's busy time."""
    trace, relation = live_trace
    flushing = LIVE.replace(n_invoke=10**9, wait_buffer_bytes=int(5.9 * MB))
    cheap, dear = (simulate("partitioned-range", flushing.replace(live=dataclasses.replace(LIVE.live, per_probe_s=s)),
                            trace, relation) for s in (0.0, 1.0))
    assert cheap.probes == dear.probes > 20
    assert 0 <= dear.busy_s - cheap.busy_s < 0.2 * dear.probes
