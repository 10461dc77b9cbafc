"""The simulator's costs on Spark are the fit of the recorded run, not numbers typed in."""

import dataclasses
import json
from pathlib import Path

import pytest

from benchmarks.live_costs import fit
from etl.simulator.model import LiveCosts

RUN = Path(__file__).resolve().parents[2] / "docs" / "results" / "flush_narrowed_full"


def test_the_simulators_live_costs_are_the_recorded_runs_fit():
    fitted = fit((RUN / "narrowed.log").read_text(), json.loads((RUN / "narrowed.json.passes.json").read_text())["passes"], 1.0)
    defaults = dataclasses.asdict(LiveCosts())
    assert {k: defaults[k] for k in fitted["costs"]} == pytest.approx(fitted["costs"])
    assert fitted["fitted_on"]["steps_alone"] == 8 and fitted["fitted_on"]["steps_beside_an_apply"] == 5


def test_a_log_that_does_not_match_its_passes_is_refused():
    passes = json.loads((RUN / "narrowed.json.passes.json").read_text())["passes"]
    with pytest.raises(SystemExit, match="do not match"):
        fit("1 batches committed (10 updates) in 2.0 s\n", passes, 1.0)
