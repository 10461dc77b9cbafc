"""What a load call asks of the ledger before its first batch, in a cold driver (every scheduled
run's `etl run` or `etl load` is one): the four separate reads the loader made until 2026-11-28
(the state, the run's rows, the run's owner, the last logged batch) against ``Ledger.facts``'s one
aggregate, side by side, each a fresh process, the two modes in turn. The warehouse is one run of
ten batches loaded by `etl run`; the driver has made its first Delta read (as a load's overlap
check does) before the clock starts.

    .venv/bin/python -m benchmarks.load_checks                # about 4 minutes on 2 cores
    .venv/bin/python -m benchmarks.load_checks --repeats 5 --out docs/results/load_checks.json
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

RUN = ("2026-11-22T10:00", "2026-11-22T10:10")
MODES = ("separate-reads", "one-read")


def env_for(root: Path) -> dict[str, str]:
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", ETL_WAREHOUSE_ROOT=str(root / "wh"),
                ETL_LANDING_ROOT=str(root / "landing"), ETL_GX_ROOT=str(root / "gx"), ETL_RUNS_ROOT=str(root / "runs"),
                ETL_REPORTS_ROOT=str(root / "reports"), ETL_KEY_DOMAIN="300", ETL_SPARK_SHUFFLE_PARTITIONS="2")


def one(mode: str) -> None:
    """One cold driver (this process): the seconds of ``mode``'s reads as JSON on stdout."""
    from pyspark.sql import functions as F

    from etl.core.config import load_config
    from etl.core.interval import Interval
    from etl.io.runs import known_runs, run_owner
    from etl.io.spark import build_spark_session
    from etl.io.tables import open_tables
    from etl.load.ledger import Ledger

    cfg = load_config()
    run_key = Interval.parse(f"{RUN[0]}:00+00:00", f"{RUN[1]}:00+00:00").run_key
    spark = build_spark_session(cfg, app_name="load-checks", master="local[2]")
    known_runs(spark, cfg)  # the driver's first Delta read, before the clock
    ledger = Ledger(open_tables(spark, cfg))
    t0 = time.monotonic()
    if mode == "separate-reads":
        table = ledger.table()
        table.agg(F.max("batch_seq"), F.max("next_surrogate_key")).first()
        rows = [r.asDict() for r in table.where(f"run_key = '{run_key}'").collect()]
        owner = run_owner(spark, cfg, run_key)
        last = table.where((F.col("batch_seq") > 0) & (F.col("updates_in") > 0)).orderBy(F.col("batch_seq").desc()).limit(1).collect()
        last = last[0].asDict() if last else None
    else:
        ledger.facts(run_key)
        rows = ledger.rows(run_key)
        owner = run_owner(spark, cfg, run_key, rows)
        last = ledger.last_logged()
    seconds = time.monotonic() - t0
    print(json.dumps({"seconds": round(seconds, 2), "rows": len(rows), "owner": owner, "last_seq": last and last["batch_seq"]}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the result as JSON here too")
    parser.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one(args.one)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = env_for(root)
        etl = [sys.executable, "-m", "etl.entrypoints.cli"]
        subprocess.run([*etl, "generate", "--start", RUN[0], "--duration", "600", "--rate", "2"], env=env, check=True,
                       capture_output=True)
        subprocess.run([*etl, "run", "--start", RUN[0], "--end", RUN[1]], env=env, check=True, capture_output=True)
        runs: dict[str, list[dict]] = {m: [] for m in MODES}
        for rep in range(args.repeats):
            for mode in MODES:
                done = subprocess.run([sys.executable, "-m", "benchmarks.load_checks", "--one", mode], env=env,
                                      capture_output=True, text=True, check=True)
                runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"repeat {rep + 1}/{args.repeats} {mode}: {runs[mode][-1]['seconds']} s", flush=True)
    same = {json.dumps({k: v for k, v in r.items() if k != "seconds"}) for m in MODES for r in runs[m]}
    medians = {m: statistics.median(r["seconds"] for r in runs[m]) for m in MODES}
    result = {"command": "python -m benchmarks.load_checks --repeats %d" % args.repeats, "runs": runs,
              "median_s": medians, "ratio": round(medians["one-read"] / medians["separate-reads"], 2),
              "same_answers": len(same) == 1}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if len(same) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
