import pytest

from etl.core.config import ConfigError, EtlConfig
from etl.core.policy import PartitionPolicy
from etl.core.sizing import MB, THESIS, JoinSizes, configured_sizes, join_sizes


def test_table_6_2_gives_the_thesis_s_wait_buffer_and_about_its_n_invoke():
    """40 MB in all: a 4 MB wait buffer of 64-byte tuples, a 2 MB read buffer, 34 MB of segments
    of 1 to 2 MB of 128-byte rows; the thesis sets n_invoke to 3,000."""
    sizes = join_sizes(THESIS["memory_budget"], THESIS["theta"], THESIS["s_bytes"], THESIS["r_bytes"])
    assert sizes == JoinSizes(wait_buffer_tuples=65_536, resident_segments=22, n_invoke=2_978)
    assert abs(sizes.n_invoke - THESIS["n_invoke"]) / THESIS["n_invoke"] < 0.01


def test_the_full_size_run_s_memory_gets_a_buffer_its_segments_can_fill():
    """The issue's run: 151 MB of join memory over 20 M keys in 1,024 segments (key_map 1.51 GB,
    ~75 bytes a row stored), with the thesis's 64-byte tuples: about the 102 segments the issue
    counted fit, the buffer is more than ten times its 20,000 tuples (where n_invoke 2,500 never
    fired), and the segments that fit can fill it each to its threshold."""
    rows_per_segment = 20e6 / 1024
    sizes = join_sizes(151 * MB, round(rows_per_segment / 1.5), 64, 1.51e9 / 20e6)
    assert 100 <= sizes.resident_segments <= 110
    assert sizes.wait_buffer_tuples >= 10 * 20_000
    assert sizes.n_invoke * sizes.resident_segments <= sizes.wait_buffer_tuples < (sizes.n_invoke + 1) * sizes.resident_segments


def test_every_size_scales_with_the_memory_and_a_setting_given_wins():
    small, large = (join_sizes(m, 8192, 64, 128) for m in (17 * MB, 68 * MB))
    assert large.wait_buffer_tuples == 4 * small.wait_buffer_tuples
    assert large.resident_segments // 4 == small.resident_segments
    assert join_sizes(17 * MB, 8192, 64, 128, wait_buffer_tuples=500) == JoinSizes(500, 11, 45)
    assert join_sizes(17 * MB, 8192, 64, 128, n_invoke=7).n_invoke == 7
    # A memory that holds no whole segment: every segment waits, one buffer's worth per probe.
    tiny = join_sizes(100_000, 8192, 64, 128)
    assert tiny.resident_segments == 1 and tiny.n_invoke == tiny.wait_buffer_tuples
    with pytest.raises(ValueError, match="s_bytes"):
        join_sizes(MB, 8192, 0, 128)


def test_the_configuration_derives_unless_told_and_refuses_negative_sizes():
    cfg = EtlConfig(memory_budget=THESIS["memory_budget"], theta=THESIS["theta"], s_bytes=THESIS["s_bytes"])
    assert configured_sizes(cfg, THESIS["r_bytes"]) == JoinSizes(65_536, 22, 2_978)
    policy = PartitionPolicy.from_config(cfg, r_bytes=THESIS["r_bytes"])
    assert (policy.n_invoke, policy.capacity) == (2_978, 65_536)
    policy.size_for_run(configured_sizes(cfg, 2 * THESIS["r_bytes"]))  # a run's key_map rows twice as wide
    assert (policy.n_invoke, policy.capacity) == (65_536 // 11, 65_536)
    told = PartitionPolicy.from_config(cfg.replace(n_invoke=3000, wait_buffer_tuples=20_000))
    assert (told.n_invoke, told.capacity) == (3000, 20_000)
    for name in ("n_invoke", "wait_buffer_tuples"):
        with pytest.raises(ConfigError, match=name):
            EtlConfig(**{name: -1})
    with pytest.raises(ConfigError, match="s_bytes"):
        EtlConfig(s_bytes=0)
