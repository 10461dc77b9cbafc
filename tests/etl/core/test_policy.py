"""Each rule of the partition policy, both ways, without Spark."""

import random

import pytest

from etl.core.policy import (
    FINAL_STEP,
    ArrivalFrequency,
    Eviction,
    Granularity,
    PartitionPolicy,
    SegmentSizes,
    StepArrivals,
    replay,
)


def policy(**over):
    params = dict(n_invoke=10, r_wb=0.4, alpha=0.5, tau=100, rho=0.25, memory_budget=1000, wait_buffer_tuples=100)
    params.update(over)
    return PartitionPolicy(**params)


# ---------------------------------------------------------------- arrival frequency


def test_frequency_decays_by_alpha_per_epoch():
    f = ArrivalFrequency(alpha=0.5, tau=4)
    f.observe([1, 1, 1, 1])  # epoch 0
    assert f.value(1) == 4
    f.observe([2])  # first tuple of epoch 1 closes epoch 0: C'_1 = 0.5 * 4
    assert f.value(1) == 2 and f.value(2) == 1
    f.observe([2, 2, 2, 2])  # the 4th opens epoch 2: C'_1 = 0.5*(0+2) = 1, C'_2 = 0.5*(4+0) = 2, c_2 = 1
    assert f.value(1) == 1 and f.value(2) == 3


