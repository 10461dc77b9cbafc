"""The disk model and the parameter checks (no simulation)."""

import pytest

from etl.simulator.model import MB, DiskModel, SimParams


def test_an_aligned_read_within_one_basic_window_costs_one_access_plus_transfer():
    disk = DiskModel()
    assert disk.read_seconds(0, 1 * MB) == pytest.approx(disk.access_s + MB / disk.transfer_bytes_per_s)
    assert disk.windows_crossed(0, 2 * MB) == 0


def test_each_basic_window_boundary_crossed_costs_one_more_access():
    disk = DiskModel()
    one = disk.read_seconds(0, 1 * MB)
    straddling = disk.read_seconds(int(1.5 * MB), 1 * MB)  # crosses the 2 MB boundary
    assert straddling - one == pytest.approx(disk.access_s)
    assert disk.windows_crossed(0, 200 * MB) == 99


def test_reads_are_whole_pages():
    disk = DiskModel()
    assert disk.read_seconds(0, 1) == disk.read_seconds(0, 4096)
    assert disk.read_seconds(0, 4097) > disk.read_seconds(0, 4096)


def test_table_6_2_defaults_and_derived_sizes():
    p = SimParams()
    assert (p.rate, p.rho, p.alpha, p.r_wb, p.n_invoke, p.b) == (1000, 0.25, 0.3, 0.4, 3000, 0.6)
    assert (p.memory_budget, p.d, p.n_bucket, p.s_bytes, p.r_bytes, p.relation_bytes, p.theta) == (
        40 * MB, MB, 89, 64, 128, 200 * MB, MB)
    assert p.wait_buffer_tuples == 65536 and p.block_tuples == 64
    assert p.meshjoin_k == 200
    assert p.join_memory == 34 * MB


@pytest.mark.parametrize("bad", [dict(rate=0), dict(b=0.4), dict(memory_budget=5 * MB), dict(warmup_s=5000.0, duration_s=4000.0)])
def test_bad_parameters_are_named(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SimParams(**bad)
