"""One warehouse per layout seeded once per session (``tests.helpers.seeded_warehouses``: a native
load of a first interval, so ``key_map`` is not empty and MESHJOIN really cycles over k=3 disk
segments, then the second interval ingested), and that second interval loaded by every strategy
side by side."""


import pytest

from etl.core import registry
from etl.core.config import EtlConfig
from etl.generator import StreamSpec, generate_stream
from tests.helpers import SEEDED_SETTINGS as SETTINGS
from tests.helpers import SEEDED_T0 as T0
from tests.helpers import seeded_warehouses


@pytest.fixture(scope="session")
def side_by_side(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("mesh-seed")
    landing = root / "landing"
    generate_stream(StreamSpec(start=T0, duration_s=240, rate=6, seed=44, key_domain=300, p=0.6, q=0.1, r=0.25, s=0.05), landing)
    cfg = EtlConfig(warehouse_root=str(root / "warehouse"), landing_root=str(landing), gx_root=str(root / "gx"),
                    runs_root=str(root / "runs"), spark_master="local[2]", spark_shuffle_partitions=2, **SETTINGS)
    return seeded_warehouses(spark, cfg, root, ("range", "hash"), registry.NAMES)


@pytest.fixture(scope="session")
def seeded(side_by_side):
    """Per layout, a warehouse with FIRST loaded by ``native`` and SECOND ingested."""
    return side_by_side[0]


@pytest.fixture(scope="session")
def loaded(side_by_side):
    """SECOND loaded by each strategy, side by side, from the same starting warehouse."""
    return side_by_side[1]
