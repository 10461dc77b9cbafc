"""What Spark SQL's generated code costs a short job in a cold driver, side by side in one run:
`etl run` of a 2-minute interval (720 lines at 6 updates/s, two micro-batches, the quality gate)
with ``spark_codegen`` on (the product's default) and off (the tests' subprocesses:
docs/decisions/driver-codegen-for-tests.md), each a fresh process and a fresh warehouse, the two
modes in turn; both with the tests' C1-only JIT.

    .venv/bin/python -m benchmarks.driver_codegen                # about 10 minutes on 2 cores
    .venv/bin/python -m benchmarks.driver_codegen --repeats 5 --out docs/results/driver_codegen.json
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

START, END = "2026-11-22T10:00", "2026-11-22T10:02"
MODES = {"codegen": "true", "interpreted": "false"}
JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"  # as tests/conftest.py


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the result as JSON here too")
    args = parser.parse_args(argv)
    etl = [sys.executable, "-m", "etl.entrypoints.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", ETL_LANDING_ROOT=str(root / "landing"), ETL_KEY_DOMAIN="300",
                    ETL_SPARK_SHUFFLE_PARTITIONS="2", ETL_SPARK_DRIVER_JAVA_OPTIONS=JIT)
        subprocess.run([*etl, "generate", "--start", START, "--duration", "120", "--rate", "6"], env=base, check=True,
                       capture_output=True)
        seconds: dict[str, list[float]] = {m: [] for m in MODES}
        summaries = set()
        for rep in range(args.repeats):
            for mode, codegen in MODES.items():
                work = root / f"{mode}-{rep}"
                env = dict(base, ETL_SPARK_CODEGEN=codegen, ETL_WAREHOUSE_ROOT=str(work / "wh"), ETL_GX_ROOT=str(work / "gx"),
                           ETL_RUNS_ROOT=str(work / "runs"), ETL_REPORTS_ROOT=str(work / "reports"))
                t0 = time.monotonic()
                done = subprocess.run([*etl, "run", "--start", START, "--end", END, "--json"], env=env, capture_output=True,
                                      text=True)
                elapsed = time.monotonic() - t0
                if done.returncode != 0:
                    print(done.stdout[-2000:], done.stderr[-3000:], file=sys.stderr)
                    return 1
                said = json.loads(done.stdout)
                summaries.add(json.dumps([said["outcomes"], said["keys_allocated"], said["validation"]], sort_keys=True))
                seconds[mode].append(round(elapsed, 1))
                print(f"repeat {rep + 1}/{args.repeats} {mode:11s} {elapsed:6.1f} s", flush=True)
    medians = {m: statistics.median(s) for m, s in seconds.items()}
    result = {"command": f"python -m benchmarks.driver_codegen --repeats {args.repeats}", "seconds": seconds,
              "median_s": medians, "ratio_interpreted_to_codegen": round(medians["interpreted"] / medians["codegen"], 2),
              "same_outcomes": len(summaries) == 1}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
