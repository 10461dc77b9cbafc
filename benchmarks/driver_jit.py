"""What C1-only JIT (``spark_driver_java_options = "-XX:TieredStopAtLevel=1"``) does to a short job
in a cold JVM, side by side in one run.

    .venv/bin/python -m benchmarks.driver_jit              # about 8 minutes on 2 cores
    .venv/bin/python -m benchmarks.driver_jit --repeats 5

Loads a small warehouse (10 minutes of stream at 2 updates/s, one micro-batch), then runs the
``validate`` step through ``spark-submit`` (a cold driver JVM each time, as an Airflow task is)
alternately with the default tiered JIT and with C1 only, ``--repeats`` times each. Such a job is
CPU-bound on 2 cores (about 85% busy), much of it compiling: C2 pays off only in long jobs.
Reports each wall time, the medians and their ratio."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

C1 = "-XX:TieredStopAtLevel=1"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one, removed after)")
    args = parser.parse_args(argv)

    from etl import jobs
    from etl.core.config import load_config
    from etl.core.interval import Interval
    from etl.entrypoints.airflow_support import APPLICATION, submit_conf
    from etl.generator import StreamSpec, generate_stream
    from etl.io.spark import build_spark_session

    work = Path(args.work or tempfile.mkdtemp(prefix="driver-jit-"))
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", ETL_WAREHOUSE_ROOT=str(work / "warehouse"),
               ETL_LANDING_ROOT=str(work / "landing"), ETL_GX_ROOT=str(work / "gx"), ETL_RUNS_ROOT=str(work / "runs"),
               ETL_MICRO_BATCH_SECONDS="600", ETL_KEY_DOMAIN="2000", ETL_SPARK_SHUFFLE_PARTITIONS="2",
               ETL_SPARK_DRIVER_JAVA_OPTIONS="")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    # Without the class-data archive in both modes: the c1 mode's options replace the driver's whole
    # option string, archive included (the archive is measured by benchmarks.driver_start).
    env["ETL_SPARK_CLASS_ARCHIVE"] = "false"
    cfg = load_config(env=env)
    start = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
    interval = Interval(start, start.replace(minute=10))
    print(f"loading a small warehouse under {work} ...", flush=True)
    generate_stream(StreamSpec(start=start, duration_s=600, rate=2, key_domain=2000, seed=5), cfg.landing_path)
    spark = build_spark_session(cfg.replace(spark_master="local[2]"), app_name="driver-jit-seed")
    jobs.ingest(spark, cfg, interval)
    jobs.load(spark, cfg, interval)
    spark.stop()

    base = ["spark-submit", "--master", "local[2]"]
    for key, value in submit_conf(cfg).items():
        base += ["--conf", f"{key}={value}"]
    step = [APPLICATION, "validate", "--start", interval.start.isoformat(), "--end", interval.end.isoformat()]
    times: dict[str, list[float]] = {"default": [], "c1": []}
    for rep in range(args.repeats):
        for mode in ("default", "c1"):
            extra = ["--conf", f"spark.driver.extraJavaOptions={C1}"] if mode == "c1" else []
            t0 = time.monotonic()
            done = subprocess.run(base + extra + step, env=env, capture_output=True, text=True)
            elapsed = time.monotonic() - t0
            if done.returncode != 0:
                print(done.stdout[-2000:], done.stderr[-3000:], file=sys.stderr)
                return 1
            times[mode].append(round(elapsed, 1))
            print(f"repeat {rep + 1}/{args.repeats} {mode:7s} {elapsed:6.1f} s", flush=True)
    medians = {mode: statistics.median(ts) for mode, ts in times.items()}
    print(json.dumps({"seconds": times, "median_s": medians, "ratio_c1_to_default": round(medians["c1"] / medians["default"], 2)}, indent=2))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
