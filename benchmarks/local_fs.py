"""What Hadoop's local file system without a process per call saves (setting spark_local_fs_nio,
docs/decisions/local-files-without-a-shell.md), side by side in one run: fresh drivers in turn,
with it and with Hadoop's own, each timing appends to and counts of a small Delta table after a
few untimed ones, and counting the processes an append starts; then a cold `etl run` of a
10-minute interval (1,200 updates) in each mode, in turn.

    .venv/bin/python -m benchmarks.local_fs                     # about 10 minutes on 2 cores
    .venv/bin/python -m benchmarks.local_fs --repeats 3 --out docs/results/local_fs.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.scratch import SPAN, interval_env

# One driver's measurements, printed as JSON (run by a fresh interpreter per mode and repeat).
DRIVER = r'''
import json, sys, tempfile, time
from etl.core.config import load_config
from etl.io.spark import build_spark_session
def started():
    with open("/proc/stat") as f:
        return int(next(l for l in f if l.startswith("processes")).split()[1])
spark = build_spark_session(load_config().replace(spark_master="local[2]", spark_shuffle_partitions=2), app_name="local-fs")
table = tempfile.mkdtemp(prefix="local-fs-")
rows = spark.range(5).toDF("id")
rows.write.format("delta").mode("overwrite").save(table)
for _ in range(5):
    rows.write.format("delta").mode("append").save(table)
n = int(sys.argv[1]); appends, processes, counts = [], [], []
for _ in range(n):
    before, t0 = started(), time.monotonic()
    rows.write.format("delta").mode("append").save(table)
    appends.append(time.monotonic() - t0); processes.append(started() - before)
for _ in range(n):
    t0 = time.monotonic(); spark.read.format("delta").load(table).count(); counts.append(time.monotonic() - t0)
print(json.dumps({"file_system": spark.sparkContext._jsc.hadoopConfiguration().get("fs.file.impl"),
                  "append_ms": 1000 * sum(appends) / n, "count_ms": 1000 * sum(counts) / n,
                  "processes_per_append": sorted(processes)[n // 2]}))
'''
MODES = {"nio": "true", "hadoop": "false"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--appends", type=int, default=30)
    parser.add_argument("--out", default=None, help="write the result as JSON here too")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="local-fs-"))
    base = interval_env(work, key_domain=300, seed=9)
    # Each mode's drivers from the class-data archive of their own class path (the jar leads it in
    # one mode only): without, one mode would also measure starting without an archive.
    from etl.core.config import load_config
    from etl.io.spark import make_class_archive, make_local_fs_jar

    for on in MODES.values():
        cfg = load_config(env=dict(base, ETL_SPARK_LOCAL_FS_NIO=on))
        make_local_fs_jar(cfg)
        print(f"class-data archive ({'with' if on == 'true' else 'without'} the class): {make_class_archive(cfg)}", flush=True)
    drivers: dict[str, list[dict]] = {m: [] for m in MODES}
    runs: dict[str, list[float]] = {m: [] for m in MODES}
    for rep in range(args.repeats):
        for mode, on in MODES.items():
            env = dict(base, ETL_SPARK_LOCAL_FS_NIO=on)
            out = subprocess.run([sys.executable, "-c", DRIVER, str(args.appends)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            drivers[mode].append(json.loads(out.strip().splitlines()[-1]))
            print(f"repeat {rep + 1}/{args.repeats} {mode:6s} {drivers[mode][-1]}", flush=True)
        for mode, on in MODES.items():
            roots = {f"ETL_{name.upper()}_ROOT": str(work / mode / name) for name in ("warehouse", "gx", "runs", "reports")}
            shutil.rmtree(work / mode, ignore_errors=True)
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "etl.entrypoints.cli", "run", *SPAN],
                           env=dict(base, ETL_SPARK_LOCAL_FS_NIO=on, **roots),
                           check=True, capture_output=True)
            runs[mode].append(round(time.monotonic() - t0, 1))
            print(f"repeat {rep + 1}/{args.repeats} {mode:6s} cold etl run {runs[mode][-1]} s", flush=True)
    median = {m: {key: statistics.median(d[key] for d in drivers[m]) for key in ("append_ms", "count_ms", "processes_per_append")}
              for m in MODES}
    for m in MODES:
        median[m]["etl_run_s"] = statistics.median(runs[m])
    result = {"command": "python -m benchmarks.local_fs " + " ".join(argv if argv is not None else sys.argv[1:]),
              "drivers": drivers, "etl_run_s": runs, "median": median,
              "ratio_nio_to_hadoop": {key: round(median["nio"][key] / median["hadoop"][key], 2)
                                      for key in ("append_ms", "count_ms", "etl_run_s")}}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
