"""One warehouse per layout seeded once per session (a native load of a first interval, so
``key_map`` is not empty and MESHJOIN really cycles over k=3 disk segments, then the second
interval ingested), and that second interval loaded by every strategy side by side."""


import pytest

from etl import jobs
from etl.core import registry
from etl.core.config import EtlConfig
from etl.generator import StreamSpec, generate_stream
from etl.io.layout_store import load_layout
from tests.helpers import SEEDED_FIRST as FIRST
from tests.helpers import SEEDED_SECOND as SECOND
from tests.helpers import SEEDED_SETTINGS as SETTINGS
from tests.helpers import SEEDED_T0 as T0
from tests.helpers import copy_of


@pytest.fixture(scope="session")
def seeded(spark, tmp_path_factory):
    """Per layout, a warehouse with FIRST loaded by ``native`` and SECOND ingested."""
    root = tmp_path_factory.mktemp("mesh-seed")
    landing = root / "landing"
    generate_stream(StreamSpec(start=T0, duration_s=240, rate=6, seed=44, key_domain=300, p=0.6, q=0.1, r=0.25, s=0.05), landing)
    out = {}
    for kind in ("range", "hash"):
        cfg = EtlConfig(
            warehouse_root=str(root / kind / "warehouse"), landing_root=str(landing), gx_root=str(root / kind / "gx"),
            runs_root=str(root / kind / "runs"), spark_master="local[2]", spark_shuffle_partitions=2, **SETTINGS,
        )
        load_layout(cfg, kind)
        one_batch = cfg.replace(micro_batch_seconds=120)  # the seed's own cut does not matter: keep it cheap
        jobs.ingest(spark, one_batch, FIRST)
        jobs.load(spark, one_batch, FIRST, strategy="native")
        jobs.ingest(spark, cfg, SECOND)
        out[kind] = cfg
    return out


@pytest.fixture(scope="session")
def loaded(spark, seeded, tmp_path_factory):
    """SECOND loaded by each strategy, side by side, from the same starting warehouse."""
    base = tmp_path_factory.mktemp("side-by-side")
    out = {}
    for strategy in registry.NAMES:
        cfg = copy_of(seeded[registry.spec(strategy).new_layout], base, strategy)
        jobs.load(spark, cfg, SECOND, strategy=strategy)
        out[strategy] = cfg
    return out
