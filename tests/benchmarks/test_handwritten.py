"""The hand-written baseline the benchmark measures against must be a correct one: on a stream
without malformed lines it ends with the warehouse the product gives (the same keys, the same
current rows), or the comparison would flatter the product."""

from datetime import datetime, timedelta, timezone

import pytest
from chispa import assert_df_equality

from benchmarks.handwritten import Handwritten, seed
from etl import jobs
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.landing import SOURCE_PREFIX, landing_file
from etl.io.tables import read

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 22, 5, 0, tzinfo=timezone.utc)
RUN = Interval(T0, T0 + timedelta(minutes=2))
# Not last_source_seq: an update with unchanged content is a duplicate to the product (the row
# keeps its sequence number) and written again by the baseline.
CURRENT = ("source_id", "natural_key", "name", "email", "city", "balance", "is_deleted")


def test_the_baseline_ends_with_the_product_s_keys_and_current_rows(spark, cfg, tmp_path):
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=8, key_domain=150, malformed_share=0, seed=3),
                    cfg.landing_path)
    seed(spark, read(spark, cfg, "key_map"), read(spark, cfg, "customer_current"), tmp_path / "hand")  # empty
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN, strategy="native")

    hand = Handwritten(spark, tmp_path / "hand")
    sources = sorted(p.name[len(SOURCE_PREFIX):] for p in cfg.landing_path.glob(f"{SOURCE_PREFIX}*"))
    try:
        for minute in (RUN.start, RUN.start + timedelta(minutes=1)):  # one micro-batch each
            hand.feed([f for f in (landing_file(cfg.landing_path, s, minute) for s in sources) if f.exists()])
        assert hand.query.lastProgress["batchId"] == 1
    finally:
        hand.stop()

    def table(name):
        return spark.read.format("delta").load(str(tmp_path / "hand" / name))

    assert_df_equality(table("customer_current").select(*CURRENT), read(spark, cfg, "customer_current").select(*CURRENT),
                       ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(table("key_map").select("source_id", "natural_key"),
                       read(spark, cfg, "key_map").select("source_id", "natural_key"), ignore_row_order=True,
                       ignore_nullable=True)
    keys = table("key_map").select("surrogate_key")
    assert keys.distinct().count() == keys.count()
