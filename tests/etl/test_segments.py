from etl.config import EtlConfig
from etl.segments import HashLayout, SlotArray, load_layout


def test_slot_array_maps_ranges_in_order():
    layout = SlotArray.even(key_domain=1000, n_part=4)
    assert layout.n_slots == 4 and layout.slot_length == 250
    assert [layout.segment_of(str(k)) for k in (0, 249, 250, 999, 5000)] == [0, 0, 1, 3, 3]


def test_layout_is_persisted_and_not_changed_by_later_config(tmp_path):
    cfg = EtlConfig(warehouse_root=str(tmp_path), key_domain=1000, n_part=4)
    first = load_layout(cfg)
    again = load_layout(cfg.replace(n_part=16, key_domain=10))
    assert again == first


def test_hash_layout_is_chosen_at_creation_and_kept(tmp_path):
    cfg = EtlConfig(warehouse_root=str(tmp_path), n_part=5)
    assert load_layout(cfg, "hash") == HashLayout(5)
    assert load_layout(cfg, "range") == HashLayout(5)  # an existing layout is never changed silently
