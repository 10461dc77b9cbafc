from etl.core.spark_conf import DELTA_EXTENSION


def test_session_has_delta(spark):
    assert spark.conf.get("spark.sql.extensions") == DELTA_EXTENSION
    assert spark.sparkContext.master == "local[2]"
    assert spark.range(3).count() == 3
