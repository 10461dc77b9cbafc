from etl.core.layout import SlotArray


def test_slot_array_maps_ranges_in_order():
    layout = SlotArray.even(key_domain=1000, n_part=4)
    assert layout.n_slots == 4 and layout.slot_length == 250
    assert [layout.segment_of(str(k)) for k in (0, 249, 250, 999, 5000)] == [0, 0, 1, 3, 3]


def _rows_of(layout, slot_rows):
    out = {}
    for slot, seg in enumerate(layout.slots):
        out[seg] = out.get(seg, 0) + slot_rows.get(slot, 0)
    return out


def test_refining_keeps_every_key_in_its_segment():
    layout = SlotArray.even(key_domain=1_000_000, n_part=64)  # slot length 15625 = 5**6
    finer = layout.refined()
    assert finer.n_slots == 64 * 5 and finer.slot_length == 3125
    for key in (0, 3124, 3125, 15624, 15625, 999_999, 5_000_000):
        assert finer.segment_of(str(key)) == layout.segment_of(str(key))
    one = SlotArray(10, (0,), 1)
    assert one.refined() is None


def test_a_segment_above_two_theta_is_split_and_one_below_theta_merged():
    from etl.core.layout import plan_rebalance

    layout = SlotArray(800, (0, 0, 0, 0, 1, 2, 3, 3), 100)
    slot_rows = {0: 30, 1: 30, 2: 30, 3: 30, 4: 5, 5: 50, 6: 20, 7: 20}
    plan = plan_rebalance(layout, slot_rows, theta=40)
    rows = _rows_of(plan.layout, slot_rows)
    assert plan.split == {0: [0, 4]}  # 120 rows > 80: two pieces of 60
    assert plan.merged == {1: 2}  # 5 rows < 40: into its right neighbour (55 <= 80)
    assert sorted(rows.values()) == [40, 55, 60, 60]
    assert all(v <= 80 for v in rows.values())
    # Segments stay runs of adjacent slots, so a key range is still one segment.
    seen = []
    for s in plan.layout.slots:
        if not seen or seen[-1] != s:
            assert s not in seen
            seen.append(s)
    assert set(plan.touched_segments) == {0, 1, 2, 4}


def test_segments_within_bounds_are_left_alone():
    from etl.core.layout import plan_rebalance

    layout = SlotArray(400, (0, 1, 2, 3), 100)
    plan = plan_rebalance(layout, {0: 50, 1: 60, 2: 70, 3: 80}, theta=40)
    assert not plan.changed and plan.layout == layout


def test_a_merge_never_makes_a_segment_above_two_theta():
    from etl.core.layout import plan_rebalance

    layout = SlotArray(300, (0, 1, 2), 100)
    plan = plan_rebalance(layout, {0: 75, 1: 10, 2: 75}, theta=40)
    assert plan.merged == {} and not plan.changed  # 85 > 80 either way


def test_a_one_slot_segment_asks_for_finer_slots():
    from etl.core.layout import needs_refinement

    layout = SlotArray(400, (0, 1, 2, 3), 100)
    assert needs_refinement(layout, {0: 500}, theta=40)
    assert not needs_refinement(layout, {0: 50, 1: 80}, theta=40)
    assert not needs_refinement(SlotArray(4, (0, 1, 2, 3), 1), {0: 500}, theta=40)  # one key per slot already


def test_between_runs_only_a_segment_above_two_theta_that_can_be_split_is_due_and_only_split():
    """The service between runs splits and never merges (a small segment costs a probe little;
    the weekly maintenance merges): the plan's merges are left out, its splits are the full plan's."""
    from etl.core.layout import plan_rebalance, segments_to_split

    layout = SlotArray(800, (0, 0, 0, 0, 1, 2, 3, 3), 100)
    slot_rows = {0: 30, 1: 30, 2: 30, 3: 30, 4: 5, 5: 50, 6: 20, 7: 20}
    assert segments_to_split(layout, _rows_of(layout, slot_rows), theta=40) == [0]
    assert segments_to_split(layout, _rows_of(layout, slot_rows), theta=60) == []  # 120 rows <= 2*60
    # The largest first, ties to the lower id; a bound takes the first.
    assert segments_to_split(layout, {0: 120, 2: 90, 3: 120}, theta=40) == [0, 3, 2]
    assert segments_to_split(layout, {0: 120, 2: 90, 3: 120}, theta=40, limit=2) == [0, 3]
    assert segments_to_split(layout, {0: 120, 2: 90, 3: 150}, theta=40, limit=1) == [3]
    split_only = plan_rebalance(layout, slot_rows, theta=40, merge=False)
    assert split_only.split == plan_rebalance(layout, slot_rows, theta=40).split and split_only.merged == {}
    # One slot left in a slot array that cannot be refined: nothing to split, no read of the keys.
    single = SlotArray(2, (0, 1), 1)  # one key a slot
    assert single.refined() is None and segments_to_split(single, {0: 500, 1: 1}, theta=40) == []
    # A segment the layout does not have (rows of an older layout) is not the plan's to split.
    assert segments_to_split(layout, {9: 500}, theta=40) == []


def test_carried_join_state_follows_a_split_a_merge_and_a_refinement_or_is_dropped_when_layouts_do_not_match():
    """Issue 47's warm start across a layout change: a split's pieces share the old segment's
    frequency by their rows and are resident candidates when it was resident, a merge sums its
    parts', the untouched segments keep theirs, and an unchanged layout maps to itself."""
    from etl.core.layout import carried_across

    old = SlotArray(400, (0, 0, 1, 1), 100)
    split = SlotArray(400, (0, 2, 1, 1), 100)
    assert carried_across({0: 4.0, 1: 1.0}, [0], old, split, {0: 30, 2: 10, 1: 5}) == ({0: 3.0, 2: 1.0, 1: 1.0}, [0, 2])
    merged = SlotArray(400, (0, 0, 0, 0), 100)
    assert carried_across({0: 4.0, 1: 1.0}, [1], old, merged, {0: 35}) == ({0: 5.0}, [0])
    refined_split = SlotArray(400, (0, 0, 0, 3, 1, 1, 1, 1), 50)  # slots halved, then segment 0's last quarter cut off
    freq, resident = carried_across({0: 4.0, 1: 1.0}, [1], old, refined_split, {0: 0, 3: 0, 1: 8})
    assert freq == {0: 3.0, 3: 1.0, 1: 1.0} and resident == [1]  # no rows in 0 or 3: shared by key range
    assert carried_across({0: 4.0, 1: 1.0}, [0, 1], old, old, {0: 3, 1: 3}) == ({0: 4.0, 1: 1.0}, [0, 1])
    # a split and a merge at once: new segment 2 takes old 0's last slot and old 1's first; its 8
    # rows are estimated 4 and 4, so old 0's 4.0 goes 3:1 to 0 (12 rows) and 2, old 1's 1.0 1:1
    mixed = SlotArray(400, (0, 2, 2, 1), 100)
    assert carried_across({0: 4.0, 1: 1.0}, [1], old, mixed, {0: 12, 2: 8, 1: 4}) == ({0: 3.0, 2: 1.5, 1: 0.5}, [1, 2])
    assert carried_across({0: 4.0}, [0], old, SlotArray(800, (0, 0, 1, 1), 200), {0: 1}) is None
    assert carried_across({0: 4.0}, [0], SlotArray(400, (0, 1, 1), 134), split, {0: 1}) is None
