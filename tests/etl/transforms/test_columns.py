"""The column helpers built as SQL text select what the Python-built columns select, and cost the
same whatever the number of their literals (a step at 1,024 segments built several of each)."""

import time

from chispa import assert_df_equality
from pyspark.sql import functions as F

from etl.core.layout import SlotArray
from etl.transforms.columns import int_array, int_map, ints_in
from etl.transforms.layout import segment_column


def test_ints_in_selects_what_isin_selects_and_nothing_for_no_values(spark):
    df = spark.createDataFrame([(1,), (2,), (5,), (None,)], "segment_id int")
    for values in ([2, 5], {5, 2, 2}, [7], []):
        assert_df_equality(df.where(ints_in("segment_id", values)), df.where(F.col("segment_id").isin(sorted(values))))
        assert_df_equality(df.where(~ints_in("segment_id", values)), df.where(~F.col("segment_id").isin(sorted(values))))


def test_the_range_layouts_segment_is_the_python_layouts(spark):
    layout = SlotArray.even(20_000_000, 1024)
    keys = ["0", "19531", "19532", "10000000", "19999999", "25000000"]
    got = spark.createDataFrame([(k,) for k in keys], "natural_key string").select(
        "natural_key", segment_column(layout)(F.lit("src"), F.col("natural_key")).alias("segment_id"))
    assert {r["natural_key"]: r["segment_id"] for r in got.collect()} == {k: layout.segment_of(k) for k in keys}
    assert spark.range(1).select(int_array([3, 1, 2]).alias("a")).first()["a"] == [3, 1, 2]


def test_int_map_maps_as_create_map_does(spark):
    pairs = [(4, 4), (5, 4), (6, 4), (7, 7)]
    df = spark.createDataFrame([(w,) for w in (4, 5, 6, 7)], "batch_index int")
    ours = df.select(int_map(pairs)[F.col("batch_index")].alias("first"))
    python_built = df.select(F.create_map(*[F.lit(x) for p in pairs for x in p])[F.col("batch_index")].alias("first"))
    assert_df_equality(ours, python_built)


def test_thousands_of_literals_cost_one_call(spark):
    """At 5,000 values the Python-built predicate takes seconds (one Py4J call per literal)."""
    started = time.perf_counter()
    for _ in range(3):
        ints_in("segment_id", range(5000))
        int_array(range(5000))
        int_map((w, w - w % 4) for w in range(5000))
    assert time.perf_counter() - started < 0.5
