"""What a cold driver costs before its own work, with and without the class-data archive, side by
side in one run (docs/decisions/class-data-archive.md): the session built, a first Spark job, a
first Delta write and read; each start a fresh process, the two modes in turn.

    .venv/bin/python -m benchmarks.driver_start             # about 3 minutes on 2 cores
    .venv/bin/python -m benchmarks.driver_start --repeats 5 --out docs/results/driver_start.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("session", "first_job", "first_delta")


def one_start() -> None:
    """One cold driver (this process): the phases' seconds as JSON on stdout."""
    from etl.core.config import load_config
    from etl.io.spark import build_spark_session

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        spark = build_spark_session(load_config().replace(warehouse_root=tmp), app_name="driver-start", master="local[2]")
        t1 = time.monotonic()
        spark.range(10).count()
        t2 = time.monotonic()
        spark.range(5).write.format("delta").save(f"{tmp}/t")
        spark.read.format("delta").load(f"{tmp}/t").count()
        t3 = time.monotonic()
        print(json.dumps(dict(zip(PHASES, (round(t1 - t0, 2), round(t2 - t1, 2), round(t3 - t2, 2))))))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the result as JSON here too")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one_start()
        return 0

    from etl.core.config import load_config
    from etl.io.spark import make_class_archive

    if make_class_archive(load_config()) is None:
        print("error: no class-data archive (spark_class_archive off, or it could not be written)", file=sys.stderr)
        return 1
    runs: dict[str, list[dict]] = {"without-archive": [], "with-archive": []}
    for rep in range(args.repeats):
        for mode in runs:
            env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", ETL_SPARK_CLASS_ARCHIVE=str(mode == "with-archive").lower())
            done = subprocess.run([sys.executable, "-m", "benchmarks.driver_start", "--one"], env=env,
                                  capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"repeat {rep + 1}/{args.repeats} {mode:16s} {runs[mode][-1]}", flush=True)
    medians = {m: {p: statistics.median(r[p] for r in rs) for p in PHASES} for m, rs in runs.items()}
    for m in medians:
        medians[m]["total"] = round(sum(medians[m].values()), 2)
    result = {"command": "python -m benchmarks.driver_start " + " ".join(argv or sys.argv[1:]), "seconds": runs,
              "median_s": medians,
              "ratio_total_with_to_without": round(medians["with-archive"]["total"] / medians["without-archive"]["total"], 2)}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
