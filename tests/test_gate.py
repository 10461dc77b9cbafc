"""The quick gate names tests that exist: an entry whose test was renamed or removed would leave
its claim out of `make test-gate` without a word."""

from __future__ import annotations

import ast

import pytest

from tests.gate import GATE, in_gate
from tests.helpers import ROOT


def functions_and_params(entry: str) -> tuple[str, str]:
    path, _, name = entry.partition("::")
    return path, name.partition("[")[0]


@pytest.mark.parametrize("claim", sorted(GATE))
def test_each_claim_names_a_test_of_the_suite(claim):
    path, function = functions_and_params(GATE[claim])
    tree = ast.parse((ROOT / path).read_text())
    assert function in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, GATE[claim]


def test_a_gate_entry_selects_its_parameters_and_nothing_else():
    whole = "tests/etl/test_crash.py::test_killed_at_a_commit_point_and_restarted_equals_the_uninterrupted_run"
    assert in_gate(whole + "[partitioned-range@partitioned.wait_buffer_appended]")
    assert not in_gate(whole + "_in_turn")
    assert not in_gate("tests/etl/load/test_loader.py::test_updates_in_equal_the_sum_of_outcomes_twice")
