"""MESHJOIN's schedule, rule by rule, without Spark (the Spark twin evaluates the same rules)."""

import itertools

import pytest

from etl.core.mesh_policy import MeshSchedule, disk_segment_count, disk_segment_of, group_boundaries


def test_each_queue_segment_meets_every_disk_segment_exactly_once_in_its_life():
    s = MeshSchedule(4)
    for queued_at in range(0, 9):
        met = [p for slot in range(queued_at, s.expires_by(queued_at) + 1) for p in range(4) if s.meets(queued_at, slot - 1, slot, p)]
        assert sorted(met) == [0, 1, 2, 3]


@pytest.mark.parametrize("cuts", [(3,), (0, 5, 6), (1, 2, 3, 4, 5, 6, 7, 8, 9), (9,), (2, 12)])
def test_stepping_several_slots_at_once_meets_what_single_steps_would(cuts):
    """A submit after quiet slots steps them all in one read; the result must not depend on it."""
    s = MeshSchedule(3)
    bounds = [-1, *cuts]
    for queued_at, p in itertools.product(range(0, 8), range(3)):
        alone = sum(s.meets(queued_at, t - 1, t, p) for t in range(queued_at, s.expires_by(queued_at) + 1))
        batched = sum(s.meets(queued_at, lo, hi, p) for lo, hi in zip(bounds, bounds[1:]) if hi >= queued_at)
        if cuts[-1] >= s.expires_by(queued_at):
            assert batched == alone == 1


def test_a_segment_not_yet_queued_meets_nothing():
    s = MeshSchedule(3)
    assert not any(s.meets(5, 0, 4, p) for p in range(3))


def test_positions_of_a_long_gap_are_the_whole_relation_once():
    s = MeshSchedule(4)
    assert s.positions(-1, 0) == [0]
    assert s.positions(2, 5) == [0, 1, 3]  # slots 3, 4, 5
    assert s.positions(0, 40) == [0, 1, 2, 3]


def test_expiry_drain_and_cycle():
    s = MeshSchedule(3)
    assert s.expires_by(4) == 6
    assert s.drain_until([4, 5, 7]) == 9
    assert [s.cycle(t) for t in range(7)] == [0, 0, 1, 1, 1, 2, 2]


def test_disk_segment_count_respects_k_d_and_partitions():
    assert disk_segment_count(k=8, d=1 << 20, relation_bytes=100 << 20, partitions=64) == 8  # k caps
    assert disk_segment_count(k=8, d=1 << 20, relation_bytes=3 << 20, partitions=64) == 3  # segments >= d
    assert disk_segment_count(k=8, d=1 << 20, relation_bytes=0, partitions=64) == 1  # empty relation
    assert disk_segment_count(k=8, d=1, relation_bytes=10 << 20, partitions=4) == 4  # a partition is indivisible


def test_groups_are_contiguous_balanced_and_cover_every_id():
    rows = {0: 100, 1: 100, 2: 100, 3: 100, 4: 400, 5: 0, 6: 100, 7: 100}
    bounds = group_boundaries(range(8), rows, 3)
    assert len(bounds) == 2 and bounds == sorted(bounds)
    groups = [disk_segment_of(i, bounds) for i in range(8)]
    assert groups == sorted(groups) and set(groups) == {0, 1, 2}
    totals = [sum(rows[i] for i in range(8) if groups[i] == g) for g in range(3)]
    assert max(totals) <= 500
    assert disk_segment_of(-5, bounds) == 0 and disk_segment_of(99, bounds) == 2


def test_groups_of_an_empty_relation_split_ids_evenly():
    bounds = group_boundaries(range(8), {}, 4)
    assert [disk_segment_of(i, bounds) for i in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_more_groups_than_ids_gives_one_id_each():
    assert group_boundaries([3, 5, 9], {3: 1, 5: 1, 9: 100}, 8) == [5, 9]
