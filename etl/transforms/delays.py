"""Production delay as Spark columns: ``etl.core.delays``' definition for DataFrames (the quality
report's panes, a batch's summary, the benchmarks). From an update's arrival to its batch's
commit; an arrival after the commit is clock skew and has no delay (null here)."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def clock_skewed(committed: Column, arrival: Column) -> Column:
    """Whether the update arrived after its batch's commit: its source's clock is ahead of ours."""
    return arrival > committed


def production_delay_s(committed: Column, arrival: Column) -> Column:
    """Seconds from arrival to commit (to the microsecond); null for clock skew."""
    seconds = (F.unix_micros(committed) - F.unix_micros(arrival)) / 1e6
    return F.when(~clock_skewed(committed, arrival), seconds)


def arrival_aggregates(cut: Column) -> list[Column]:
    """The aggregates ``etl.core.delays.Arrivals`` holds, the arrivals (``arrival_ts``) split at
    ``cut`` (a moment at or before the batch's commit), for the pass over the batch that takes
    its other aggregates too."""
    arrival = F.col("arrival_ts")
    micros = F.unix_micros(arrival)
    by_cut = F.when(~clock_skewed(cut, arrival), micros)
    after_cut = F.when(clock_skewed(cut, arrival), micros)
    return [
        F.count(by_cut).alias("arrivals_by_cut"),
        F.avg(by_cut).alias("avg_arrival_us"),
        F.percentile_approx(by_cut, F.lit(0.01), F.lit(10000)).alias("p01_arrival_us"),
        F.count(after_cut).alias("arrivals_after_cut"),
        F.min(after_cut).alias("first_after_cut_us"),
    ]
