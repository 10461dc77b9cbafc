"""The quick gate (`make test-gate`): the pure tier (every module imported, the policies, the line
rules, the DAGs' wiring, ...) and, for each guarantee of docs/guarantees.md that needs Spark or a
real process, its cheapest test. Not a second suite: the tests named here are the suite's own,
marked ``gate`` at collection (tests/conftest.py); `make test` runs them all the same.

Each entry: the claim, then the test that carries it most cheaply (a test id, or a test function
for all its parameters)."""

from __future__ import annotations

GATE: dict[str, str] = {
    "conservation: updates in = sum of outcomes":
        "tests/etl/load/test_loader.py::test_updates_in_equal_the_sum_of_outcomes",
    "equivalence with the reference join, one key per natural key":
        "tests/etl/load/test_loader.py::test_outcomes_and_keys_equal_the_oracle",
    "the partitioned join exact on a skewed stream in tiny memory":
        "tests/etl/strategies/test_partitioned.py::test_equals_the_oracle[partitioned-range-memory0-skewed]",
    "idempotence: a rerun changes no table":
        "tests/etl/load/test_loader.py::test_rerunning_the_same_interval_leaves_every_table_unchanged",
    "durability: a logged batch is recovered, not decided again":
        "tests/etl/load/test_loader.py::test_a_logged_but_unapplied_batch_is_recovered_not_redecided",
    "idempotent commits: a batch cut short after a MERGE ends as one run does":
        "tests/etl/load/test_loader.py::test_a_batch_cut_short_after_a_merge_ends_as_one_run_does[load.key_map_merged-0]",
    "the MERGEs off the delay path: batches logged ahead of them are applied together, or recovered from the log":
        "tests/etl/load/test_loader.py::test_batches_logged_ahead_of_their_merges_are_applied_together_and_recovered_from_the_log",
    "bad input quarantined with its reason, through Spark and Delta":
        "tests/etl/test_ingest.py::test_each_bad_line_gets_its_reason_and_good_lines_pass",
    "a run that cannot read its input is refused before any write":
        "tests/etl/test_ingest.py::test_missing_landing_zone_fails_before_any_write",
    "the quality gate fails on a key given twice":
        "tests/etl/quality/test_gate.py::test_gate_fails_when_a_surrogate_key_is_given_twice",
    "history (SCD type 2): a MERGE closes the open version, a replay changes nothing":
        "tests/etl/load/test_apply.py::test_merge_history_closes_the_open_version_inserts_the_batch_s_and_ignores_a_replay",
    "the tables are created once with their schema":
        "tests/etl/io/test_tables.py::test_tables_are_created_once_with_their_schema_and_partitioning",
    "crash at a commit point: a real `etl load` SIGKILLed and restarted":
        "tests/etl/test_crash.py::test_killed_at_a_commit_point_and_restarted_equals_the_uninterrupted_run",
}


def in_gate(nodeid: str) -> bool:
    """Whether a collected test (its node id) is one the gate runs."""
    return any(nodeid == entry or nodeid.startswith(entry + "[") for entry in GATE.values())
