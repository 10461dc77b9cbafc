"""A per-batch cost model fitted from a run's ``join_metrics``, and the rate it can sustain.

Why: a micro-batch's duration has a large fixed part (Delta log reads, the MERGEs, the ledger
commits: about 17 s of a 30-s trigger at the benchmark's medium size) and a part that grows with
the batch's updates and probes. "Updates per second of batch time" measured at one offered rate
therefore tracks the offered rate, not the capacity: a quiet stretch of a bursty stream lowers it
(docs/benchmark.md, "Range's capacity over a long run"). Fitting

    duration_s = fixed_s + drift_s_per_batch * batch_index + per_update_s * updates + per_probe_s * probes

separates the parts and gives the rate at which a batch of one trigger interval still fits in
the interval. Pure Python (plus numpy), so it is tested without Spark.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

TERMS = ("fixed_s", "drift_s_per_batch", "per_update_s", "per_probe_s")
MIN_BATCHES = len(TERMS) + 1


def steps(batches: list[dict]) -> list[dict]:
    """The run's micro-batches without its final flush (index < 0), a different kind of step."""
    return [b for b in batches if b["index"] >= 0]


@dataclass(frozen=True)
class BatchCost:
    fixed_s: float
    drift_s_per_batch: float
    per_update_s: float
    per_probe_s: float
    batches: int
    r_squared: float

    def duration(self, updates: float, probes: float, batch_index: float = 0) -> float:
        return self.fixed_s + self.drift_s_per_batch * batch_index + self.per_update_s * updates + self.per_probe_s * probes

    def sustainable_rate(self, trigger_s: float, probes_per_update: float, batch_index: float = 0) -> float:
        """Highest offered rate (updates/s) at which a batch of ``trigger_s`` of arrivals, with
        ``probes_per_update`` probes per update (as measured), takes at most ``trigger_s``.

        An extrapolation from the rates the model was fitted on: the probes per update change
        with the rate (a fuller wait buffer probes sooner, each probe serving more tuples)."""
        if trigger_s <= 0:
            raise ValueError(f"trigger_s must be positive, got {trigger_s}")
        if probes_per_update < 0:
            raise ValueError(f"probes_per_update must be >= 0, got {probes_per_update}")
        spare = trigger_s - self.fixed_s - self.drift_s_per_batch * batch_index
        per_update = self.per_update_s + self.per_probe_s * probes_per_update
        if spare <= 0:
            return 0.0
        if per_update <= 0:
            return float("inf")
        return spare / (per_update * trigger_s)

    def as_dict(self) -> dict:
        return asdict(self)


def fit_batch_cost(batches: list[dict]) -> BatchCost:
    """Non-negative least squares of each batch's ``duration_s`` on its index, ``updates`` and
    ``probes`` (dicts as in the benchmark's ``per_batch``), the flush left out (``steps``). Non-negative, because a cost that falls with
    more work is noise, not a cost; with four terms every subset is tried (16 fits)."""
    import numpy as np

    rows = steps(batches)
    if len(rows) < MIN_BATCHES:
        raise ValueError(f"need at least {MIN_BATCHES} batches (flush excluded) to fit {len(TERMS)} terms, got {len(rows)}")
    x = np.array([[1.0, b["index"], b["updates"], b["probes"]] for b in rows])
    y = np.array([float(b["duration_s"]) for b in rows])
    best = None
    for k in range(1, len(TERMS) + 1):
        for cols in itertools.combinations(range(len(TERMS)), k):
            coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
            if (coef < 0).any():
                continue
            full = np.zeros(len(TERMS))
            full[list(cols)] = coef
            sse = float(((x @ full - y) ** 2).sum())
            if best is None or sse < best[0] - 1e-12:
                best = (sse, full)
    if best is None:  # only when every duration is negative
        raise ValueError("no non-negative fit: batch durations must be >= 0")
    sse, coef = best
    sst = float(((y - y.mean()) ** 2).sum())
    return BatchCost(
        *(float(c) for c in coef), batches=len(rows), r_squared=1.0 - sse / sst if sst > 0 else 1.0
    )
