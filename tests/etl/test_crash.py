"""Crash harness: the job is killed with SIGKILL (driver and JVM, the whole process group) at a
named commit point, restarted, and must end with every deterministic table equal to an
uninterrupted run's, and no run left open.

`make test` runs one case (a partitioned run killed mid-step, its wait buffer in memory lost: the
restart names its tuples again from the replay); the slow tier adds a MESHJOIN load
point and random SIGKILLs of whole runs.
`make crash-matrix` (``ETL_CRASH_MATRIX=chain``) kills each strategy at every one of its commit
points in turn, each restart resuming what the previous kill left (so recovery is killed too), and
writes the tally to var/crash-matrix.json (docs/guarantees.md); then each strategy once at the
table service's commit point, as independent cases (``ETL_CRASH_MATRIX=full`` with
``ETL_CRASH_SERVICES=1``), its applies beside the decisions. ``ETL_CRASH_MATRIX=full`` runs every
point as an independent case instead (about three times longer).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from pathlib import Path

import pytest

from etl import jobs
from etl.core import faults
from etl.core.config import EtlConfig
from etl.generator import StreamSpec, generate_stream
from tests.helpers import CRASH_RUN as RUN
from tests.helpers import ROOT, crash_settings_json, reference_in_memory, start_from
from tests.helpers import CRASH_SERVICES, CRASH_SETTINGS, crash_config
from tests.helpers import deterministic_tables as tables
from tests.processes import EtlProcesses, Finished
from warehouse.schemas import DETERMINISTIC_TABLES

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

POINTS = {
    "native": faults.LOAD_POINTS,
    "meshjoin": faults.LOAD_POINTS + faults.MESHJOIN_POINTS,
    "partitioned-range": faults.LOAD_POINTS + faults.PARTITIONED_POINTS,
    "partitioned-hash": faults.LOAD_POINTS + faults.PARTITIONED_POINTS,
}
# The killed loads' apply_interval_seconds (make crash-matrix runs 0; 3600: the MERGEs of a run
# at its end, several logged batches unapplied at each kill before; and 0.001: each logged batch's
# MERGEs in a thread beside the next batch's decisions, apply_concurrently, so the kills at the
# MERGEs' points fall in that thread); the reference applies each batch as it is logged.
APPLY_INTERVAL = float(os.environ.get("ETL_CRASH_APPLY_INTERVAL", "0"))
# ``ETL_CRASH_SERVICES=1`` (make crash-matrix's last line): the table service between batches
# runs after each coalesced apply with a bound of one file a segment, and its commit point is
# every strategy's too. These small tables pass that bound only with deletion vectors in use
# (``ETL_CRASH_DELETION_VECTORS=on``: a MERGE then adds files to a segment instead of rewriting
# them), so a case fails when its load never compacts.
SERVICES = CRASH_SERVICES
if SERVICES:
    if APPLY_INTERVAL <= 0 or CRASH_SETTINGS["deletion_vectors"] != "on":
        raise RuntimeError("ETL_CRASH_SERVICES=1 needs ETL_CRASH_APPLY_INTERVAL > 0 (the services follow coalesced "
                           "applies) and ETL_CRASH_DELETION_VECTORS=on (without them these tables never need one)")
    POINTS = {strategy: points + faults.SERVICE_POINTS for strategy, points in POINTS.items()}
    # and the split at a run's end, partitioned-range's (CRASH_SETTINGS' theta of 10 makes one due)
    POINTS["partitioned-range"] += faults.BETWEEN_RUNS_POINTS

# The n-th passage of the point: mid-run where the point is passed per batch, else the first.
ONCE_PER_RUN = {"strategy.snapshot_written", "partitioned.join_state_carried", "partitioned.wait_buffer_released",
                *faults.INGEST_POINTS, *faults.SERVICE_POINTS, *faults.BETWEEN_RUNS_POINTS}
QUICK = [
    ("partitioned-range", "partitioned.wait_buffer_appended"),
    ("meshjoin", "load.current_merged"),  # between the two MERGEs (key_map's is the last)
]
FULL = [(s, p) for s, points in POINTS.items() for p in points] + [("native", p) for p in faults.INGEST_POINTS]
MATRIX = os.environ.get("ETL_CRASH_MATRIX", "")


def config(root: Path, landing: Path) -> EtlConfig:
    return crash_config(root, landing).replace(apply_interval_seconds=APPLY_INTERVAL,
                                               **({"key_map_files_per_segment": 1} if SERVICES else {}))

CASES = FULL if MATRIX == "full" else [] if MATRIX == "chain" else QUICK
TALLY: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def crash_report():
    """The tally of this module's kills and comparisons, at ``ETL_CRASH_REPORT`` when set."""
    yield
    if os.environ.get("ETL_CRASH_REPORT"):
        out = Path(os.environ["ETL_CRASH_REPORT"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "mode": MATRIX or "quick",
            "apply_interval_seconds": APPLY_INTERVAL,  # 3600: every batch of a run logged first, applied at its end
            "services": SERVICES,  # the table service's point in the cases, at one file a segment
            "faults_injected": sum(t["killed"] for t in TALLY),
            "comparisons_with_the_uninterrupted_run": sum(t["rows"] > 0 for t in TALLY),
            "rows_compared": sum(t["rows"] for t in TALLY),
            "rows_lost_or_doubled": sum(t["rows_differing"] for t in TALLY),
            "events": TALLY,
        }, indent=1))


