"""The commit protocol's decisions about the logged tail's apply (etl.load.protocol), without
Spark: when a due tail is applied, and what the join reads ``key_map`` as meanwhile."""

import time
from types import SimpleNamespace

from etl.core.config import EtlConfig
from etl.load.protocol import CommitProtocol
from etl.load.tail import LoggedTail


def protocol(**settings) -> CommitProtocol:
    cfg = EtlConfig(**settings)
    return CommitProtocol(None, cfg, SimpleNamespace(spark=None, cfg=cfg))  # no table is read


def logged_ago(seconds: float) -> SimpleNamespace:
    return SimpleNamespace(logged_at=time.time() - seconds)


def test_a_due_tail_waits_for_a_step_that_decides_until_it_has_waited_twice_the_interval():
    """Applied beside the decisions, a tail found due by a step that decides nothing is left to the
    next step that does, unless it is overdue; applied in turn, it is applied once due."""
    beside = protocol(apply_interval_seconds=10)
    assert not beside.tail_due()  # nothing logged
    beside.tail.batches = [logged_ago(15), logged_ago(1)]
    assert beside.tail_due() and not beside.tail_due(overdue=True)
    beside.tail.batches = [logged_ago(21)]
    assert beside.tail_due(overdue=True)
    in_turn = protocol(apply_interval_seconds=10, apply_concurrently=False)
    in_turn.tail.batches = [logged_ago(15)]
    assert in_turn.tail_due(overdue=True)


def test_the_join_reads_key_map_pinned_under_both_tails_only_while_an_apply_runs():
    p = protocol(apply_interval_seconds=10)
    assert p.key_map_layers() == (None, [p.tail])  # the latest version, the tail over it
    applying, pinned = LoggedTail(), object()
    p.applying, p._pinned_key_map = applying, pinned
    assert p.key_map_layers() == (pinned, [applying, p.tail])  # oldest first
