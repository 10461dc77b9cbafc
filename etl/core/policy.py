"""The partition-based hybrid join's decisions (papers/004 §6.3, Algorithms 8 and 9), as pure Python.

No Spark here: the mechanism (``etl/strategies``) tells the policy what arrived and what a probe
read, and the policy answers which segments are resident, which to probe and which to admit or
evict. The same object drives the simulator, and every rule is unit-tested in milliseconds.

Decisions where the thesis is open (DESIGN.md §4):

- both probe triggers apply: a segment whose pending count reaches ``n_invoke`` is probed, and a
  full wait buffer is relieved by probing the largest pending segments until at least ``r_wb`` of
  its capacity is free (Algorithm 8, lines 27-31);
- a probed segment is admitted without eviction while join memory has room for it; otherwise it
  replaces the resident segment with the lowest ``C_m/|P_m|`` if rules (6.1) and (6.2) hold for it;
- epochs count tuples (``tau`` tuples per epoch); a tuple of the current epoch weighs 1, of the
  previous ``alpha``, and so on: ``C_k = c_k + C'_k`` with ``C'_k = alpha (c_{e} + C'_{e-1})``
  at each epoch's end, the recurrence of §6.3.3.

Added here, off by default: a wait bound ``max_wait_s``. The thesis's triggers never probe a
segment that gathers fewer than ``n_invoke`` tuples and is never among the largest when the
buffer overflows, so its tuples wait until the end of the run (the long tail of the partitioned
join's delay). With the bound, a segment whose oldest pending tuple arrived ``max_wait_s`` or more
before the latest arrival seen is probed too. Time is the stream's (arrival times), not the wall
clock, so a restarted run decides exactly as an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from etl.core import registry
from etl.core.sizing import configured_sizes, segment_bytes


@dataclass
class ArrivalFrequency:
    """Decayed arrival frequency ``C_k`` per segment over tuple-counted epochs."""

    alpha: float
    tau: int
    epoch: int = 0
    closed: dict[int, float] = field(default_factory=dict)  # C'_k: decayed total of closed epochs
    current: dict[int, int] = field(default_factory=dict)  # c_k: arrivals in the current epoch
    seen: int = 0  # tuples observed so far

    def _close_epochs(self, upto: int) -> None:
        while self.epoch < upto:
            keys = set(self.closed) | set(self.current)
            self.closed = {k: self.alpha * (self.current.get(k, 0) + self.closed.get(k, 0.0)) for k in keys}
            self.closed = {k: v for k, v in self.closed.items() if v > 1e-9}
            self.current = {}
            self.epoch += 1

    def observe(self, segments: Iterable[int]) -> None:
        """Tuples in arrival order, one segment id each."""
        for seg in segments:
            self._close_epochs(self.seen // self.tau)
            self.current[seg] = self.current.get(seg, 0) + 1
            self.seen += 1

    def observe_counts(self, counts_by_epoch: Mapping[int, Mapping[int, int]]) -> None:
        """The same, from per-epoch counts (epoch = global tuple index // tau), as Spark can give them."""
        for epoch in sorted(counts_by_epoch):
            self._close_epochs(epoch)
            for seg, n in counts_by_epoch[epoch].items():
                self.current[seg] = self.current.get(seg, 0) + n
                self.seen += n
        self._close_epochs(self.seen // self.tau)

    def value(self, segment: int) -> float:
        return self.current.get(segment, 0) + self.closed.get(segment, 0.0)


@dataclass(frozen=True)
class Eviction:
    admitted: int
    evicted: tuple[int, ...]


class PartitionPolicy:
    """Resident set, wait-buffer bookkeeping and the probe/admit/evict rules."""

    def __init__(
        self,
        n_invoke: int,
        r_wb: float,
        alpha: float,
        tau: int,
        rho: float,
        memory_budget: int,
        wait_buffer_tuples: int,
        max_wait_s: float = 0.0,
    ) -> None:
        if not (n_invoke > 0 and 0 < r_wb <= 1 and 0 < alpha <= 1 and tau > 0 and rho >= 0 and max_wait_s >= 0):
            raise ValueError("need n_invoke > 0, 0 < r_wb <= 1, 0 < alpha <= 1, tau > 0, rho >= 0, max_wait_s >= 0")
        if memory_budget < 0 or wait_buffer_tuples <= 0:
            raise ValueError("need memory_budget >= 0 and wait_buffer_tuples > 0")
        self.n_invoke = n_invoke
        self.r_wb = r_wb
        self.rho = rho
        self.memory_budget = memory_budget
        self.capacity = wait_buffer_tuples
        self.freq = ArrivalFrequency(alpha, tau)
        self.resident: dict[int, int] = {}  # segment -> bytes held in join memory
        self.pending: dict[int, int] = {}  # segment -> tuples waiting in the wait buffer
        self.max_wait_s = max_wait_s  # 0: no bound (the thesis)
        self.oldest: dict[int, float] = {}  # segment -> arrival time of its oldest pending tuple
        self.now = float("-inf")  # stream time: the latest arrival seen
        # segment -> the run step that last probed it: its wait-buffer tuples of later steps are the
        # pending ones (FINAL_STEP: probed by the end-of-run flush)
        self.last_probe_step: dict[int, int] = {}
        # segment -> the step its pending tuples began to wait: from there on every tuple of it
        # waits (only a probe makes it resident), which is what a restart selects again
        self.pending_since: dict[int, int] = {}

    @classmethod
    def from_config(cls, cfg) -> "PartitionPolicy":
        """With ``n_invoke`` and the wait buffer as set, or derived (``etl.core.sizing``) for range
        segments of 128-byte rows until a run sets its own at its start (``size_for_run``)."""
        sizes = configured_sizes(cfg, segment_bytes(cfg.theta, 128.0))
        return cls(sizes.n_invoke, cfg.r_wb, cfg.alpha, cfg.tau, cfg.rho, cfg.memory_budget, sizes.wait_buffer_tuples,
                   cfg.max_wait_s)

    def size_for_run(self, n_invoke: int, wait_buffer_tuples: int) -> None:
        """A run's sizes, as its start derived them (``etl.core.sizing.run_sizes``)."""
        if n_invoke <= 0 or wait_buffer_tuples <= 0:
            raise ValueError("need n_invoke > 0 and wait_buffer_tuples > 0")
        self.n_invoke, self.capacity = n_invoke, wait_buffer_tuples

    # ------------------------------------------------------------------ state

    @property
    def resident_bytes(self) -> int:
        return sum(self.resident.values())

    @property
    def memory_free(self) -> int:
        return self.memory_budget - self.resident_bytes

    @property
    def waiting(self) -> int:
        return sum(self.pending.values())

    def is_resident(self, segment: int) -> bool:
        return segment in self.resident

    # ------------------------------------------------------------------ Algorithm 8

    def route(
        self, counts: Mapping[int, int], oldest: Mapping[int, float] | None = None, now: float | None = None,
        step: int | None = None,
    ) -> tuple[set[int], set[int]]:
        """A micro-batch's tuples per segment -> (segments joined in memory now, segments that wait).

        Waiting tuples are added to the wait buffer's counts. Arrival frequencies are updated by
        the caller through ``freq`` (it knows the arrival order), or here in segment order.
        For the wait bound: ``oldest`` is each segment's earliest arrival in the batch, ``now`` the
        batch's latest arrival. ``step``: the run step, kept in ``pending_since``.
        """
        if now is not None:
            self.now = max(self.now, now)
        joined, waiting = set(), set()
        for seg, n in counts.items():
            if n <= 0:
                continue
            if seg in self.resident:
                joined.add(seg)
            else:
                waiting.add(seg)
                if step is not None and not self.pending.get(seg):
                    self.pending_since[seg] = step
                self.pending[seg] = self.pending.get(seg, 0) + n
                if oldest is not None and seg in oldest:
                    self.oldest[seg] = min(self.oldest.get(seg, oldest[seg]), oldest[seg])
        return joined, waiting

    def overdue(self) -> list[int]:
        """Pending segments whose oldest tuple has waited ``max_wait_s`` of stream time, oldest first."""
        if not self.max_wait_s:
            return []
        limit = self.now - self.max_wait_s
        late = [s for s, t in self.oldest.items() if t <= limit and self.pending.get(s, 0) > 0]
        return sorted(late, key=lambda s: (self.oldest[s], s))

    def probes_due(self) -> list[int]:
        """Segments to probe now, in order: every segment at ``n_invoke`` (largest first), the
        overdue ones (with a wait bound), then, if the wait buffer is full, the largest pending
        segments until ``r_wb`` of it is free."""
        chosen = sorted((s for s, n in self.pending.items() if n >= self.n_invoke), key=lambda s: (-self.pending[s], s))
        chosen += [s for s in self.overdue() if s not in chosen]
        left = self.waiting - sum(self.pending[s] for s in chosen)
        if self.waiting >= self.capacity:
            target_free = self.r_wb * self.capacity
            for seg in sorted(self.pending, key=lambda s: (-self.pending[s], s)):
                if self.capacity - left >= target_free:
                    break
                if seg not in chosen:
                    chosen.append(seg)
                    left -= self.pending[seg]
        return chosen

    def drain(self) -> list[int]:
        """``flush()``: every segment with pending tuples, largest first."""
        return sorted((s for s, n in self.pending.items() if n > 0), key=lambda s: (-self.pending[s], s))

    # ------------------------------------------------------------------ Algorithm 9

    def observe(self, arrivals: "StepArrivals", step: int | None = None) -> tuple[set[int], set[int]]:
        """One step's arrivals: fold their per-epoch counts into ``C_k``, then route the step's
        segments (``route``). The same call live and when a restart replays the run."""
        self.freq.observe_counts(arrivals.by_epoch)
        return self.route(arrivals.totals(), arrivals.oldest, arrivals.now, step)

    def probed(self, segment: int, size_bytes: int, step: int | None = None) -> Eviction | None:
        """A probe read ``segment`` (``size_bytes``) and joined its pending tuples: free them, then
        admit the segment if memory allows, evicting one victim by rules (6.1) and (6.2).
        ``step``: the run step that probed (negative: the end-of-run flush), kept in ``last_probe_step``."""
        if step is not None:
            self.last_probe_step[segment] = FINAL_STEP if step < 0 else step
        self.pending.pop(segment, None)
        self.pending_since.pop(segment, None)
        self.oldest.pop(segment, None)
        if segment in self.resident:
            self.resident[segment] = size_bytes
            return None
        if size_bytes > self.memory_budget:
            return None
        if size_bytes <= self.memory_free:
            self.resident[segment] = size_bytes
            return Eviction(segment, ())
        victim = self.victim(segment, size_bytes)
        if victim is None:
            return None
        del self.resident[victim]
        self.resident[segment] = size_bytes
        return Eviction(segment, (victim,))

    def victim(self, segment: int, size_bytes: int) -> int | None:
        """The resident segment ``m`` with the lowest ``C_m/|P_m|`` for which (6.1) and (6.2) hold."""
        c_i = self.freq.value(segment)
        candidates = []
        for m, size_m in self.resident.items():
            c_m = self.freq.value(m)
            rule_61 = c_i >= (size_bytes / max(size_m, 1)) * (1 + self.rho) * c_m
            rule_62 = self.memory_free + size_m >= size_bytes
            if rule_61 and rule_62:
                candidates.append((c_m / max(size_m, 1), m))
        return min(candidates)[1] if candidates else None

    def resize(self, segment: int, size_bytes: int) -> list[int]:
        """A resident segment grew (keys inserted); if memory is now over budget, evict resident
        segments by lowest ``C_m/|P_m|`` until it fits. Returns the evicted segments."""
        if segment not in self.resident:
            return []
        self.resident[segment] = size_bytes
        evicted = []
        while self.resident_bytes > self.memory_budget and self.resident:
            victim = min(self.resident, key=lambda m: (self.freq.value(m) / max(self.resident[m], 1), m))
            del self.resident[victim]
            evicted.append(victim)
        return evicted

    def forget(self, segment: int) -> None:
        """Drop a segment from memory (e.g. it was split or merged by maintenance)."""
        self.resident.pop(segment, None)

    # ------------------------------------------------------------------ carried between runs

    def carried(self) -> dict:
        """What the next run starts from (issue 47, a warm join): the resident segments and every
        segment's decayed arrival frequency ``C_k``, as JSON-ready lists."""
        segments = set(self.freq.closed) | set(self.freq.current)
        return {
            "resident": sorted(self.resident),
            "frequency": [[s, self.freq.value(s)] for s in sorted(segments) if self.freq.value(s) > 1e-9],
        }

    def warm(self, carried: Mapping, sizes: "SegmentSizes") -> None:
        """Start a run from the previous run's ``carried()`` instead of cold: its ``C_k`` become the
        decayed total of closed epochs (a run's boundary closes an epoch, so they decay by ``alpha``
        when the new run's first epoch closes), and its resident segments are admitted again at
        their sizes now, highest ``C_m/|P_m|`` first, while the memory holds them (a segment that
        grew may no longer fit; one maintenance removed is not in ``sizes``). Only a fresh policy
        is warmed: a run's own decisions come after."""
        if self.resident or self.freq.seen or self.pending:
            raise ValueError("only a policy no run has used yet starts warm")
        freq = {int(s): float(v) for s, v in carried.get("frequency", []) if float(v) > 1e-9}
        self.freq.closed, self.freq.current = freq, {}
        known = [int(s) for s in carried.get("resident", []) if int(s) in sizes.tuples]
        for seg in sorted(known, key=lambda s: (-freq.get(s, 0.0) / max(sizes.bytes(s), 1), s)):
            size = sizes.bytes(seg)
            if 0 < size <= self.memory_free:
                self.resident[seg] = size


FINAL_STEP = 2**31 - 1  # last_probe_step of a segment probed by the end-of-run flush


@dataclass(frozen=True)
class StepArrivals:
    """What one step of a run brought, as the policy needs it: per-epoch segment counts (epochs
    of ``tau`` tuples in arrival order), each segment's earliest arrival and the step's latest
    arrival (epoch seconds, for the wait bound)."""

    by_epoch: Mapping[int, Mapping[int, int]]
    oldest: Mapping[int, float] = field(default_factory=dict)
    now: float | None = None

    def totals(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for counts in self.by_epoch.values():
            for seg, n in counts.items():
                out[seg] = out.get(seg, 0) + n
        return out


class SegmentSizes:
    """Tuples per segment of ``key_map`` and bytes per tuple: what a probe or admission costs."""

    def __init__(self, tuples: Mapping[int, int], row_bytes: float) -> None:
        self.tuples = dict(tuples)
        self.row_bytes = row_bytes or 128.0

    def bytes(self, segment: int) -> int:
        return int(self.tuples.get(segment, 0) * self.row_bytes)

    def grow(self, new_keys: Mapping[int, int], policy: PartitionPolicy) -> list[int]:
        """Segments gained keys: their sizes, and the policy's memory accounting (a resident
        segment that grew may push another out). Returns the evicted segments."""
        evicted = []
        for seg in sorted(new_keys):
            self.tuples[seg] = self.tuples.get(seg, 0) + new_keys[seg]
            evicted += policy.resize(seg, self.bytes(seg))
        return evicted


def replay(
    policy: PartitionPolicy, sizes: SegmentSizes, steps: Iterable[int], arrivals: Mapping[int, StepArrivals],
    new_keys: Mapping[int, Mapping[int, int]],
) -> None:
    """Bring a fresh policy to where an uninterrupted run stood after ``steps`` (a restart): each
    step's arrivals are observed and routed, its due segments probed, then the keys its commit
    inserted grow their segments, in the order the live run did those things."""
    for step in sorted(steps):
        policy.observe(arrivals[step], step)
        for seg in policy.probes_due():
            policy.probed(seg, sizes.bytes(seg), step)
        sizes.grow(new_keys.get(step, {}), policy)


class Granularity:
    """Tuple/block granularity (§6.3.4, Algorithm 8 lines 33-38) realised as micro-batch sizing.

    In ``tuple`` mode a micro-batch spans ``base_seconds`` of arrivals (low delay); once the
    backlog exceeds ``h_mark`` tuples the mode becomes ``block`` and batches span
    ``block_factor`` times as long, so each Spark job and Delta commit is shared by more tuples;
    below ``l_mark`` it returns to ``tuple``. Between the marks the mode stays (hysteresis).
    """

    def __init__(self, base_seconds: int, l_mark: int, h_mark: int, block_factor: int = 4) -> None:
        if not (base_seconds > 0 and 0 <= l_mark <= h_mark and block_factor >= 1):
            raise ValueError("need base_seconds > 0, 0 <= l_mark <= h_mark, block_factor >= 1")
        self.base_seconds, self.l_mark, self.h_mark, self.block_factor = base_seconds, l_mark, h_mark, block_factor
        self.mode = "tuple"

    def next_batch_seconds(self, backlog_tuples: int) -> int:
        if self.mode == "tuple" and backlog_tuples > self.h_mark:
            self.mode = "block"
        elif self.mode == "block" and backlog_tuples < self.l_mark:
            self.mode = "tuple"
        return self.base_seconds * (self.block_factor if self.mode == "block" else 1)


def plan_batches(window_counts: Mapping[int, int], granularity: Granularity) -> list[list[int]]:
    """Group a run's arrival windows (``batch_index`` -> updates) into the micro-batches the loader
    submits: one window per batch in tuple granularity, ``block_factor`` consecutive windows in
    block granularity. The backlog a decision sees is the updates the next batch would take at
    the current granularity, so the grouping is a pure function of the run's ingested counts:
    a restarted load plans the same batches (each named by its first window) and skips the done.
    """
    return [group for group, _ in plan_with_reach(window_counts, granularity)]


def plan_with_reach(window_counts: Mapping[int, int], granularity: Granularity) -> list[tuple[list[int], int]]:
    """``plan_batches``' groups, each with the window before which every window its grouping read
    lies: its decision looked at the backlog of its first window's width at the granularity then
    (one window in tuple mode, ``block_factor`` in block mode) and took the width it chose. The
    always-on loader loads a batch once those windows have closed (``stream_plan.settled_groups``):
    in tuple granularity as soon as its one window has, not ``block_factor`` windows later (but
    the first one-window batch after a block, whose decision read ``block_factor`` windows)."""
    windows = sorted(window_counts)
    planned: list[tuple[list[int], int]] = []
    i = 0
    while i < len(windows):
        width = granularity.block_factor if granularity.mode == "block" else 1
        start = windows[i]
        backlog = sum(window_counts[w] for w in windows[i:] if w < start + width)
        chosen = granularity.next_batch_seconds(backlog) // granularity.base_seconds
        group = [w for w in windows[i:] if w < start + chosen]
        planned.append((group, start + max(width, chosen)))
        i += len(group)
    return planned


def load_batches(strategy: str, counts: Mapping[int, int], cfg) -> list[list[int]]:
    """The arrival windows (``batch_index`` -> updates) each load batch of a run spans, in order:
    one window each, except for strategies the registry declares block-granular."""
    return [group for group, _ in load_plan(strategy, counts, cfg)]


def load_plan(strategy: str, counts: Mapping[int, int], cfg) -> list[tuple[list[int], int]]:
    """``load_batches`` with each batch's reach (``plan_with_reach``): the window before which
    every window that decided it lies."""
    if not registry.spec(strategy).block_batches or cfg.block_factor == 1:
        return [([w], w + 1) for w in sorted(counts)]
    return plan_with_reach(counts, Granularity(cfg.micro_batch_seconds, cfg.l_mark, cfg.h_mark, cfg.block_factor))