def crash_run(processes: EtlProcesses, cfg: EtlConfig, strategy: str, point: str, nth: int) -> Finished:
    """`etl ingest` (only when the point is in ingestion) then `etl load`, each a process of its
    own, dying at the n-th passage of ``point``: how the last one started ended."""
    interval = ["--start", RUN.start.isoformat(), "--end", RUN.end.isoformat()]
    commands = ([["ingest"]] if point in faults.INGEST_POINTS else []) + [["load", "--join-strategy", strategy]]
    for command in commands:
        done = processes.run([*command, *interval], crash_settings_json(cfg), crash_at=f"{point}:{nth}", log="crash.log")
        if done.code != 0:
            break
    return done


def _case(strategy: str, point: str):
    slow = MATRIX == "" and (strategy, point) != QUICK[0]
    return pytest.param(strategy, point, id=f"{strategy}@{point}", marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("strategy, point", [_case(s, p) for s, p in CASES])
def test_killed_at_a_commit_point_and_restarted_equals_the_uninterrupted_run(
    spark, crash_landing, crash_ingested, uninterrupted, tmp_path, etl_process, strategy, point
):
    cfg = config(tmp_path, crash_landing)
    in_ingest = point in faults.INGEST_POINTS
    if not in_ingest:
        start_from(crash_ingested, tmp_path)
    nth = 1 if point in ONCE_PER_RUN else 2
    done = crash_run(etl_process, cfg, strategy, point, nth)
    assert done.code == -signal.SIGKILL, f"expected the job to be killed at {point}:{nth}, exit {done.code}:\n" + done.tail()

    # Restart, as Airflow's retry would: the failed task again, in a fresh driver.
    if in_ingest:
        jobs.ingest(spark, cfg, RUN)
    jobs.load(spark, cfg, RUN, strategy=strategy)

    TALLY.append({"strategy": strategy, "point": f"{point}:{nth}", "killed": True, "rows": 0, "rows_differing": 0})
    check(spark, cfg, strategy, uninterrupted(strategy), f"after a crash at {point}:{nth}")
    shutil.rmtree(tmp_path / "warehouse", ignore_errors=True)


def check(spark, cfg: EtlConfig, strategy: str, want: dict, when: str) -> None:
    """Every deterministic table equals the uninterrupted run's; nothing is left open: no run
    snapshot, no lock."""
    got = tables(spark, cfg)
    assert not os.path.exists(cfg.table_path("wait_buffer")), when  # the partitioned join's buffer writes nothing
    differing = {name: len(set(got[name]) ^ set(want[name])) + abs(len(got[name]) - len(want[name])) for name in want}
    TALLY.append({"strategy": strategy, "point": when, "killed": False, "rows": sum(map(len, want.values())),
                  "rows_differing": sum(differing.values())})
    for name in DETERMINISTIC_TABLES:
        assert got[name] == want[name], (
            f"{name} differs {when}: {differing[name]} rows; kills so far: {[t for t in TALLY if t['killed']][-8:]}")
    assert not list((cfg.meta_path / "runs").glob("*.json")) and not (cfg.meta_path / "load.lock").exists(), when


def chain_order(strategy: str) -> list[str]:
    """The run-start snapshot first, the per-batch points, the run's end last (the join's state
    for the next run recorded, then the wait buffer released)."""
    first = [p for p in POINTS[strategy] if p == "strategy.snapshot_written"]
    last = [p for p in POINTS[strategy] if p in ("partitioned.join_state_carried", "partitioned.wait_buffer_released")]
    return first + [p for p in POINTS[strategy] if p not in first + last] + last


@pytest.mark.skipif(MATRIX != "chain", reason="the crash matrix: make crash-matrix")
@pytest.mark.parametrize("strategy", list(POINTS))
def test_killed_at_every_commit_point_in_turn_equals_the_uninterrupted_run(
    spark, crash_landing, crash_ingested, uninterrupted, tmp_path, etl_process, strategy
):
    cfg, want = config(tmp_path, crash_landing), uninterrupted(strategy)

    def kill(point: str) -> int:
        done = crash_run(etl_process, cfg, strategy, point, 1)
        assert done.code in (0, -signal.SIGKILL), f"{point}: exit {done.code}:\n" + done.tail()
        if done.code == -signal.SIGKILL:
            TALLY.append({"strategy": strategy, "point": f"{point}:1", "killed": True, "rows": 0, "rows_differing": 0})
        return done.code

    if strategy == "native":  # ingestion's points too, then the retried ingest
        for point in faults.INGEST_POINTS:
            assert kill(point) == -signal.SIGKILL, f"not killed at {point}"
        jobs.ingest(spark, cfg, RUN)
    else:
        start_from(crash_ingested, tmp_path)
    for point in chain_order(strategy):
        if kill(point) == 0:
            # The run finished before passing the point again: check it, then start over from
            # the ingested warehouse, where the point is passed.
            check(spark, cfg, strategy, want, f"after a chain of crashes ending before {point}")
            for part in ("warehouse", "runs"):
                shutil.rmtree(tmp_path / part)
            start_from(crash_ingested, tmp_path)
            assert kill(point) == -signal.SIGKILL, f"not killed at {point} on a fresh warehouse"
    jobs.load(spark, cfg, RUN, strategy=strategy)  # the last retry, in a fresh driver
    check(spark, cfg, strategy, want, "at the end of the chain")


RANDOM_KILL_STRATEGIES = ("partitioned-range", "meshjoin", "native")
RANDOM_KILLS = int(os.environ.get("ETL_RANDOM_KILLS", "6"))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", RANDOM_KILL_STRATEGIES)
def test_killed_at_random_moments_and_restarted_equals_the_uninterrupted_run(
    spark, crash_landing, uninterrupted, tmp_path, etl_process, strategy
):
    """Not only at named commit points: `etl run` (ingest, load, validate) is SIGKILLed with its
    JVM at seeded random moments, ``ETL_RANDOM_KILLS`` times, each restart resuming what the
    previous kill left; then it runs to the end and must equal an uninterrupted run."""
    rng = random.Random(f"random-kill-{strategy}")
    kills = finished = 0

    def attempt(n: int):
        """A fresh warehouse per start from empty: a path this test's Spark session never read
        (a table deleted and created again under a cached path is a Delta log cache hazard)."""
        cfg = config(tmp_path / f"attempt-{n}", crash_landing)
        return cfg, ["run", "--join-strategy", strategy, "--start", RUN.start.isoformat(), "--end", RUN.end.isoformat()]

    cfg, cmd = attempt(0)
    while kills < RANDOM_KILLS:
        delay = rng.uniform(3.0, 60.0)
        done = etl_process.run(cmd, crash_settings_json(cfg), kill_after=delay, log="run.log")
        if done.killed_by_test:
            kills += 1
            progress = [ln for ln in done.output.splitlines() if "[etl] " in ln or " WARNING etl." in ln]
            TALLY.append({"strategy": strategy, "point": f"random@{delay:.1f}s", "killed": True, "rows": 0,
                          "rows_differing": 0, "last_progress": progress[-1][-120:] if progress else "before any"})
            continue
        assert done.code == 0, done.tail()
        finished += 1  # it finished before the kill: start over from an empty warehouse
        check(spark, cfg, strategy, uninterrupted(strategy), f"after random kills (run finished in < {delay:.1f} s)")
        cfg, cmd = attempt(finished)
    done = etl_process.run(cmd, crash_settings_json(cfg), timeout=900, log="run.log")
    assert done.code == 0, done.tail()
    check(spark, cfg, strategy, uninterrupted(strategy), f"after {kills} random kills")


@pytest.mark.slow  # in make test-slow while CI cannot afford it (issue 44); its claim: docs/guarantees.md
def test_a_history_entity_killed_between_its_merges_and_restarted_equals_the_uninterrupted_run(spark, tmp_path, etl_process):
    """A declared SCD type 2 entity (tests/models/composite_history.toml), killed after a batch's
    history MERGE and before its key_map MERGE: the restart applies the logged batch's versions
    once, and every table equals an uninterrupted run's (the same for its other points: the
    history MERGE's replay is tested on a few rows in tests/etl/load/test_apply.py)."""
    model = ROOT / "tests" / "models" / "composite_history.toml"

    def entity_config(root: Path) -> EtlConfig:
        return config(root, tmp_path / "landing").replace(model_file=str(model), entity="account")

    cfg = entity_config(tmp_path / "killed")
    reference = reference_in_memory(cfg, tmp_path / "reference")
    generate_stream(StreamSpec(start=RUN.start, duration_s=120, rate=6, seed=31, key_domain=120, p=0.6, q=0.1, r=0.25, s=0.05),
                    cfg.landing_path, entity=cfg.entity_model)
    for each in (cfg, reference):
        jobs.ingest(spark, each, RUN)
    jobs.load(spark, reference, RUN, strategy="partitioned-range")

    done = crash_run(etl_process, cfg, "partitioned-range", "load.current_merged", 2)
    assert done.code == -signal.SIGKILL, done.tail()
    jobs.load(spark, cfg, RUN, strategy="partitioned-range")
    got, want = tables(spark, cfg), tables(spark, reference)
    assert "account_history" in want and len(want["account_history"]) > len(want["key_map"])  # keys with several versions
    assert got == want
