"""The simulator's costs of the always-on loader on Spark (``etl.simulator.model.LiveCosts``),
fitted from one run of ``benchmarks.kafka_stream_calls``: its output (the stream's lines "N
batches committed (U updates) in S s") and its ``<out>.passes.json`` (each pass's calls).

    .venv/bin/python -m benchmarks.live_costs docs/results/flush_narrowed_full/narrowed.log \\
        docs/results/flush_narrowed_full/narrowed.json.passes.json --grace-seconds 1

- ``step_fixed_s`` and ``per_update_s``: a least-squares line through the load steps' seconds
  against the updates they committed, over the one-commit steps no coalesced apply ran beside
  (neither the run's empty first step, nor a run's flush, nor a pass that caught up several);
- ``per_probe_s``, given the run's ledger (``--ledger``: the benchmark's ``<out>.ledger.json``,
  each batch's ``segments_probed``): a third term of that fit, the seconds per segment a step
  probes; without a ledger, or where it comes out negative (too few probes in the steps to tell
  it from noise), left out of the output, so that ``--live-costs`` keeps the default's;
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

COMMITTED = re.compile(r"(\d+) batches committed \((\d+) updates\) in ([\d.]+) s")


def probes_per_step(steps: list[tuple[int, int]], ledger: list[dict]) -> list[int]:
    """Each committed step's probed segments. ``steps``: (batches, updates) as the log has them; a
    step's batches are the ledger's next ones in ``batch_seq`` order, and their ``updates_in`` must
    add up to the step's updates, so that a ledger of another run cannot be fitted by accident
    (the seed's row of an older ledger, which has no probes, left out)."""
    if any("batch_seq" not in r or "updates_in" not in r for r in ledger):
        raise SystemExit("--ledger: every row needs batch_seq, updates_in and segments_probed")
    rows = sorted((r for r in ledger if r.get("segments_probed") is not None), key=lambda r: r["batch_seq"])
    if sum(n for n, _ in steps) != len(rows):
        raise SystemExit(f"the log's steps committed {sum(n for n, _ in steps)} batches, "
                         f"the ledger holds {len(rows)} with segments_probed")
    out, at = [], 0
    for i, (n, updates) in enumerate(steps):
        mine = rows[at:at + n]
        held = sum(int(r["updates_in"]) for r in mine)
        if held != updates:
            raise SystemExit(f"the log's step {i + 1} committed {updates} updates, the ledger's batches "
                             f"{mine[0]['batch_seq']}-{mine[-1]['batch_seq']} hold {held}")
        out.append(sum(int(r["segments_probed"]) for r in mine))
        at += n
    return out


def fit(log_text: str, passes: list[dict], grace_s: float, ledger: list[dict] | None = None) -> dict:
    matches = list(COMMITTED.finditer(log_text))
    committed = [int(m.group(2)) for m in matches]
    steps = [p for p in passes if "CommitProtocol.commit" in p]
    if len(committed) != len(steps):
        raise SystemExit(f"the log's {len(committed)} committed steps do not match the passes' {len(steps)} commits")
    if len(steps) < 4:
        raise SystemExit(f"{len(steps)} committed steps: too few to fit")
    probes = (probes_per_step([(int(m.group(1)), int(m.group(2))) for m in matches], ledger)
              if ledger is not None else [0] * len(steps))
    ends = [i for i, p in enumerate(steps) if "Loader._end_service" in p] or [len(steps) - 1]  # a run's end: its flush, then the split
    flushes = [steps[i] for i in ends]
    # A pass that committed several batches (the loop catching up) paid several fixed costs: left out.
    rows = [(u, g, p["Loader.load_ready"][0], any(k.endswith("(beside)") for k in p))
            for i, (u, g, p) in enumerate(zip(committed, probes, steps)) if i not in ends and p["CommitProtocol.commit"][3] == 1]
    alone = [(u, g, s) for u, g, s, beside in rows if not beside and u > 0]
    fixed, per_update, per_probe, probe_left_out = _least_squares(alone, with_probes=ledger is not None)

    def line(u: int, g: int) -> float:
        return fixed + per_update * u + (per_probe or 0.0) * g

    overlap = [s - line(u, g) for u, g, s, beside in rows if beside]
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
        } | ({"per_probe_s": float(f"{per_probe:.3g}")} if per_probe is not None else {}),
        "fitted_on": {
            "steps_alone": len(alone), "steps_beside_an_apply": len(overlap), "passes": len(passes),
            "flushes": len(flushes), "flush_updates": [committed[i] for i in ends],
            "residual_s_alone": round(float(np.sqrt(np.mean([(s - line(u, g)) ** 2 for u, g, s in alone]))), 2),
            "probes_in_steps_alone": sum(g for _, g, _ in alone) if ledger is not None else None,
        } | ({"per_probe_s_left_out": probe_left_out} if probe_left_out else {}),
    }


def _least_squares(alone: list[tuple[int, int, float]], with_probes: bool) -> tuple[float, float, float | None, str | None]:
    """seconds = fixed + per_update x updates (+ per_probe x probes), least squares. The probe term
    is dropped (None, with the reason) where the steps cannot tell it: no step probed, no more
    steps than terms, or a negative coefficient (noise, not a cost)."""
    y = np.array([s for _, _, s in alone])
    reason = None
    if with_probes:
        if not any(g for _, g, _ in alone):
            reason = "no step fitted probed a segment"
        elif len(alone) <= 3:
            reason = f"{len(alone)} steps fitted: too few for three terms"
        else:
            coef, *_ = np.linalg.lstsq(np.array([[1.0, u, g] for u, g, _ in alone]), y, rcond=None)
            if min(coef) >= 0:
                return float(coef[0]), float(coef[1]), float(coef[2]), None
            reason = f"a negative term in {[float(f'{c:.3g}') for c in coef]}"
    per_update, fixed = np.polyfit([u for u, _, _ in alone], y, 1)
    return float(fixed), float(per_update), None, reason


def ledger_of(data) -> list[dict]:
    """The batches of a ledger file: the benchmark's ``{mode: rows}`` with one mode, or
    ``{"rows": rows}``."""
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        return data["rows"]
    if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), list):
        return next(iter(data.values()))
    raise SystemExit("--ledger: expected the benchmark's <out>.ledger.json of one mode, or {\"rows\": [...]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="the run's output (stdout and stderr)")
    ap.add_argument("passes", type=Path, help="its <out>.passes.json")
    ap.add_argument("--grace-seconds", type=float, default=1.0, help="the run's stream_grace_seconds")
    ap.add_argument("--ledger", type=Path, help="its <out>.ledger.json (one mode's), to fit per_probe_s")
    args = ap.parse_args()
    passes = json.loads(args.passes.read_text())["passes"]
    ledger = ledger_of(json.loads(args.ledger.read_text())) if args.ledger else None
    json.dump(fit(args.log.read_text(errors="replace"), passes, args.grace_seconds, ledger), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
