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
