import pytest

from etl.core.config import ConfigError, EtlConfig
from etl.core.policy import PartitionPolicy
from etl.core.sizing import (
    FIXED_N_INVOKE,
    FIXED_WAIT_BUFFER_TUPLES,
    MAX_DERIVED_SEGMENTS,
    MB,
    THESIS,
    JoinSizes,
    configured_sizes,
    join_sizes,
    configured_n_part,
    run_sizes,
    segment_bytes,
    segments_for,
)

THESIS_SEGMENT = segment_bytes(THESIS["theta"], THESIS["r_bytes"])  # 1.5 MB: segments of 1 to 2 MB


def test_table_6_2_gives_the_thesis_s_wait_buffer_and_about_its_n_invoke():
    """40 MB in all: a 4 MB wait buffer of 64-byte tuples, a 2 MB read buffer, 34 MB of segments
    of 1 to 2 MB of 128-byte rows; the thesis sets n_invoke to 3,000."""
    assert THESIS_SEGMENT == 1.5 * MB
    sizes = join_sizes(THESIS["memory_budget"], THESIS["s_bytes"], THESIS_SEGMENT)
    assert sizes == JoinSizes(wait_buffer_tuples=65_536, resident_segments=22, n_invoke=2_978)
    assert abs(sizes.n_invoke - THESIS["n_invoke"]) / THESIS["n_invoke"] < 0.01


def test_the_full_size_run_s_memory_gets_a_buffer_its_segments_can_fill():
    """The issue's run: 151 MB of join memory over 20 M keys in 1,024 segments (key_map 1.51 GB),
    with the thesis's 64-byte tuples: about the 102 segments the issue counted fit, the buffer is
    more than ten times its 20,000 tuples (where n_invoke 2,500 never fired), and the segments that
    fit fill it each to its threshold."""
    # The segments as they are, a row counting r_bytes (1.51 GB over 20 M rows is 75.5 B).
    segment = segment_bytes(8192, EtlConfig.r_bytes, rows=20_000_000, segments=1024)
    sizes = join_sizes(151 * MB, 64, segment)
    assert 100 <= sizes.resident_segments <= 110
    # docs/partitioned-join.md's full-size column: the default entity's update size.
    assert join_sizes(151 * MB, EtlConfig.s_bytes, segment) == JoinSizes(146_674, 106, 1_383)
    assert sizes.wait_buffer_tuples >= 10 * 20_000
    assert sizes.n_invoke * sizes.resident_segments <= sizes.wait_buffer_tuples < (sizes.n_invoke + 1) * sizes.resident_segments
    # Hash segments (n_part of them) are as large as key_map makes them, not theta's.
    hashed = join_sizes(151 * MB, 64, segment_bytes(8192, 75.5, rows=20_000_000, segments=64))
    assert hashed.resident_segments == 6 and hashed.n_invoke == hashed.wait_buffer_tuples // 6


def test_every_size_scales_with_the_memory_and_a_setting_given_wins():
    small, large = (join_sizes(m, 64, 1.5 * MB) for m in (17 * MB, 68 * MB))
    assert large.wait_buffer_tuples == 4 * small.wait_buffer_tuples
    assert large.resident_segments // 4 == small.resident_segments
    assert join_sizes(17 * MB, 64, 1.5 * MB, wait_buffer_tuples=500) == JoinSizes(500, 11, 45)
    assert join_sizes(17 * MB, 64, 1.5 * MB, n_invoke=7).n_invoke == 7
    # A memory that holds no whole segment: every segment waits, one buffer's worth per probe.
    tiny = join_sizes(100_000, 64, 1.5 * MB)
    assert tiny.resident_segments == 1 and tiny.n_invoke == tiny.wait_buffer_tuples
    assert segment_bytes(8192, 100.0) == 1.5 * 8192 * 100  # no segments yet: a range segment's average
    with pytest.raises(ValueError, match="s_bytes"):
        join_sizes(MB, 0, 1.5 * MB)


def test_a_run_keeps_the_sizes_its_start_derived_and_an_older_run_the_fixed_ones():
    cfg = EtlConfig(memory_budget=THESIS["memory_budget"], s_bytes=THESIS["s_bytes"])
    assert run_sizes({"sizes": {}, "row_bytes": 128.0, "n_invoke": 2978, "wait_buffer_tuples": 65536},
                     cfg.replace(memory_budget=MB)) == (2978, 65536)  # derived otherwise now: the run's own
    assert run_sizes({"sizes": {}, "row_bytes": 128.0}, cfg) == (FIXED_N_INVOKE, FIXED_WAIT_BUFFER_TUPLES)
    assert run_sizes({"sizes": {}, "row_bytes": 128.0}, cfg.replace(n_invoke=40)) == (40, FIXED_WAIT_BUFFER_TUPLES)


def test_the_configuration_derives_unless_told_and_refuses_negative_sizes():
    cfg = EtlConfig(memory_budget=THESIS["memory_budget"], theta=THESIS["theta"], s_bytes=THESIS["s_bytes"])
    assert configured_sizes(cfg, THESIS_SEGMENT) == JoinSizes(65_536, 22, 2_978)
    policy = PartitionPolicy.from_config(cfg)  # Table 6.2's 128-byte rows until a run measures its own
    assert (policy.n_invoke, policy.capacity) == (2_978, 65_536)
    policy.size_for_run(65_536 // 11, 65_536)
    assert (policy.n_invoke, policy.capacity) == (5_957, 65_536)
    with pytest.raises(ValueError):
        policy.size_for_run(0, 65_536)
    told = PartitionPolicy.from_config(cfg.replace(n_invoke=3000, wait_buffer_tuples=20_000))
    assert (told.n_invoke, told.capacity) == (3000, 20_000)
    for name in ("n_invoke", "wait_buffer_tuples"):
        with pytest.raises(ConfigError, match=name):
            EtlConfig(**{name: -1})
    with pytest.raises(ConfigError, match="s_bytes"):
        EtlConfig(s_bytes=0)


def test_table_6_2_s_relation_is_laid_out_in_segments_of_one_to_two_mb():
    """With ``n_part`` 0: 200 MB of 128-byte rows with theta 1 MB (8,192 rows) give 134 segments
    of 1.5 MB, the thesis's "partitions of length between 1-2 MB" (its relation holds several rows
    a key: its domain is 10^6, so the rows stand for the key domain here); a count given wins, and
    a bad one is refused."""
    rows = 200 * MB // THESIS["r_bytes"]
    assert segments_for(rows, THESIS["theta"]) == 134
    assert THESIS["theta"] <= rows / 134 <= 2 * THESIS["theta"]
    cfg = EtlConfig(key_domain=rows, theta=THESIS["theta"], n_part=0)
    assert configured_n_part(cfg) == 134 and configured_n_part(cfg.replace(n_part=89)) == 89
    assert segments_for(10, 8192) == 1
    assert segments_for(10**9, 8192) == MAX_DERIVED_SEGMENTS == 1024  # a Delta partition each: bounded
    derived = EtlConfig(n_part=0)  # the default domain of 1,000,000 keys, theta 8,192
    assert configured_n_part(derived) == 82
    assert configured_n_part(derived.replace(sources=("crm", "web"))) == 163  # a row per key and source
    assert configured_n_part(EtlConfig()) == EtlConfig.n_part == 64  # the default stays a fixed count
    for name in ("n_part", "theta", "key_domain"):
        with pytest.raises(ConfigError, match=name):
            EtlConfig(**{name: -1})
