import pytest

from etl.core.config import EtlConfig
from etl.io.rebalance import RebalanceBlocked, check_no_owed_run_ends
from etl.io.run_ends import owe, owed, owed_by, settled


def test_an_owed_run_end_is_kept_with_its_own_bound_until_settled_and_blocks_maintenance_meanwhile(tmp_path):
    """The record a run's end leaves before its flush commits: read back whatever the reader's
    configuration says (the bound is the run's), listed in run order, gone once settled (settling
    twice, as a retry after a kill does, is harmless); while one is left maintenance's layout steps
    refuse, naming the run."""
    cfg = EtlConfig(warehouse_root=str(tmp_path))
    check_no_owed_run_ends(cfg, "rebalance")  # nothing owed, no record folder yet
    owe(cfg, "20261122T0102", "partitioned-range", 16, 8192)
    owe(cfg.replace(split_segments_per_run=2), "20261122T0100", "partitioned-range", 2, 10)
    assert [r["run_key"] for r in owed(cfg)] == ["20261122T0100", "20261122T0102"]
    assert owed_by(cfg, "20261122T0102") == {"run_key": "20261122T0102", "strategy": "partitioned-range", "limit": 16,
                                              "theta": 8192}
    with pytest.raises(RebalanceBlocked, match="20261122T0100, 20261122T0102"):
        check_no_owed_run_ends(cfg, "rebalance")
    settled(cfg, "20261122T0100")
    settled(cfg, "20261122T0100")
    assert owed_by(cfg, "20261122T0100") is None and [r["run_key"] for r in owed(cfg)] == ["20261122T0102"]
    settled(cfg, "20261122T0102")
    check_no_owed_run_ends(cfg, "relayout")
