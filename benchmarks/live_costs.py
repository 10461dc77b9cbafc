"""The simulator's costs of the always-on loader on Spark (``etl.simulator.model.LiveCosts``),
fitted from one run of ``benchmarks.kafka_stream_calls``: its output (the stream's lines "N
batches committed (U updates) in S s") and its ``<out>.passes.json`` (each pass's calls).

    .venv/bin/python -m benchmarks.live_costs docs/results/flush_narrowed_full/narrowed.log \\
        docs/results/flush_narrowed_full/narrowed.json.passes.json --grace-seconds 1

- ``step_fixed_s`` and ``per_update_s``: a least-squares line through the load steps' seconds
  against the updates they committed, over the one-commit steps no coalesced apply ran beside
  (neither the run's empty first step, nor a run's flush, nor a pass that caught up several);
- ``apply_overlap_s``: what the steps an apply ran beside took above that line, on average;
- ``ingest_s``: the median pass's ingest;
- ``run_end_hold_s``: a run's flush step after its write-ahead commit (the last MERGE pair, the
  services, the split), on average over the runs (a flush: the pass with the split,
  ``Loader._end_service``; else the last step);
- ``grace_s``: the run's ``stream_grace_seconds`` (the command's, given here).

Prints the costs as JSON, with what they were fitted on."""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

COMMITTED = re.compile(r"batches committed \((\d+) updates\) in ([\d.]+) s")


def fit(log_text: str, passes: list[dict], grace_s: float) -> dict:
    committed = [int(m.group(1)) for m in COMMITTED.finditer(log_text)]
    steps = [p for p in passes if "CommitProtocol.commit" in p]
    if len(committed) != len(steps):
        raise SystemExit(f"the log's {len(committed)} committed steps do not match the passes' {len(steps)} commits")
    if len(steps) < 4:
        raise SystemExit(f"{len(steps)} committed steps: too few to fit")
    ends = [i for i, p in enumerate(steps) if "Loader._end_service" in p] or [len(steps) - 1]  # a run's end: its flush, then the split
    flushes = [steps[i] for i in ends]
    # A pass that committed several batches (the loop catching up) paid several fixed costs: left out.
    rows = [(u, p["Loader.load_ready"][0], any(k.endswith("(beside)") for k in p))
            for i, (u, p) in enumerate(zip(committed, steps)) if i not in ends and p["CommitProtocol.commit"][3] == 1]
    alone = [(u, s) for u, s, beside in rows if not beside and u > 0]
    per_update, fixed = np.polyfit([u for u, _ in alone], [s for _, s in alone], 1)
    overlap = [s - (fixed + per_update * u) for u, s, beside in rows if beside]
    ingest = [p["ingest_pieces"][0] for p in passes if "ingest_pieces" in p]
    holds = [f["Loader.load_ready"][0] - f["CommitProtocol.commit"][0] for f in flushes]
    return {
        "costs": {
            "grace_s": grace_s,
            "ingest_s": round(statistics.median(ingest), 2),
            "step_fixed_s": round(float(fixed), 2),
            "per_update_s": float(f"{per_update:.3g}"),
            "apply_overlap_s": round(statistics.mean(overlap), 1) if overlap else 0.0,
            "run_end_hold_s": round(statistics.mean(holds), 1),
        },
        "fitted_on": {
            "steps_alone": len(alone), "steps_beside_an_apply": len(overlap), "passes": len(passes),
            "flushes": len(flushes), "flush_updates": [committed[i] for i in ends],
            "residual_s_alone": round(float(np.sqrt(np.mean([(s - fixed - per_update * u) ** 2 for u, s in alone]))), 2),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="the run's output (stdout and stderr)")
    ap.add_argument("passes", type=Path, help="its <out>.passes.json")
    ap.add_argument("--grace-seconds", type=float, default=1.0, help="the run's stream_grace_seconds")
    args = ap.parse_args()
    passes = json.loads(args.passes.read_text())["passes"]
    json.dump(fit(args.log.read_text(errors="replace"), passes, args.grace_seconds), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
