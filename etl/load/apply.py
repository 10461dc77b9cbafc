"""A logged batch's summary: one pass over its outcomes for its counts, first key, arrivals and
segments. Applying it is the table handle's (``etl.io.tables.Tables``: Delta MERGEs in
``etl.io.delta_merges``)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core.delays import Arrivals
from etl.load.results import OUTCOME_COUNTS
from etl.transforms.delays import arrival_aggregates


def summarise_outcomes(outcomes: DataFrame, segment_of=None, cut_s: float | None = None) -> dict:
    """One pass over a logged batch: its size, outcome counts, the first key it allocated (what
    recovery needs), given ``cut_s`` (epoch seconds, at or before its commit) the arrival times
    its delays are measured from (``arrivals``: ``etl.core.delays``), and, given the layout's
    ``segment_of``, the ``key_map`` segments its keys live in (``segments``) and the keys it
    inserts per segment (``new_keys``)."""
    segment = segment_of(F.col("source_id"), F.col("natural_key")) if segment_of else None
    segments = [
        F.collect_set(segment).alias("segments"),
        F.collect_list(F.when(F.col("outcome") == "new", segment)).alias("new_in"),  # one "new" per new key
    ] if segment_of else []
    row = outcomes.agg(
        F.count(F.lit(1)).alias("n"),
        *[F.sum((F.col("outcome") == k).cast("long")).alias(k) for k in OUTCOME_COUNTS],
        F.min(F.when(F.col("outcome") == "new", F.col("surrogate_key"))).alias("min_new_key"),
        F.sum((F.col("reason") == "sequence_conflict").cast("long")).alias("sequence_conflicts"),
        *(arrival_aggregates(_instant(cut_s)) if cut_s is not None else []),
        *segments,
    ).first()
    return {
        "n": int(row["n"]),
        "counts": {k: int(row[k] or 0) for k in OUTCOME_COUNTS},
        "min_new_key": row["min_new_key"],
        "sequence_conflicts": int(row["sequence_conflicts"] or 0),
        "arrivals": _arrivals(row, cut_s) if cut_s is not None else None,
        "segments": sorted(int(s) for s in row["segments"]) if segment_of else None,
        "new_keys": dict(Counter(int(s) for s in row["new_in"])) if segment_of else None,
    }


def arrivals_at(outcomes: DataFrame, committed_s: float) -> Arrivals:
    """The batch's arrivals split at its commit itself: a second pass, for the rare batch whose
    summary's split is not that (``Arrivals.split_as_at``)."""
    return _arrivals(outcomes.agg(*arrival_aggregates(_instant(committed_s))).first(), committed_s)


def _instant(epoch_s: float):
    return F.lit(datetime.fromtimestamp(epoch_s, tz=timezone.utc))


def _arrivals(row, cut_s: float) -> Arrivals:
    def seconds(us):
        return us / 1e6 if us is not None else None

    return Arrivals(cut_s, int(row["arrivals_by_cut"]), seconds(row["avg_arrival_us"]), seconds(row["p01_arrival_us"]),
                    int(row["arrivals_after_cut"]), seconds(row["first_after_cut_us"]))
