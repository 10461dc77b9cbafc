"""The relation R, its three disk layouts, and the stream trace (papers/004 §6.4.1 "Traces").

The trace uses the ETL generator's own b-model and PQRS code, so the simulated stream and the
Spark benchmark's landing files follow one model. R's join keys are drawn over the same domain
with neutral PQRS quadrants (uniform): R is then dense everywhere and the stream's PQRS skew
shows up as skew over R's segments (had R the stream's own skew, mapping stream keys to R's
rows would flatten it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from etl.generator import b_model_levels, b_model_volumes, pqrs_points
from etl.simulator.model import SimParams


@dataclass(frozen=True)
class Layout:
    """One way of cutting R into segments: which segment a trace tuple's key is in, and where
    each segment lies on disk (segments stored one after another, each contiguous)."""

    name: str
    segment_bytes: np.ndarray  # per segment
    segment_of_row: np.ndarray  # per R row (sorted by key), its segment

    @cached_property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.segment_bytes)[:-1]]).astype(np.int64)

    @property
    def n_segments(self) -> int:
        return len(self.segment_bytes)


@dataclass
class Relation:
    keys: np.ndarray  # sorted join keys of R's rows
    params: SimParams

    @classmethod
    def generate(cls, params: SimParams) -> "Relation":
        rng = np.random.default_rng(params.seed + 1_000_003)
        n = params.relation_tuples
        keys = np.empty(n, dtype=np.int64)
        chunk = 1 << 18
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            _, keys[lo:hi] = pqrs_points(hi - lo, params.key_domain, 0.25, 0.25, 0.25, 0.25, rng)
        keys.sort()
        return cls(keys, params)

    def row_of(self, keys: np.ndarray) -> np.ndarray:
        """Each stream key joins the R row with the nearest key at or above it (every update
        meets an existing row: the stream updates warehouse entities)."""
        return np.minimum(np.searchsorted(self.keys, keys, side="left"), len(self.keys) - 1)

    def range_layout(self) -> Layout:
        """Key ranges of 1.5*theta (all within theta..2*theta; the last one merged if short)."""
        p = self.params
        per = int(1.5 * p.theta) // p.r_bytes
        n = len(self.keys)
        seg = np.arange(n) // per
        if n % per and n % per < p.theta // p.r_bytes and seg[-1] > 0:
            seg[seg == seg[-1]] = seg[-1] - 1
        return Layout("range", np.bincount(seg) * p.r_bytes, seg)

    def hash_layout(self) -> Layout:
        p = self.params
        seg = self.keys % p.n_bucket
        return Layout("hash", np.bincount(seg, minlength=p.n_bucket) * p.r_bytes, seg)

    def meshjoin_layout(self) -> Layout:
        """R in key order cut into k disk segments of d bytes, read cyclically."""
        p = self.params
        per = p.d // p.r_bytes
        seg = np.arange(len(self.keys)) // per
        return Layout("meshjoin", np.bincount(seg) * p.r_bytes, seg)


@dataclass
class Trace:
    ts: np.ndarray  # arrival time, seconds from the start, ascending
    keys: np.ndarray  # join key

    @classmethod
    def generate(cls, params: SimParams) -> "Trace":
        rng = np.random.default_rng(params.seed)
        total = int(round(params.rate * params.duration_s))
        volumes = b_model_volumes(total, b_model_levels(params.duration_s, params.mini_interval_s), params.b, rng)
        mini = params.duration_s / len(volumes)
        ts = np.empty(total)
        keys = np.empty(total, dtype=np.int64)
        pos = 0
        p, q, r, s = params.pqrs
        for i, v in enumerate(volumes):
            if v:
                t, k = pqrs_points(int(v), params.key_domain, p, q, r, s, rng)
                ts[pos : pos + v] = (i + t) * mini
                keys[pos : pos + v] = k
                pos += v
        order = np.argsort(ts, kind="stable")
        return cls(ts[order], keys[order])

    def __len__(self) -> int:
        return len(self.ts)
