"""What importing Great Expectations on a thread while the JVM starts saves a cold `etl validate`,
side by side in one run (docs/decisions/gate-imported-while-spark-starts.md): one interval loaded
once, then validated by fresh processes with the background import and without it, in turn.

    .venv/bin/python -m benchmarks.gate_import               # about 8 minutes on 2 cores
    .venv/bin/python -m benchmarks.gate_import --repeats 5 --out docs/results/gate_import.json
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

# The CLI with the background import replaced by one that does nothing (the "without" mode).
WITHOUT = ("import sys, etl.quality.gate as gate\n"
           "class Done:\n    def join(self):\n        pass\n"
           "gate.import_in_background = Done\n"
           "from etl.entrypoints.cli import main\nsys.exit(main(sys.argv[1:]))\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the result as JSON here too")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="gate-import-"))
    env = interval_env(work, key_domain=2000, seed=5)
    subprocess.run([sys.executable, "-m", "etl.entrypoints.cli", "run", *SPAN], env=env, check=True, capture_output=True)
    commands = {"with-background-import": [sys.executable, "-m", "etl.entrypoints.cli", "validate", *SPAN],
                "without": [sys.executable, "-c", WITHOUT, "validate", *SPAN]}
    times: dict[str, list[float]] = {m: [] for m in commands}
    for rep in range(args.repeats):
        for mode, cmd in commands.items():
            t0 = time.monotonic()
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            times[mode].append(round(time.monotonic() - t0, 1))
            print(f"repeat {rep + 1}/{args.repeats} {mode:22s} {times[mode][-1]:6.1f} s", flush=True)
    medians = {m: statistics.median(ts) for m, ts in times.items()}
    result = {"command": "python -m benchmarks.gate_import " + " ".join(argv or sys.argv[1:]), "seconds": times,
              "median_s": medians, "ratio_with_to_without": round(medians["with-background-import"] / medians["without"], 2)}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
