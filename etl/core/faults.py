"""Named crash points: every place where a load can die between two durable writes.

The crash harness (tests/etl/test_crash.py) sets ``ETL_CRASH_AT=<point>:<n>`` on a job it starts
in its own process group; the n-th time the job passes ``<point>`` the whole group (the Python
driver and its JVM) is killed with SIGKILL, as a lost machine would be. Unset, a crash point
costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "ETL_CRASH_AT"

# Every crash point, in the order a load passes them; which strategies pass which.
LOAD_POINTS = (
    "load.logged",  # the ledger row with the batch's outcomes: decided and durable, nothing applied yet
    "load.current_merged",  # the entity table's MERGE (of one batch, or of several logged ones)
    "load.key_map_merged",  # key_map's, the last: the batches are done
)
PARTITIONED_POINTS = (
    "strategy.snapshot_written",
    "partitioned.wait_buffer_appended",  # a step's waiting tuples held (in memory: lost by the kill)
    "partitioned.join_state_carried",  # the run's flush decided: what the next run starts from, recorded (issue 47)
    "partitioned.wait_buffer_released",  # the run's end, before its snapshot is removed
)
# After a coalesced apply (apply_interval_seconds above 0): a table service committed (issue 47).
SERVICE_POINTS = ("services.key_map_compacted",)
# At a run's end (partitioned-range, split_segments_per_run): key_map's split segments rewritten,
# the new layout staged and not yet promoted (issue 47).
BETWEEN_RUNS_POINTS = ("services.key_map_rebalanced",)
MESHJOIN_POINTS = ("strategy.snapshot_written",)
INGEST_POINTS = ("ingest.ingested_written", "ingest.rejected_written")

_passed: dict[str, int] = {}


def crash_point(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _passed[name] = _passed.get(name, 0) + 1
    if _passed[name] == int(nth or 1):
        # Kill the whole group only when this job leads it (the harness starts it that way);
        # otherwise just this process, never the caller's group.
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