def test_frequency_matches_the_closed_formula():
    """C_k = sum over tuples of alpha ** (epochs since the tuple's epoch), for tuple epochs."""
    alpha, tau = 0.3, 5
    arrivals = [1, 2, 1, 1, 3, 1, 2, 2, 2, 1, 1, 3, 3, 1, 2, 1]
    f = ArrivalFrequency(alpha, tau)
    f.observe(arrivals)
    now = (len(arrivals) - 1) // tau
    for seg in (1, 2, 3):
        want = sum(alpha ** (now - i // tau) for i, s in enumerate(arrivals) if s == seg)
        assert f.value(seg) == pytest.approx(want)


def test_counts_by_epoch_equal_tuple_by_tuple():
    arrivals = [1, 2, 1, 1, 3, 1, 2, 2, 2, 1, 1, 3, 3, 1, 2, 1]
    one = ArrivalFrequency(0.3, 5)
    one.observe(arrivals)
    counts: dict = {}
    for i, s in enumerate(arrivals):
        counts.setdefault(i // 5, {}).setdefault(s, 0)
        counts[i // 5][s] += 1
    other = ArrivalFrequency(0.3, 5)
    other.observe_counts(counts)
    assert {s: other.value(s) for s in (1, 2, 3)} == pytest.approx({s: one.value(s) for s in (1, 2, 3)})


# ---------------------------------------------------------------- wait buffer and probes


def test_resident_segments_join_now_others_wait():
    p = policy()
    p.resident[1] = 100
    joined, waiting = p.route({1: 5, 2: 3})
    assert joined == {1} and waiting == {2} and p.pending == {2: 3}


def test_a_segment_reaching_n_invoke_is_probed_and_one_below_is_not():
    p = policy(n_invoke=10)
    p.route({1: 9, 2: 10})
    assert p.probes_due() == [2]
    p.route({1: 1})
    assert p.probes_due() == [1, 2]  # equal pending: by segment id


def test_overflow_frees_exactly_the_r_wb_share_largest_first():
    p = policy(n_invoke=1000, wait_buffer_tuples=100, r_wb=0.4)
    p.route({1: 30, 2: 25, 3: 20, 4: 15, 5: 10})  # 100 tuples: full
    due = p.probes_due()
    assert due == [1, 2]  # 30 freed is not yet 40; 30 + 25 = 55 >= 40, so stop there
    assert sum(p.pending[s] for s in due) >= 0.4 * 100
    assert sum(p.pending[s] for s in due[:-1]) < 0.4 * 100


def test_no_overflow_probe_below_capacity():
    p = policy(n_invoke=1000, wait_buffer_tuples=100)
    p.route({1: 50, 2: 49})
    assert p.probes_due() == []


def test_a_segment_waiting_max_wait_s_of_stream_time_is_probed_oldest_first():
    p = policy(n_invoke=1000, max_wait_s=60)
    p.route({1: 2, 2: 1}, oldest={1: 100.0, 2: 130.0}, now=140.0)
    assert p.probes_due() == []  # 40 s and 10 s: neither waited 60 s
    p.route({3: 1, 1: 4}, oldest={3: 150.0, 1: 155.0}, now=160.0)
    assert p.probes_due() == [1]  # segment 1's oldest tuple (100 s) has waited 60 s; its later ones keep 100
    p.route({}, now=200.0)
    assert p.probes_due() == [1, 2]  # 2 (130 s) is overdue at 190 s; 3 (150 s) is not yet
    p.probed(1, 5000)  # larger than join memory: not admitted, so 1 waits again below
    p.route({1: 1}, oldest={1: 199.0}, now=200.0)  # a probe forgot 1's old age
    assert p.probes_due() == [2]


def test_without_a_wait_bound_an_old_small_segment_waits_for_the_thesis_triggers():
    p = policy(n_invoke=1000, wait_buffer_tuples=100)
    p.route({1: 1}, oldest={1: 0.0}, now=0.0)
    p.route({2: 1}, oldest={2: 10_000.0}, now=10_000.0)
    assert p.probes_due() == []


def test_overdue_segments_count_towards_freeing_an_overflowing_buffer():
    p = policy(n_invoke=1000, wait_buffer_tuples=100, r_wb=0.4, max_wait_s=10)
    p.route({1: 30, 2: 50, 3: 20}, oldest={1: 0.0, 2: 50.0, 3: 50.0}, now=50.0)
    # Full (100): segment 1 is overdue (30 freed); the largest, 2, frees the remaining 10 of 40.
    assert p.probes_due() == [1, 2]


def test_drain_returns_every_pending_segment():
    p = policy(n_invoke=1000)
    p.route({3: 1, 1: 5, 2: 5})
    assert p.drain() == [1, 2, 3]


# ---------------------------------------------------------------- admission and eviction


def test_probed_segment_is_admitted_while_memory_is_free():
    p = policy(memory_budget=1000)
    p.route({1: 4})
    assert p.probed(1, 600) == Eviction(1, ())
    assert p.pending == {} and p.resident == {1: 600} and p.memory_free == 400


def test_eviction_that_must_happen():
    p = policy(memory_budget=1000, rho=0.25, tau=1000)
    p.resident = {1: 500, 2: 500}
    p.freq.observe([1] * 10 + [2] * 40 + [3] * 30)
    # C_3 = 30 >= (500/500) * 1.25 * C_1 = 12.5 and 0 + 500 >= 500: segment 1 (lowest C/|P|) goes.
    assert p.probed(3, 500) == Eviction(3, (1,))
    assert set(p.resident) == {2, 3}


def test_eviction_that_must_not_happen_rule_6_1():
    p = policy(memory_budget=1000, rho=0.25, tau=1000)
    p.resident = {1: 500, 2: 500}
    p.freq.observe([1] * 10 + [2] * 40 + [3] * 12)  # 12 < 1.25 * 10
    assert p.probed(3, 500) is None
    assert set(p.resident) == {1, 2}


def test_eviction_that_must_not_happen_rule_6_2():
    p = policy(memory_budget=1000, rho=0.0, tau=1000)
    p.resident = {1: 300, 2: 700}
    p.freq.observe([1] * 1 + [2] * 100 + [3] * 90)
    # Segment 1 has the lowest C/|P| but freeing its 300 bytes cannot hold 800; segment 2 fails (6.1).
    assert p.probed(3, 800) is None


def test_a_segment_larger_than_memory_is_never_admitted():
    p = policy(memory_budget=100)
    p.freq.observe([1] * 50)
    assert p.probed(1, 101) is None and p.resident == {}


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        policy(r_wb=0)
    with pytest.raises(ValueError):
        policy(alpha=1.5)
    with pytest.raises(ValueError):
        policy(max_wait_s=-1)


# ---------------------------------------------------------------- granularity


def test_granularity_switches_with_hysteresis():
    g = Granularity(base_seconds=10, l_mark=2, h_mark=100, block_factor=4)
    assert g.next_batch_seconds(50) == 10  # tuple mode, below h_mark
    assert g.next_batch_seconds(101) == 40  # above h_mark: block mode
    assert g.next_batch_seconds(50) == 40  # between the marks: stays block
    assert g.next_batch_seconds(1) == 10  # below l_mark: back to tuple


def test_a_resident_segment_that_grows_past_the_budget_evicts_the_coldest():
    p = policy(memory_budget=1000, tau=1000)
    p.resident = {1: 400, 2: 400}
    p.freq.observe([1] * 5 + [2] * 50)
    assert p.resize(2, 500) == []  # 900 <= 1000
    assert p.resize(2, 700) == [1]  # 1100 > 1000: segment 1 is colder per byte
    assert p.resident == {2: 700}
    assert p.resize(3, 10) == []  # not resident: nothing to do


def test_plan_batches_groups_windows_under_a_backlog_and_returns_with_hysteresis():
    from etl.core.policy import plan_batches

    counts = {0: 5, 1: 200, 2: 50, 3: 50, 4: 50, 5: 30, 6: 30, 7: 30, 8: 30, 9: 1, 10: 1, 11: 1, 12: 1, 20: 300}
    g = Granularity(base_seconds=10, l_mark=10, h_mark=100, block_factor=4)
    # 1 is over h_mark: block of 4 windows; 5..8 still sum to 120 >= l_mark: stay in block;
    # 9..12 (4 updates) is below l_mark: back to one window per batch; 20 bursts again.
    assert plan_batches(counts, g) == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9], [10], [11], [12], [20]]


def test_plan_batches_is_a_pure_function_of_the_counts_and_covers_every_window_once():
    import random

    from etl.core.policy import plan_batches

    rng = random.Random(1)
    for _ in range(50):
        counts = {i: rng.choice([0, 3, 50, 400]) for i in sorted(rng.sample(range(40), 20))}
        plan = plan_batches(counts, Granularity(10, 10, 100, 3))
        assert plan == plan_batches(counts, Granularity(10, 10, 100, 3))
        assert [w for g in plan for w in g] == sorted(counts)
        assert all(g[-1] - g[0] < 3 for g in plan)
    assert plan_batches({}, Granularity(10, 10, 100, 3)) == []
    assert plan_batches({0: 999, 1: 999}, Granularity(10, 10, 100, 1)) == [[0], [1]]


def _state(p: PartitionPolicy) -> tuple:
    return (dict(p.resident), dict(p.pending), dict(p.oldest), dict(p.last_probe_step), dict(p.pending_since), p.now,
            {s: round(p.freq.value(s), 9) for s in range(12)})


def test_a_restart_s_replay_reaches_the_live_run_s_state_and_then_decides_alike():
    """What a restart does (``replay`` over the done steps) must leave the policy exactly where the
    live run stood, so the rest of the run probes and admits the same segments."""
    rng = random.Random(7)
    steps = list(range(8))
    arrivals = {}
    for step in steps:
        by_epoch = {step * 2 + e: {rng.randrange(12): rng.randrange(1, 9) for _ in range(4)} for e in range(2)}
        segs = {s for c in by_epoch.values() for s in c}
        arrivals[step] = StepArrivals(by_epoch, {s: step * 60.0 + s for s in segs}, step * 60.0 + 59)
    new_keys = {step: {rng.randrange(12): rng.randrange(0, 3)} for step in steps}

    def fresh():
        return PartitionPolicy(n_invoke=12, r_wb=0.4, alpha=0.3, tau=10, rho=0.25, memory_budget=900,
                               wait_buffer_tuples=60, max_wait_s=240), SegmentSizes({s: 20 + s for s in range(12)}, 10.0)

    live, live_sizes = fresh()
    for step in steps:  # the mechanism's order: observe and route, probe what is due, commit
        live.observe(arrivals[step], step)
        for seg in live.probes_due():
            live.probed(seg, live_sizes.bytes(seg), step)
        live_sizes.grow(new_keys[step], live)
    restarted, sizes = fresh()
    replay(restarted, sizes, steps, arrivals, new_keys)
    assert _state(restarted) == _state(live) and sizes.tuples == live_sizes.tuples
    assert live.last_probe_step and live.resident  # the run did probe and admit
    later = StepArrivals({99: {3: 20, 5: 1}}, {3: 600.0, 5: 600.0}, 600.0)
    assert restarted.observe(later) == live.observe(later)
    assert restarted.probes_due() == live.probes_due()


@pytest.mark.parametrize("seed", range(6))
def test_pending_since_names_exactly_the_tuples_the_live_wait_buffer_holds(seed):
    """A restart fills the wait buffer again with each pending segment's tuples from the step it
    began to wait (``pending_since``): they must be the tuples the live run held, through
    admissions, evictions by a hotter segment and by growth, overflow probes and the wait bound."""
    rng = random.Random(seed)
    p = PartitionPolicy(n_invoke=9, r_wb=0.4, alpha=0.3, tau=5, rho=0.25, memory_budget=120,
                        wait_buffer_tuples=30, max_wait_s=rng.choice([0.0, 150.0]))
    sizes = SegmentSizes({s: rng.randrange(2, 8) for s in range(10)}, 10.0)
    arrived: list[tuple[int, int]] = []  # (step, segment), one per tuple
    held: list[tuple[int, int]] = []  # what the live wait buffer holds
    evictions = 0
    for step in range(40):
        counts = {rng.randrange(10): rng.randrange(1, 6) for _ in range(rng.randrange(1, 5))}
        joined, waiting = p.observe(StepArrivals({step: counts}, {s: step * 60.0 for s in counts}, step * 60.0 + 59), step)
        for seg, n in counts.items():
            arrived += [(step, seg)] * n
            if seg in waiting:
                held += [(step, seg)] * n
        for seg in p.probes_due():
            decision = p.probed(seg, sizes.bytes(seg), step)
            evictions += bool(decision and decision.evicted)
            held = [t for t in held if t[1] != seg]
        evictions += len(sizes.grow({rng.randrange(10): rng.randrange(0, 3)}, p))
        named = [t for t in arrived if t[1] in p.pending_since and t[0] >= p.pending_since[t[1]]]
        assert sorted(named) == sorted(held), step
        assert {s: n for s, n in p.pending.items() if n} == {s: sum(1 for t in held if t[1] == s) for s in {t[1] for t in held}}
    assert evictions and held  # the cases that matter occurred


def test_the_flush_s_probe_is_recorded_as_the_final_step():
    p = PartitionPolicy(n_invoke=1, r_wb=0.4, alpha=0.3, tau=10, rho=0.25, memory_budget=0, wait_buffer_tuples=10)
    p.observe(StepArrivals({0: {4: 1}}))
    p.probed(4, 100, step=-1)
    assert p.last_probe_step == {4: FINAL_STEP}
    assert StepArrivals({0: {1: 2}, 1: {1: 3, 2: 1}}).totals() == {1: 5, 2: 1}


def test_a_grown_resident_segment_may_push_another_out():
    p = PartitionPolicy(n_invoke=1, r_wb=0.4, alpha=0.3, tau=10, rho=0.25, memory_budget=300, wait_buffer_tuples=10)
    sizes = SegmentSizes({1: 10, 2: 10}, 10.0)
    p.probed(1, sizes.bytes(1))
    p.probed(2, sizes.bytes(2))
    assert set(p.resident) == {1, 2}
    assert sizes.grow({2: 12}, p) == [1] and sizes.tuples == {1: 10, 2: 22} and p.resident == {2: 220}


# ---------------------------------------------------------------- carried between runs (issue 47)


def test_a_run_starts_where_the_previous_one_ended_its_resident_segments_and_frequencies():
    """The next run's policy, warmed from ``carried()``, joins at once what the previous run held
    resident, and its frequencies decay on from the previous run's (a run's boundary closes an epoch)."""
    ended = policy(alpha=0.5, tau=4, memory_budget=250)
    ended.freq.observe([1, 1, 1, 1, 2, 2, 3])  # epoch 0 closed: C'_1 = 2; current: 2 x2, 3 x1
    ended.probed(1, 100)
    ended.probed(2, 100)
    carried = ended.carried()
    assert carried == {"resident": [1, 2], "frequency": [[1, 2.0], [2, 2.0], [3, 1.0]]}

    sizes = SegmentSizes({1: 10, 2: 10, 3: 10}, 10.0)
    nxt = policy(alpha=0.5, tau=4, memory_budget=250)
    nxt.warm(carried, sizes)
    assert nxt.resident == {1: 100, 2: 100}
    assert nxt.route({1: 3, 3: 2}) == ({1}, {3})  # no cold start: segment 1 joins at once
    assert nxt.freq.value(1) == 2.0
    nxt.freq.observe_counts({0: {3: 4}})  # the new run's first epoch closes: the carried values decay
    assert nxt.freq.value(1) == 1.0 and nxt.freq.value(3) == 0.5 * (4 + 1.0)


def test_a_warm_start_admits_the_carried_segments_the_memory_holds_now_hottest_per_byte_first():
    carried = {"resident": [1, 2, 3, 9], "frequency": [[1, 5.0], [2, 9.0], [3, 1.0], [9, 50.0]]}
    # segment 1 grew since (30 rows), segment 9 is gone (a rebalance merged it away)
    sizes = SegmentSizes({1: 30, 2: 10, 3: 10}, 10.0)
    p = policy(memory_budget=250)
    p.warm(carried, sizes)
    assert p.resident == {2: 100, 3: 100}  # 2 (0.09/B), 1 (0.017/B: does not fit after 2), then 3 (0.01/B)
    assert p.freq.value(9) == 50.0  # its frequency is kept: harmless, it has no tuples now


def test_only_a_fresh_policy_is_warmed():
    p = policy()
    p.route({1: 2})
    with pytest.raises(ValueError):
        p.warm({"resident": [], "frequency": []}, SegmentSizes({}, 10.0))


def test_a_warm_start_then_a_restart_s_replay_reach_the_live_run_s_state():
    """A crash mid-run: the restart warms from the same carried state (kept in the run's snapshot)
    and replays its done steps, ending where the live run stood."""
    carried = {"resident": [4, 7], "frequency": [[4, 30.0], [7, 12.0], [2, 3.0]]}
    arrivals = {0: StepArrivals({0: {4: 5, 2: 9}}), 1: StepArrivals({1: {7: 3, 2: 9, 5: 2}})}

    def fresh():
        p, sizes = policy(n_invoke=15, memory_budget=600), SegmentSizes({s: 20 for s in range(10)}, 10.0)
        p.warm(carried, sizes)
        return p, sizes

    live, live_sizes = fresh()
    for step in (0, 1):
        live.observe(arrivals[step], step)
        for seg in live.probes_due():
            live.probed(seg, live_sizes.bytes(seg), step)
    restarted, sizes = fresh()
    replay(restarted, sizes, [0, 1], arrivals, {})
    assert _state(restarted) == _state(live) and 2 in live.resident  # segment 2 reached n_invoke and was admitted
