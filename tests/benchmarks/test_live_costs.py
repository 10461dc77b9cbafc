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


@pytest.mark.parametrize("name", ["narrowed-in-run", "applies-at-run-end", "no-bound-applies-at-run-end"])
def test_every_recorded_fit_is_its_runs_files_fit(name):
    fitted = fit((PROBED / f"{name}.log").read_text(errors="replace"),
                 json.loads((PROBED / f"{name}.json.passes.json").read_text())["passes"], 1.0,
                 ledger_of(json.loads((PROBED / f"{name}.json.ledger.json").read_text())))
    assert fitted == json.loads((PROBED / f"{name}.live_costs.json").read_text())


def test_a_log_that_does_not_match_its_passes_is_refused():
    passes = json.loads((RUN / "narrowed.json.passes.json").read_text())["passes"]
    with pytest.raises(SystemExit, match="do not match"):
        fit("1 batches committed (10 updates) in 2.0 s\n", passes, 1.0)


def probed_run(steps, probe_s=0.05):
    """Steps as the benchmark logs them (one line a step, the passes' calls) and its ledger's rows
    (an older ledger's seed row without probes first), seconds of 3 s + 0.1 ms an update +
    ``probe_s`` a probed segment; then a run's end: its flush (two batches: the last window's and
    the flush's) and the split."""
    log, passes, ledger = [], [], [{"batch_seq": 0, "updates_in": 20_000_000, "segments_probed": None}]
    for i, (u, g) in enumerate(steps):
        seconds = 3.0 + 1e-4 * u + probe_s * g
        log.append(f"  stream:partitioned-range: run r: 1 batches committed ({u} updates) in {seconds:.1f} s")
        passes.append({"ingest_pieces": [2.0, 0, 0, 1], "CommitProtocol.commit": [seconds - 1, 0, 0, 1],
                       "Loader.load_ready": [seconds, 0, 0, 1]})
        ledger.append({"batch_seq": i + 1, "updates_in": u, "segments_probed": g})
    log.append("  stream:partitioned-range: run r: 2 batches committed (90000 updates) in 90.0 s")
    passes.append({"CommitProtocol.commit": [30.0, 0, 0, 2], "Loader.load_ready": [90.0, 0, 0, 1],
                   "Loader._end_service": [20.0, 0, 0, 1]})
    ledger += [{"batch_seq": len(steps) + 1, "updates_in": 10_000, "segments_probed": 3},
               {"batch_seq": len(steps) + 2, "updates_in": 80_000, "segments_probed": 800}]
    return "\n".join(log), passes, ledger


STEPS = [(u, g) for u in (2_000, 6_000, 10_000, 14_000) for g in (0, 40, 200)]


def test_with_the_runs_ledger_the_fit_finds_what_a_probed_segment_costs():
    log, passes, ledger = probed_run(STEPS)
    fitted = fit(log, passes, 1.0, ledger_of({"stream:partitioned-range": ledger[::-1]}))  # rows in any order
    costs = fitted["costs"]
    assert (costs["step_fixed_s"], costs["per_update_s"], costs["per_probe_s"]) == pytest.approx((3.0, 1e-4, 0.05), rel=1e-3)
    assert costs["run_end_hold_s"] == 60.0 and fitted["fitted_on"]["probes_in_steps_alone"] == 4 * 240
    assert ledger_of({"rows": ledger}) == ledger
    assert "per_probe_s" not in fit(log, passes, 1.0)["costs"]  # no ledger: the default's kept


def test_a_probe_term_the_steps_cannot_tell_is_left_out_with_its_reason():
    for steps, probe_s, reason in [([(u, 0) for u in (2_000, 6_000, 10_000, 14_000)], 0.05, "no step fitted probed"),
                                   ([(2_000, 0), (6_000, 40), (10_000, 200)], 0.05, "too few for three terms"),
                                   (STEPS, -0.01, "a negative term")]:
        log, passes, ledger = probed_run(steps, probe_s)
        fitted = fit(log, passes, 1.0, ledger)
        assert "per_probe_s" not in fitted["costs"] and reason in fitted["fitted_on"]["per_probe_s_left_out"]


def test_a_ledger_that_is_not_the_logs_runs_is_refused():
    log, passes, ledger = probed_run(STEPS)
    with pytest.raises(SystemExit, match="the ledger holds"):
        fit(log, passes, 1.0, ledger[:-1])
    shifted = [dict(r, updates_in=r["updates_in"] + (r["batch_seq"] == 3)) for r in ledger]
    with pytest.raises(SystemExit, match="step 3 committed 2000 updates, the ledger.s batches 3-3 hold 2001"):
        fit(log, passes, 1.0, shifted)
    with pytest.raises(SystemExit, match="every row needs"):
        fit(log, passes, 1.0, [{k: v for k, v in r.items() if k != "batch_seq"} for r in ledger])
    with pytest.raises(SystemExit, match="of one mode"):
        ledger_of({"stream:native": ledger, "stream:partitioned-range": ledger})
