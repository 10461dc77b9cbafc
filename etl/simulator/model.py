"""The thesis's experimental set-up (papers/004 §6.4.1), as data: Table 6.2, the disk and the CPU.

Everything the simulator charges time for is here, with where the number comes from. Sizes are
bytes, times seconds. Parameter names are the thesis's (and the ETL's): ``n_invoke``, ``r_wb``,
``alpha``, ``tau``, ``rho``, ``theta``, ``d``, ``memory_budget`` ...
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from etl.generator import SKEWS

MB = 1 << 20
KB = 1 << 10


@dataclass(frozen=True)
class DiskModel:
    """A disk read costs one access (seek + rotational latency), one more per basic-window
    boundary crossed, and the bytes at the sustained transfer rate (§6.4.1, after [52]).

    Defaults: the IBM Ultrastar LZX family the thesis names (9LZX): 10,000 rpm, average seek
    4.9 ms, average rotational latency 2.99 ms, sustained transfer 21-36 MB/s (IBM's data
    sheet, as quoted for the 36LZX in Bryant and O'Hallaron, CS:APP Fig. 6.13); we take the
    lower, inner-zone rate. Pages and blocks are 4 KB, basic windows 2 MB (Table 6.2 text).
    """

    seek_s: float = 4.9e-3
    rotation_s: float = 2.99e-3
    transfer_bytes_per_s: float = 21 * MB
    page_bytes: int = 4 * KB
    basic_window_bytes: int = 2 * MB

    @property
    def access_s(self) -> float:
        return self.seek_s + self.rotation_s

    def windows_crossed(self, offset: int, nbytes: int) -> int:
        if nbytes <= 0:
            return 0
        w = self.basic_window_bytes
        return (offset + nbytes - 1) // w - offset // w

    def read_seconds(self, offset: int, nbytes: int) -> float:
        """Read ``nbytes`` stored contiguously from ``offset`` (rounded up to whole pages)."""
        pages = -(-nbytes // self.page_bytes)
        return self.access_s * (1 + self.windows_crossed(offset, nbytes)) + pages * self.page_bytes / self.transfer_bytes_per_s


@dataclass(frozen=True)
class CpuModel:
    """What joining costs in memory. The thesis does not give CPU costs; these are ordinary
    costs of its 3.4 GHz Java prototype's operations, one number each, not fitted per figure.

    - ``chain_step_s``: one step along a hash bucket's chain (a pointer chase, mostly a cache
      miss): MESHJOIN probes the memory queue's hash table (``n_bucket`` buckets) with every
      tuple of the R-buffer, and walks the bucket.
    - ``scan_tuple_s``: bringing one 128-byte R tuple of an in-memory segment into cache
      (two cache lines at a few GB/s) during a nested-loop scan.
    - ``compare_s``: comparing a cached stream tuple's key with the scanned R tuple's.
    - ``buffer_tuple_s``: appending one stream tuple to a buffer or hash table.
    """

    chain_step_s: float = 40e-9
    scan_tuple_s: float = 20e-9
    compare_s: float = 2e-9
    buffer_tuple_s: float = 100e-9


@dataclass(frozen=True)
class LiveCosts:
    """What the always-on loader (``etl stream``) pays on Spark and Delta, where the thesis's model
    pays a disk: a step's cost is its write-ahead commit, fixed plus a share per update it
    releases and per segment it probes. Defaults: fitted once (``benchmarks.live_costs``) on the
    recorded full-size run of 2026-12-04 (20 M keys, 1,000/s, 10-s windows, MERGEs every 60 s;
    docs/simulator.md "The loader on Spark"), the probe's share on the wait bound's run of
    2026-12-05 with its ledger (docs/results/wait_bound_probes), not per prediction.

    - ``grace_s``, ``ingest_s``: a window's close to its step's start: ``stream_grace_seconds``,
      then the last piece's ingest (paid for every window, in the loop);
    - ``step_fixed_s``, ``per_update_s``: a step's decisions and write-ahead commit;
    - ``per_probe_s``: what a step pays per segment it probes within a run (the read of the
      segment, joined with its pending tuples by the step's commit; not the flush's, which reads
      only the waiting keys and is left out of the fit as a run's end). The first run's steps probed almost
      only at its flush, so this share comes from a run whose wait bound probes in every step,
      fitted beside its own fixed and per-update shares (4.47 s, 0.202 ms), not these;
    - ``apply_interval_s``, ``apply_overlap_s``: the coalesced MERGE pair runs beside the steps every
      ``apply_interval_seconds``; on 2 cores it adds this much to the step it overlaps;
    - ``run_end_hold_s``: after a run's flush, the last MERGE pair and the split hold the loop.
    """

    grace_s: float = 1.0
    ingest_s: float = 1.94
    step_fixed_s: float = 4.13
    per_update_s: float = 0.145e-3
    per_probe_s: float = 0.0378
    apply_interval_s: float = 60.0
    apply_overlap_s: float = 12.5
    run_end_hold_s: float = 60.0

    def __post_init__(self) -> None:
        def seconds(v) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0

        bad = [f.name for f in dataclasses.fields(self) if not seconds(getattr(self, f.name))]
        if "apply_interval_s" not in bad and self.apply_interval_s <= 0:
            bad.append("apply_interval_s")
        if bad:
            raise ValueError(f"invalid live costs (finite seconds >= 0; an apply interval > 0): {', '.join(bad)}")

    def step_seconds(self, released: int, probed: int = 0) -> float:
        return self.step_fixed_s + self.per_update_s * released + self.per_probe_s * probed

    @classmethod
    def from_file(cls, path: str | Path) -> "LiveCosts":
        """Costs fitted on a user's own run: ``benchmarks.live_costs``' JSON (its ``costs``), or
        those fields alone; the ones it leaves out keep their defaults."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"--live-costs {path}: {exc}") from None
        data = data.get("costs", data) if isinstance(data, dict) else data
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) - names:
            raise ValueError(f"--live-costs {path}: expected numbers for some of {', '.join(sorted(names))}")
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"--live-costs {path}: {exc}") from None


