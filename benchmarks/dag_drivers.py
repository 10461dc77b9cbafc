"""What a scheduled interval's Spark drivers cost, the way the load DAG starts them (spark-submit),
side by side in one run: three tasks (ingest, load, validate: three cold drivers) resolving the
packages with Ivy at each start, three tasks starting from the recorded jars, and the one task
`etl run` from the recorded jars, and that task's driver started from the class-data archive
set-up writes (docs/decisions/one-driver-per-run.md, jars-resolved-once.md, class-data-archive.md).
Only the last mode maps the archive.

    .venv/bin/python -m benchmarks.dag_drivers              # about 20 minutes on 2 cores
    .venv/bin/python -m benchmarks.dag_drivers --repeats 5 --modes one-task-jars,one-task-jars-archive

Each repeat loads the same small interval (10 minutes at 2 updates/s, one micro-batch) into a
fresh warehouse in each mode, the modes in turn. Reports the wall time of each interval, and per
mode the median and its ratio to the first mode's."""

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

MODES = ("three-tasks-ivy", "three-tasks-jars", "one-task-jars", "one-task-jars-archive")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one, removed after)")
    parser.add_argument("--out", default=None, help="write the result as JSON here too")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, the first is the ratios' base ({', '.join(MODES)})")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        parser.error(f"--modes: one or more of {', '.join(MODES)}")

    from etl.core.config import load_config
    from etl.core.interval import Interval
    from etl.core.spark_conf import recorded_jars
    from etl.entrypoints.airflow_support import APPLICATION, submit_conf
    from etl.generator import StreamSpec, generate_stream
    from etl.io.spark import make_class_archive

    work = Path(args.work or tempfile.mkdtemp(prefix="dag-drivers-"))
    start = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
    interval = Interval(start, start.replace(minute=10))
    landing = work / "landing"
    generate_stream(StreamSpec(start=start, duration_s=600, rate=2, key_domain=2000, seed=5), landing)

    def env_of(root: Path, ivy: bool, archive: bool = False) -> dict[str, str]:
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", ETL_WAREHOUSE_ROOT=str(root / "warehouse"),
                   ETL_SPARK_CLASS_ARCHIVE=str(archive).lower(),
                   ETL_LANDING_ROOT=str(landing), ETL_GX_ROOT=str(root / "gx"), ETL_RUNS_ROOT=str(root / "runs"),
                   ETL_MICRO_BATCH_SECONDS="600", ETL_KEY_DOMAIN="2000", ETL_SPARK_SHUFFLE_PARTITIONS="2")
        if ivy:  # a record folder that cannot exist: each driver resolves with Ivy (its cache warm), as before
            env["ETL_SPARK_JARS_DIR"] = "/dev/null/no-recorded-jars"  # and records nothing (no copy to pay)
            env["ETL_SPARK_JARS"] = ""
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        return env

    if not recorded_jars(load_config(env=env_of(work, False))):
        print("error: no recorded jars yet; run `make setup` (or any etl command) once first", file=sys.stderr)
        return 1
    span = ["--start", interval.start.isoformat(), "--end", interval.end.isoformat()]
    if "one-task-jars-archive" in modes and not make_class_archive(load_config(env=env_of(work, False, True))):
        print("error: no class-data archive could be written (etl.io.spark.make_class_archive)", file=sys.stderr)
        return 1
    times: dict[str, list[float]] = {m: [] for m in modes}
    for rep in range(args.repeats):
        for mode in modes:
            root = work / f"{mode}-{rep}"
            env = env_of(root, ivy=mode.endswith("ivy"), archive=mode.endswith("archive"))
            cfg = load_config(env=env)
            base = ["spark-submit", "--master", "local[2]"]
            for key, value in submit_conf(cfg).items():
                base += ["--conf", f"{key}={value}"]
            steps = [["run"]] if mode.startswith("one") else [["ingest"], ["load"], ["validate"]]
            t0 = time.monotonic()
            for step in steps:
                done = subprocess.run(base + [APPLICATION, *step, *span], env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    print(done.stdout[-2000:], done.stderr[-3000:], file=sys.stderr)
                    return 1
            elapsed = time.monotonic() - t0
            times[mode].append(round(elapsed, 1))
            print(f"repeat {rep + 1}/{args.repeats} {mode:17s} {elapsed:6.1f} s", flush=True)
            shutil.rmtree(root, ignore_errors=True)
    medians = {m: statistics.median(ts) for m, ts in times.items()}
    result = {"command": "python -m benchmarks.dag_drivers " + " ".join(argv or sys.argv[1:]),
              "seconds": times, "median_s": medians,
              f"ratio_to_{modes[0].replace('-', '_')}": {m: round(medians[m] / medians[modes[0]], 2) for m in modes}}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
