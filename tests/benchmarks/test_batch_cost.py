import math

import pytest

from benchmarks.batch_cost import BatchCost, fit_batch_cost


def batches(fixed, drift, per_update, per_probe, n=30):
    out = []
    for i in range(n):
        updates = 300 + (i * 137) % 1700
        probes = (i * 7) % 11 * 4
        out.append({"index": i, "updates": updates, "probes": probes,
                    "duration_s": fixed + drift * i + per_update * updates + per_probe * probes})
    # The run's flush: a different step, far off the model; the fit must leave it out.
    out.append({"index": -1, "updates": 700, "probes": 160, "duration_s": 500.0})
    return out


def test_recovers_the_terms_of_a_noise_free_run():
    got = fit_batch_cost(batches(14.6, 0.06, 0.0036, 0.16))
    want = BatchCost(14.6, 0.06, 0.0036, 0.16, batches=30, r_squared=1.0)
    for name in ("fixed_s", "drift_s_per_batch", "per_update_s", "per_probe_s", "r_squared"):
        assert getattr(got, name) == pytest.approx(getattr(want, name), rel=1e-6, abs=1e-9), name
    assert got.batches == 30


def test_a_term_that_would_fit_negative_is_zero_not_negative():
    # Durations fall with the index: unconstrained least squares gives a negative drift.
    got = fit_batch_cost(batches(20.0, -0.2, 0.004, 0.1))
    assert got.drift_s_per_batch == 0.0
    assert min(got.fixed_s, got.per_update_s, got.per_probe_s) >= 0


def test_sustainable_rate_is_where_a_trigger_of_arrivals_fills_the_trigger():
    cost = BatchCost(15.0, 0.0, 0.004, 0.2, batches=40, r_squared=0.8)
    rate = cost.sustainable_rate(trigger_s=30, probes_per_update=0.02)
    # 30 s of arrivals at that rate, with 0.02 probes each, take exactly 30 s.
    assert cost.duration(updates=rate * 30, probes=rate * 30 * 0.02) == pytest.approx(30.0)
    assert rate == pytest.approx(15.0 / ((0.004 + 0.2 * 0.02) * 30))


def test_sustainable_rate_edges():
    assert BatchCost(31.0, 0, 0.01, 0, 10, 1).sustainable_rate(30, 0) == 0.0  # fixed cost exceeds the trigger
    assert math.isinf(BatchCost(5.0, 0, 0, 0, 10, 1).sustainable_rate(30, 0))
    assert BatchCost(10.0, 0.1, 0.01, 0, 10, 1).sustainable_rate(30, 0, batch_index=200) == 0.0  # drifted past it
    with pytest.raises(ValueError, match="trigger_s"):
        BatchCost(1, 0, 0, 0, 10, 1).sustainable_rate(0, 0)
    with pytest.raises(ValueError, match="probes_per_update"):
        BatchCost(1, 0, 0, 0, 10, 1).sustainable_rate(30, -1)


def test_too_few_batches_is_a_clear_error():
    with pytest.raises(ValueError, match="at least 5 batches"):
        fit_batch_cost(batches(1, 0, 0, 0, n=4))
