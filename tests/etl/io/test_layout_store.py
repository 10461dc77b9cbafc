from etl.core.config import EtlConfig
from etl.core.layout import HashLayout
from etl.io.layout_store import load_layout


def test_layout_is_persisted_and_not_changed_by_later_config(tmp_path):
    cfg = EtlConfig(warehouse_root=str(tmp_path), key_domain=1000, n_part=4)
    first = load_layout(cfg)
    again = load_layout(cfg.replace(n_part=16, key_domain=10))
    assert again == first


def test_hash_layout_is_chosen_at_creation_and_kept(tmp_path):
    cfg = EtlConfig(warehouse_root=str(tmp_path), n_part=5)
    assert load_layout(cfg, "hash") == HashLayout(5)
    assert load_layout(cfg, "range") == HashLayout(5)  # an existing layout is never changed silently


def test_a_first_layout_without_n_part_has_segments_of_one_and_a_half_theta(tmp_path):
    """``n_part`` 0: 20,000 keys in segments of 1.5 * 1,000 rows; what a first load lays out is
    then kept, whatever the configuration says later."""
    cfg = EtlConfig(warehouse_root=str(tmp_path), key_domain=20_000, theta=1_000, n_part=0)
    assert load_layout(cfg, "hash") == HashLayout(14)
    assert load_layout(cfg.replace(theta=10), "hash") == HashLayout(14)
    ranged = load_layout(cfg.replace(warehouse_root=str(tmp_path / "range")), "range")
    assert len(ranged.segments) == 14
    assert HashLayout(3) == load_layout(cfg.replace(warehouse_root=str(tmp_path / "told"), n_part=3), "hash")
