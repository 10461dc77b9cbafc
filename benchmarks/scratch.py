"""One small interval for the benchmarks that time cold `etl` processes: a 10-minute stream at
2 updates/s landed under a scratch folder, and the environment a process loads it with."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

START = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
SPAN = ["--start", "2026-11-22T01:00", "--end", "2026-11-22T01:10"]  # the interval, as `etl` takes it


def interval_env(work: Path, key_domain: int, seed: int) -> dict[str, str]:
    """Land the interval's stream under ``work/landing``; the environment of a process loading it
    into ``work``'s warehouse on ``local[2]``, one batch for the interval."""
    from etl.generator import StreamSpec, generate_stream

    generate_stream(StreamSpec(start=START, duration_s=600, rate=2, key_domain=key_domain, seed=seed), work / "landing")
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", ETL_WAREHOUSE_ROOT=str(work / "warehouse"),
                ETL_LANDING_ROOT=str(work / "landing"), ETL_GX_ROOT=str(work / "gx"), ETL_RUNS_ROOT=str(work / "runs"),
                ETL_MICRO_BATCH_SECONDS="600", ETL_KEY_DOMAIN=str(key_domain), ETL_SPARK_SHUFFLE_PARTITIONS="2",
                ETL_SPARK_MASTER="local[2]")
