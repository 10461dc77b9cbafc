import pytest

from etl.core.spark_conf import DELTA_EXTENSION
from etl.io.spark import sql_settings


def test_session_has_delta(spark):
    assert spark.conf.get("spark.sql.extensions") == DELTA_EXTENSION
    assert spark.sparkContext.master == "local[2]"
    assert spark.range(3).count() == 3


def test_sql_settings_hold_for_the_block_and_are_put_back(spark):
    key, unset = "spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions.test.unset"
    before = spark.conf.get(key)
    with pytest.raises(RuntimeError):
        with sql_settings(spark, {key: "true" if before == "false" else "false", unset: "3"}):
            assert spark.conf.get(key) != before and spark.conf.get(unset) == "3"
            raise RuntimeError("the block fails")
    assert spark.conf.get(key) == before
    assert spark.conf.get(unset, None) is None
