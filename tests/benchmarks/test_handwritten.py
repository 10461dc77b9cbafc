"""The hand-written baseline the benchmark measures against must be a correct one: on a stream
without malformed lines it ends with the warehouse the product gives (the same keys, the same
current rows), or the comparison would flatter the product."""

from datetime import datetime, timedelta, timezone

import pytest
from chispa import assert_df_equality

from benchmarks.handwritten import Handwritten, seed, window_files
from etl import jobs
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.tables import read

T0 = datetime(2026, 11, 22, 5, 0, tzinfo=timezone.utc)
RUN = Interval(T0, T0 + timedelta(minutes=2))
# Not last_source_seq: an update with unchanged content is a duplicate to the product (the row
# keeps its sequence number) and written again by the baseline.
CURRENT = ("source_id", "natural_key", "name", "email", "city", "balance", "is_deleted")


@pytest.mark.spark
@pytest.mark.slow  # in make test-slow while CI cannot afford it (issue 44); its claim: docs/guarantees.md
def test_the_baseline_ends_with_the_product_s_keys_and_current_rows(spark, cfg, tmp_path):
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=8, key_domain=150, malformed_share=0, seed=3),
                    cfg.landing_path)
    seed(spark, read(spark, cfg, "key_map"), read(spark, cfg, "customer_current"), tmp_path / "hand")  # empty
    jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN, strategy="native")

    hand = Handwritten(spark, tmp_path / "hand")
    try:
        for files, _ in window_files(cfg.landing_path, T0, 60, 2, tmp_path / "windows"):  # one micro-batch each
            hand.feed(files)
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


def test_the_baseline_is_fed_each_line_once_in_its_trigger_window(tmp_path):
    """The strategies benchmark feeds the baseline one trigger interval at a time: a minute's
    landing file is cut by arrival second for a 30-s trigger, whole minutes go together for a
    2-minute one, and a trigger that does not divide a minute is refused."""
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=5, key_domain=50, seed=4), tmp_path / "landing")
    landed = sorted(line for f in (tmp_path / "landing").rglob("*.jsonl") for line in f.read_text().splitlines())

    halves = window_files(tmp_path / "landing", T0, 30, 4, tmp_path / "w30")
    assert sorted(line for files, _ in halves for f in files for line in f.read_text().splitlines()) == landed
    for w, (_, arrivals) in enumerate(halves):
        assert arrivals and all(T0 + timedelta(seconds=30 * w) <= a < T0 + timedelta(seconds=30 * (w + 1)) for a in arrivals)

    (files, arrivals), = window_files(tmp_path / "landing", T0, 120, 1, tmp_path / "w120")
    assert sorted(line for f in files for line in f.read_text().splitlines()) == landed
    assert len(arrivals) == sum(len(a) for _, a in halves)
    with pytest.raises(ValueError, match="does not divide a minute"):
        window_files(tmp_path / "landing", T0, 45, 2, tmp_path / "w45")
