"""The simulator's costs on Spark are the fit of the recorded run, not numbers typed in."""

import dataclasses
import json
from pathlib import Path

import pytest

from benchmarks.live_costs import fit, ledger_of
from etl.simulator.model import LiveCosts

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
RUN = RESULTS / "flush_narrowed_full"
PROBED = RESULTS / "wait_bound_probes"


def test_the_simulators_live_costs_are_the_recorded_runs_fit():
    """Every default but the probe's from the first run; the probe's from the wait bound's run,
    whose steps probe, with its ledger (the first run's steps hardly probe: no probe term)."""
    fitted = fit((RUN / "narrowed.log").read_text(), json.loads((RUN / "narrowed.json.passes.json").read_text())["passes"], 1.0)
    defaults = dataclasses.asdict(LiveCosts())
    costs = {k: v for k, v in fitted["costs"].items() if k != "per_probe_s"}
    assert {k: defaults[k] for k in costs} == pytest.approx(costs)
    assert fitted["fitted_on"]["steps_alone"] == 8 and fitted["fitted_on"]["steps_beside_an_apply"] == 5
    probed = fit((PROBED / "whole-segments.log").read_text(),
                 json.loads((PROBED / "whole-segments.json.passes.json").read_text())["passes"], 1.0,
                 ledger_of(json.loads((PROBED / "whole-segments.json.ledger.json").read_text())))
    assert defaults["per_probe_s"] == pytest.approx(probed["costs"]["per_probe_s"])
    assert probed["costs"] == pytest.approx(json.loads((PROBED / "whole-segments.live_costs.json").read_text())["costs"])


def test_a_log_that_does_not_match_its_passes_is_refused():
    passes = json.loads((RUN / "narrowed.json.passes.json").read_text())["passes"]
    with pytest.raises(SystemExit, match="do not match"):
        fit("1 batches committed (10 updates) in 2.0 s\n", passes, 1.0)


def test_with_the_runs_ledger_the_fit_finds_what_a_probed_segment_costs():
    """Steps as the benchmark logs them (one line a step, the passes' calls) and its ledger's rows
    (the seed's without probes, a step that committed two batches): seconds made of 3 s + 0.1 ms an
    update + 0.05 s a probed segment give those three back."""
    steps = [(u, g) for u in (2_000, 6_000, 10_000, 14_000) for g in (0, 40, 200)]
    log, passes, ledger = [], [], [{"batch_seq": 0, "updates_in": 20_000_000, "segments_probed": None}]
    for i, (u, g) in enumerate(steps):
        seconds = 3.0 + 1e-4 * u + 0.05 * g
        log.append(f"  stream:partitioned-range: run r: 1 batches committed ({u} updates) in {seconds:.1f} s")
        passes.append({"ingest_pieces": [2.0, 0, 0, 1], "CommitProtocol.commit": [seconds - 1, 0, 0, 1],
                       "Loader.load_ready": [seconds, 0, 0, 1]})
        ledger.append({"batch_seq": i + 1, "updates_in": u, "segments_probed": g})
    # the run's end: its flush (two batches: the last window's and the flush's) and the split
    log.append("  stream:partitioned-range: run r: 2 batches committed (90000 updates) in 90.0 s")
    passes.append({"CommitProtocol.commit": [30.0, 0, 0, 2], "Loader.load_ready": [90.0, 0, 0, 1],
                   "Loader._end_service": [20.0, 0, 0, 1]})
    ledger += [{"batch_seq": len(steps) + 1, "updates_in": 10_000, "segments_probed": 3},
               {"batch_seq": len(steps) + 2, "updates_in": 80_000, "segments_probed": 800}]
    fitted = fit("\n".join(log), passes, 1.0, ledger_of({"stream:partitioned-range": ledger}))
    costs = fitted["costs"]
    assert (costs["step_fixed_s"], costs["per_update_s"], costs["per_probe_s"]) == pytest.approx((3.0, 1e-4, 0.05), rel=1e-3)
    assert costs["run_end_hold_s"] == 60.0 and fitted["fitted_on"]["probes_in_steps_alone"] == 4 * 240
    assert "per_probe_s" not in fit("\n".join(log), passes, 1.0)["costs"]  # no ledger: the default's kept
    with pytest.raises(SystemExit, match="the ledger holds"):
        fit("\n".join(log), passes, 1.0, ledger[:-1])
