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