@dataclass(frozen=True)
class SimParams:
    """Table 6.2 defaults (hybrid joins), plus the text's settings around it."""

    rate: float = 1000.0  # lambda: average arrivals per second
    rho: float = 0.25
    alpha: float = 0.3
    r_wb: float = 0.4
    n_invoke: int = 3000
    b: float = 0.6
    memory_budget: int = 40 * MB  # M: all memory of the join operator
    d: int = 1 * MB  # MESHJOIN R-buffer (disk segment) size
    n_bucket: int = 89  # hash buckets: MESHJOIN's queue table; the hash-partitioned join's segments
    s_bytes: int = 64  # stream tuple
    r_bytes: int = 128  # relation tuple
    relation_bytes: int = 200 * MB  # |R|
    theta: int = 1 * MB  # range segments hold theta..2*theta bytes
    wait_buffer_bytes: int = 4 * MB
    h_mark_blocks: int = 100
    l_mark_blocks: int = 2
    key_domain: int = 1_000_000  # join attribute in [0, 10^6]
    tau: int = 1000  # epoch length, in stream tuples (the ETL's default; the thesis leaves it open)
    duration_s: float = 0.8 * 3600  # simulated time per experiment
    warmup_s: float = 6 * 60  # metrics start after this start-up interval
    tick_s: float = 0.1  # micro-batch trigger interval of the partitioned join and native
    block_factor: int = 4  # block granularity: batches span this many ticks
    max_wait_s: float = 0.0  # the ETL's wait bound (etl.core.policy); 0 = none, as in the thesis
    # PQRS p, q, r, s: the thesis does not publish its own. The "thesis" skew of etl.generator.SKEWS
    # (85% of updates on the hottest sixth of R by key range; docs/simulator.md shows weaker ones).
    pqrs: tuple[float, float, float, float] = SKEWS["thesis"]
    mini_interval_s: float = 1.0
    seed: int = 7
    disk: DiskModel = DiskModel()
    cpu: CpuModel = CpuModel()
    # The loader on Spark instead of the thesis's operator (partitioned joins only): windows of
    # ``tick_s``, every update counted from the stream's start, each run of ``run_s`` (0: one run,
    # the stream's) ending with a flush of the wait buffer, as ``etl stream`` ends a run.
    live: LiveCosts | None = None
    run_s: float = 0.0

    def __post_init__(self) -> None:
        checks = {
            "rate": self.rate > 0,
            "memory_budget": self.memory_budget > self.wait_buffer_bytes + 2 * self.theta,
            "relation_bytes": self.relation_bytes >= self.r_bytes,
            "d": 0 < self.d < self.memory_budget,
            "n_invoke": self.n_invoke > 0,
            "b": 0.5 <= self.b < 1,
            "duration_s": self.duration_s > 0,
            "warmup_s": 0 <= self.warmup_s < self.duration_s,
            "tick_s": self.tick_s > 0,
            "n_bucket": self.n_bucket > 0,
            "max_wait_s": self.max_wait_s >= 0,
            "run_s": self.run_s >= 0 and (self.live is not None or not self.run_s)
            and (not self.run_s or abs(self.run_s / self.tick_s - round(self.run_s / self.tick_s)) < 1e-9),
        }
        bad = [k for k, ok in checks.items() if not ok]
        if "memory_budget" in bad:  # what it must hold, so that a user sees which part to change
            bad[bad.index("memory_budget")] = (
                f"memory_budget ({self.memory_budget / MB:.2f} MB must exceed the wait buffer's "
                f"{self.wait_buffer_bytes / MB:.2f} MB plus two read buffers of theta, {2 * self.theta / MB:.2f} MB)")
        if bad:
            raise ValueError(f"invalid simulator parameters: {', '.join(bad)}")

    def replace(self, **changes) -> "SimParams":
        return dataclasses.replace(self, **changes)

    @property
    def block_tuples(self) -> int:
        return self.disk.page_bytes // self.s_bytes

    @property
    def relation_tuples(self) -> int:
        return self.relation_bytes // self.r_bytes

    @property
    def wait_buffer_tuples(self) -> int:
        return self.wait_buffer_bytes // self.s_bytes

    @property
    def join_memory(self) -> int:
        """Partitioned join: what is left for resident segments after the wait buffer and the
        R-buffer (one segment of at most 2*theta being read)."""
        return self.memory_budget - self.wait_buffer_bytes - 2 * self.theta

    @property
    def meshjoin_k(self) -> int:
        return -(-self.relation_bytes // self.d)

    @property
    def meshjoin_queue_tuples(self) -> int:
        """MESHJOIN's queue gets the memory the R-buffer leaves: (M - d) / s."""
        return (self.memory_budget - self.d) // self.s_bytes
