"""Discrete-event simulation of the four join strategies on one trace (papers/004 §6.4).

One server (the join operator) takes work from an input buffer of arrived tuples; the clock
advances by what each piece of work costs on the disk and CPU models of ``model.py``. The
partitioned join is driven by the ETL's own policy objects (``etl.core.policy.PartitionPolicy`` and
``Granularity``), so what is simulated is what the Spark strategy decides.

- ``partitioned-range`` / ``partitioned-hash``: micro-batches fire every ``tick_s`` (every
  ``block_factor`` ticks in block granularity, chosen by backlog against H_mark/L_mark). A
  tuple of a resident segment is joined at once by a nested-loop scan of its segment (tuple
  granularity: one scan per tuple; block granularity: one scan per 4 KB block of tuples); the
  others go to the wait buffer. Probes the policy calls for read a segment from disk and join
  its pending tuples, then the policy admits/evicts.
- ``meshjoin``: the queue (M - d bytes) is ``k`` segments of ``w`` tuples; a step starts when
  ``w`` new tuples have arrived and the previous step is done, reads the next disk segment and
  probes the queue's hash table (``n_bucket`` buckets) with each of its tuples. A tuple's
  output is produced at the step that reads its key's disk segment.
- ``native``: each micro-batch reads all of R and hash-joins (what a Spark stream-static join
  does), the next batch taking everything that arrived meanwhile.

Delays are output time minus arrival time, for tuples arriving after ``warmup_s`` and
produced before ``duration_s``; disk and CPU seconds count work started after ``warmup_s``.

With ``SimParams.live`` the partitioned joins are simulated as ``etl stream`` runs them on Spark
instead: windows, one commit a step at the loader's measured costs, runs ending with a flush,
and every update counted (``_simulate_partitioned_live``; docs/simulator.md "The loader on Spark").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from etl.core.policy import Granularity, PartitionPolicy
from etl.simulator.model import SimParams
from etl.simulator.workload import Layout, Relation, Trace

# The strategies this simulator models, in the thesis's figure order; the same names as
# etl.core.registry (a test holds them equal): a new strategy needs a model here too.
STRATEGIES = ("partitioned-range", "partitioned-hash", "meshjoin", "native")
LIVE_STRATEGIES = ("partitioned-range", "partitioned-hash")  # modelled on Spark too (``SimParams.live``)
SAMPLE_EVERY_S = 10.0


@dataclass
class SimResult:
    strategy: str
    rate: float
    memory_mb: float
    b: float
    arrived: int = 0  # tuples arriving in the measured window
    processed: int = 0  # of those, produced before the end
    avg_delay_s: float = float("nan")
    p99_delay_s: float = float("nan")
    disk_s: float = 0.0
    cpu_s: float = 0.0
    disk_bytes: int = 0
    disk_reads: int = 0
    probes: int = 0
    admitted: int = 0
    evicted: int = 0
    final_backlog: int = 0  # tuples arrived but not produced at the end (input + wait buffer)
    sustained: bool = True  # the backlog does not grow over the run
    buffered: list[tuple[float, int, int]] = field(default_factory=list)  # (time, input buffer, wait buffer)
    wall_s: float = 0.0
    busy_s: float = 0.0  # live: the loader's seconds of ingest, steps and run-end holds
    wall_clock_s: float = 0.0  # live: the simulated time of its last commit

    @property
    def system_s(self) -> float:
        return self.disk_s + self.cpu_s

    def as_dict(self) -> dict:
        out = asdict(self)
        out["system_s"] = self.system_s
        if self.wall_clock_s:
            out["busy_share"] = self.busy_s / self.wall_clock_s
        out["keymap_bytes_per_1000_updates"] = self.disk_bytes / max(self.arrived, 1) * 1000
        return out


class _Delays:
    """Output delays of the measured tuples; exact average and p99."""

    def __init__(self, warmup: float, end: float) -> None:
        self.warmup, self.end, self.parts = warmup, end, []

    def add(self, produced_at, arrived: np.ndarray) -> None:
        if produced_at > self.end if np.isscalar(produced_at) else False:
            return
        d = np.broadcast_to(produced_at, arrived.shape) - arrived
        keep = arrived >= self.warmup
        if not np.isscalar(produced_at):
            keep &= np.asarray(produced_at) <= self.end
        if keep.any():
            self.parts.append(d[keep])

    def finish(self, res: SimResult) -> None:
        if self.parts:
            allv = np.concatenate(self.parts)
            res.processed = int(allv.size)
            res.avg_delay_s = float(allv.mean())
            res.p99_delay_s = float(np.percentile(allv, 99))


def _sustained(samples: list[tuple[float, int, int]], p: SimParams) -> bool:
    """The backlog is not growing: its mean over the last quarter of the run exceeds that of the
    second quarter by less than 5% of what arrives in half the run (bursts come and go; a
    saturated join accumulates a steady share of the arrivals)."""
    if not samples:
        return True
    t = np.array([s[0] for s in samples])
    v = np.array([s[1] + s[2] for s in samples], dtype=float)
    q2 = v[(t >= p.duration_s * 0.25) & (t < p.duration_s * 0.5)]
    q4 = v[t >= p.duration_s * 0.75]
    if not len(q2) or not len(q4):
        return True
    return bool(q4.mean() - q2.mean() < 0.05 * p.rate * p.duration_s / 2)


def _result(strategy: str, p: SimParams) -> SimResult:
    return SimResult(strategy, p.rate, p.memory_budget / (1 << 20), p.b)


def _epoch_counts(start_index: int, segs: np.ndarray, tau: int) -> dict[int, dict[int, int]]:
    epochs = (start_index + np.arange(len(segs))) // tau
    out: dict[int, dict[int, int]] = {}
    for e in np.unique(epochs):
        s, c = np.unique(segs[epochs == e], return_counts=True)
        out[int(e)] = dict(zip(s.tolist(), c.tolist()))
    return out


def _policy(p: SimParams) -> tuple[PartitionPolicy, Granularity]:
    policy = PartitionPolicy(
        p.n_invoke, p.r_wb, p.alpha, p.tau, p.rho, p.join_memory, p.wait_buffer_tuples, p.max_wait_s
    )
    return policy, Granularity(1, p.l_mark_blocks * p.block_tuples, p.h_mark_blocks * p.block_tuples, p.block_factor)


def _route(policy: PartitionPolicy, pending: dict[int, list[np.ndarray]], segs: np.ndarray, arr: np.ndarray,
           taken: int, tau: int) -> tuple[np.ndarray, set[int]]:
    """A batch's tuples through the ETL's policy: which are joined in memory now (a mask, and their
    segments); the others wait, their arrival times kept in ``pending`` by segment."""
    policy.freq.observe_counts(_epoch_counts(taken, segs, tau))
    uniq, first, counts = np.unique(segs, return_index=True, return_counts=True)
    # Arrivals are in time order, so a segment's first index is its oldest tuple.
    joined, _waiting = policy.route(
        dict(zip(uniq.tolist(), counts.tolist())), dict(zip(uniq.tolist(), arr[first].tolist())), float(arr[-1])
    )
    in_memory = np.isin(segs, np.fromiter(joined, dtype=np.int64, count=len(joined)))
    if not in_memory.all():
        wsegs, warr = segs[~in_memory], arr[~in_memory]
        order = np.argsort(wsegs, kind="stable")
        wsegs, warr = wsegs[order], warr[order]
        cut = np.flatnonzero(np.diff(wsegs)) + 1
        for part_s, part_a in zip(np.split(wsegs, cut), np.split(warr, cut)):
            pending.setdefault(int(part_s[0]), []).append(part_a)
    return in_memory, joined


def simulate_partitioned(p: SimParams, trace: Trace, relation: Relation, layout: Layout, strategy: str) -> SimResult:
    if p.live is not None:
        return _simulate_partitioned_live(p, trace, relation, layout, strategy)
    res = _result(strategy, p)
    cpu, disk = p.cpu, p.disk
    seg_of = layout.segment_of_row[relation.row_of(trace.keys)]
    seg_tuples = layout.segment_bytes // p.r_bytes
    policy, gran = _policy(p)
    block = p.block_tuples
    pending: dict[int, list[np.ndarray]] = {}
    delays = _Delays(p.warmup_s, p.duration_s)
    ts, n = trace.ts, len(trace)
    clock, taken, trigger = 0.0, 0, p.tick_s
    next_sample = 0.0

    def charge(start: float, disk_s: float, cpu_s: float) -> None:
        if start >= p.warmup_s:
            res.disk_s += disk_s
            res.cpu_s += cpu_s

    while taken < n:
        start = max(clock, trigger)
        if start > p.duration_s:
            break
        end = int(np.searchsorted(ts, start, side="right"))
        if end == taken:  # nothing arrived: the next trigger after the next arrival
            trigger = math.ceil(ts[taken] / p.tick_s) * p.tick_s
            if trigger < ts[taken]:
                trigger += p.tick_s
            continue
        backlog = end - taken
        interval = gran.next_batch_seconds(backlog) * p.tick_s
        tuple_mode = gran.mode == "tuple"
        if start >= next_sample:
            res.buffered.append((start, backlog, policy.waiting))
            next_sample = start + SAMPLE_EVERY_S
        segs, arr = seg_of[taken:end], ts[taken:end]
        in_memory, joined = _route(policy, pending, segs, arr, taken, p.tau)
        t = start
        work_cpu = 0.0
        if in_memory.any():
            msegs, marr = segs[in_memory], arr[in_memory]
            if tuple_mode:  # one nested-loop scan of the segment per tuple
                cost = seg_tuples[msegs] * (cpu.scan_tuple_s + cpu.compare_s)
                done = t + np.cumsum(cost)
                delays.add(done, marr)
                work_cpu += float(cost.sum())
            else:  # one scan per block of tuples of the same segment
                for seg in sorted(joined):
                    sel = msegs == seg
                    m = int(sel.sum())
                    cost = -(-m // block) * seg_tuples[seg] * cpu.scan_tuple_s + m * seg_tuples[seg] * cpu.compare_s
                    work_cpu += cost
                    delays.add(t + work_cpu, marr[sel])
        t += work_cpu
        n_wait = int(np.count_nonzero(~in_memory))
        if n_wait:
            t += n_wait * cpu.buffer_tuple_s
            work_cpu += n_wait * cpu.buffer_tuple_s
        charge(start, 0.0, work_cpu)
        for seg in policy.probes_due():
            waiting_ts = np.concatenate(pending.pop(seg))
            nbytes = int(layout.segment_bytes[seg])
            d_s = disk.read_seconds(int(layout.offsets[seg]), nbytes)
            m = len(waiting_ts)
            c_s = -(-m // block) * seg_tuples[seg] * cpu.scan_tuple_s + m * seg_tuples[seg] * cpu.compare_s
            charge(t, d_s, c_s)
            if t >= p.warmup_s:
                res.disk_bytes += nbytes
                res.disk_reads += 1
                res.probes += 1
            t += d_s + c_s
            delays.add(t, waiting_ts)
            ev = policy.probed(seg, nbytes)
            if ev is not None and start >= p.warmup_s:
                res.admitted += 1
                res.evicted += len(ev.evicted)
        clock = t
        taken = end
        trigger = start + interval

    res.arrived = int(np.count_nonzero((ts >= p.warmup_s) & (ts <= p.duration_s)))
    res.final_backlog = int(np.count_nonzero(ts[taken:] <= p.duration_s)) + policy.waiting
    delays.finish(res)
    res.sustained = _sustained(res.buffered, p)
    return res


def _simulate_partitioned_live(p: SimParams, trace: Trace, relation: Relation, layout: Layout, strategy: str) -> SimResult:
    """The partitioned join as ``etl stream`` runs it on Spark (``p.live``), where the thesis's
    operator reads a disk: arrivals in windows of ``tick_s`` (a block of ``block_factor`` of them
    past H_mark), a step once its last window has closed, its grace passed and its piece been
    ingested; everything a step releases (joined in memory or probed) is logged by its one commit,
    at the step's end. Each run of ``run_s`` ends with a flush of the wait buffer in its last step,
    then the loop is held (``run_end_hold_s``); the join's state is carried to the next run. Every
    update counts from the stream's start to its commit, the flush's included, as the live
    benchmark counts them: no warm-up left out, nothing left waiting at the end."""
    res = _result(strategy, p)
    costs = p.live
    seg_of = layout.segment_of_row[relation.row_of(trace.keys)]
    policy, gran = _policy(p)
    pending: dict[int, list[np.ndarray]] = {}
    delays = _Delays(0.0, math.inf)
    ts, tick = trace.ts, p.tick_s
    run_s = p.run_s or math.ceil(p.duration_s / tick) * tick
    last_end = math.ceil(p.duration_s / run_s) * run_s
    grace = costs.grace_s
    clock, taken, cutoff, run_end = 0.0, 0, 0.0, run_s
    next_apply, next_sample = costs.apply_interval_s, 0.0
    lags: list[tuple[float, float]] = []  # (a step's last window's close, its start after it)
    while cutoff < last_end:
        waiting_now = int(np.searchsorted(ts, max(clock - grace, cutoff + tick), side="left")) - taken
        close = min(cutoff + gran.next_batch_seconds(waiting_now) * tick, run_end)
        # The last piece is read once the loop is free and its window's grace has passed; behind,
        # that read takes every window closed by then, within the run, in one pass.
        read_at = max(clock, close + grace)
        close = max(close, min(run_end, math.floor((read_at - grace) / tick) * tick))
        first_idle = max(cutoff + tick, math.ceil((clock - grace) / tick) * tick)
        passes = max(1, math.floor((close - first_idle) / tick) + 1)  # windows read as they closed, the loop idle
        start = read_at + costs.ingest_s
        end = int(np.searchsorted(ts, close, side="left"))
        lags.append((close, start - close))
        if start >= next_sample:  # the input not yet taken when the step starts: a loader behind piles it up
            res.buffered.append((start, int(np.searchsorted(ts, start, side="right")) - taken, policy.waiting))
            next_sample = start + SAMPLE_EVERY_S
        released: list[np.ndarray] = []
        if end > taken:
            segs, arr = seg_of[taken:end], ts[taken:end]
            in_memory, _joined = _route(policy, pending, segs, arr, taken, p.tau)
            released.append(arr[in_memory])
        ends_run = close >= run_end
        due = policy.probes_due()
        in_run = len(due)  # charged per probe; the flush's read only the keys waiting (narrowed), not what per_probe_s was fitted on
        if ends_run:  # the run's last step flushes every segment still waiting
            due += [seg for seg in policy.drain() if seg not in due]
        for seg in due:
            released.append(np.concatenate(pending.pop(seg)))
            nbytes = int(layout.segment_bytes[seg])
            res.disk_bytes += nbytes
            res.disk_reads += 1
            res.probes += 1
            ev = policy.probed(seg, nbytes)
            if ev is not None:
                res.admitted += 1
                res.evicted += len(ev.evicted)
        n_released = sum(len(a) for a in released)
        stepped = bool(n_released or end > taken)
        step = costs.step_seconds(n_released, in_run) if stepped else 0.0
        if stepped and start >= next_apply and not ends_run:  # the coalesced MERGE pair beside this step
            step += costs.apply_overlap_s
            while next_apply <= start:
                next_apply += costs.apply_interval_s
        if released:
            delays.add(start + step, np.concatenate(released))
        res.busy_s += step + passes * costs.ingest_s
        clock = start + step
        if ends_run:  # the hold applies what is logged: the next apply is an interval after it
            clock += costs.run_end_hold_s
            res.busy_s += costs.run_end_hold_s
            run_end += run_s
            next_apply = clock + costs.apply_interval_s
        taken, cutoff = end, close
    res.wall_clock_s = clock
    res.arrived = len(ts)
    res.final_backlog = len(ts) - taken + policy.waiting
    delays.finish(res)
    res.sustained = _keeps_up(lags, p)
    return res


def _keeps_up(lags: list[tuple[float, float]], p: SimParams) -> bool:
    """A live loader keeps up when the steps of the stream's last quarter start no later after
    their windows close than those of its second quarter did (medians: a run's end holds the
    next step once a run), give or take a twentieth of the stream; one falling behind starts
    each step later than the last."""
    d = p.duration_s

    def median(lo: float, hi: float) -> float:
        part = [lag for close, lag in lags if lo * d < close <= hi * d]
        return float(np.median(part)) if part else 0.0

    return median(0.75, 1.0) - median(0.25, 0.5) < 0.05 * d


def simulate_meshjoin(p: SimParams, trace: Trace, relation: Relation, layout: Layout) -> SimResult:
    res = _result("meshjoin", p)
    k = layout.n_segments
    w = max(1, p.meshjoin_queue_tuples // k)
    ts, n = trace.ts, len(trace)
    disk_seg = layout.segment_of_row[relation.row_of(trace.keys)]
    steps = n // w
    ends = np.full(steps, np.inf)
    clock = 0.0
    next_sample = 0.0
    r_tuples = layout.segment_bytes // p.r_bytes
    for s in range(steps):
        ready = ts[(s + 1) * w - 1]
        start = max(clock, ready)
        if start > p.duration_s:
            break
        if start >= next_sample:
            arrived = int(np.searchsorted(ts, start, side="right"))
            res.buffered.append((start, arrived - s * w, 0))
            next_sample = start + SAMPLE_EVERY_S
        g = s % k
        nbytes = int(layout.segment_bytes[g])
        d_s = p.disk.read_seconds(int(layout.offsets[g]), nbytes)
        queued = min(s + 1, k) * w
        c_s = r_tuples[g] * (queued / p.n_bucket) * p.cpu.chain_step_s + w * p.cpu.buffer_tuple_s
        if start >= p.warmup_s:
            res.disk_s += d_s
            res.cpu_s += c_s
            res.disk_bytes += nbytes
            res.disk_reads += 1
            res.probes += 1
        clock = start + d_s + c_s
        ends[s] = clock
    done = int(np.count_nonzero(np.isfinite(ends)))
    idx = np.arange(min(n, done * w))
    j = idx // w
    meet = j + (disk_seg[idx] - j) % k
    ok = meet < done
    produced = np.where(ok, ends[np.minimum(meet, steps - 1)], np.inf)
    delays = _Delays(p.warmup_s, p.duration_s)
    delays.add(produced[ok], ts[idx][ok])
    delays.finish(res)
    res.arrived = int(np.count_nonzero((ts >= p.warmup_s) & (ts <= p.duration_s)))
    entered = done * w
    res.final_backlog = int(np.count_nonzero(ts <= p.duration_s)) - int(np.count_nonzero(produced <= p.duration_s))
    res.final_backlog = max(res.final_backlog, int(np.count_nonzero(ts[entered:] <= p.duration_s)))
    res.sustained = _sustained(res.buffered, p)
    return res


def simulate_native(p: SimParams, trace: Trace, relation: Relation) -> SimResult:
    res = _result("native", p)
    ts, n = trace.ts, len(trace)
    n_rows = len(relation.keys)
    read_s = p.disk.read_seconds(0, p.relation_bytes)
    delays = _Delays(p.warmup_s, p.duration_s)
    clock, taken, trigger, next_sample = 0.0, 0, p.tick_s, 0.0
    while taken < n:
        start = max(clock, trigger)
        if start > p.duration_s:
            break
        end = int(np.searchsorted(ts, start, side="right"))
        if end == taken:
            trigger = math.ceil(ts[taken] / p.tick_s) * p.tick_s
            if trigger < ts[taken]:
                trigger += p.tick_s
            continue
        m = end - taken
        if start >= next_sample:
            res.buffered.append((start, m, 0))
            next_sample = start + SAMPLE_EVERY_S
        c_s = m * p.cpu.buffer_tuple_s + n_rows * p.cpu.chain_step_s
        if start >= p.warmup_s:
            res.disk_s += read_s
            res.cpu_s += c_s
            res.disk_bytes += p.relation_bytes
            res.disk_reads += 1
        clock = start + read_s + c_s
        delays.add(clock, ts[taken:end])
        taken = end
        trigger = start + p.tick_s
    res.arrived = int(np.count_nonzero((ts >= p.warmup_s) & (ts <= p.duration_s)))
    res.final_backlog = int(np.count_nonzero(ts[taken:] <= p.duration_s))
    delays.finish(res)
    res.sustained = _sustained(res.buffered, p)
    return res


def simulate(strategy: str, p: SimParams, trace: Trace | None = None, relation: Relation | None = None) -> SimResult:
    """Run one strategy; pass the same ``trace`` and ``relation`` to compare strategies."""
    import time

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if p.live is not None and strategy not in LIVE_STRATEGIES:
        raise ValueError(f"{strategy} is not modelled on Spark (SimParams.live): only {', '.join(LIVE_STRATEGIES)}")
    trace = trace if trace is not None else Trace.generate(p)
    relation = relation if relation is not None else Relation.generate(p)
    t0 = time.perf_counter()
    if strategy == "partitioned-range":
        res = simulate_partitioned(p, trace, relation, relation.range_layout(), strategy)
    elif strategy == "partitioned-hash":
        res = simulate_partitioned(p, trace, relation, relation.hash_layout(), strategy)
    elif strategy == "meshjoin":
        res = simulate_meshjoin(p, trace, relation, relation.meshjoin_layout())
    else:
        res = simulate_native(p, trace, relation)
    res.wall_s = time.perf_counter() - t0
    return res
