"""The reference join: the contract of DESIGN.md §3 written as the plainest possible Python.

Updates are taken one at a time in arrival order and judged against the state the previous ones
left. Every strategy must give the same outcomes, and the same surrogate keys up to the numbering
of keys allocated in the run. Used by the tests and, later, by the benchmarks as ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping


@dataclass
class KeyState:
    surrogate_key: int
    last_source_seq: int
    row_hash: str


@dataclass(frozen=True)
class Decision:
    update_id: str
    outcome: str
    reason: str | None
    surrogate_key: int


def decide(
    updates: Iterable[Mapping],
    key_map: Mapping[tuple[str, str], KeyState] | None = None,
    next_key: int = 1,
) -> tuple[list[Decision], dict[tuple[str, str], KeyState]]:
    """Outcome of every update (dicts with update_id, source_id, natural_key, source_seq, row_hash,
    arrival_ts), and the key map afterwards. ``key_map`` is not modified."""
    state = {k: KeyState(v.surrogate_key, v.last_source_seq, v.row_hash) for k, v in (key_map or {}).items()}
    decisions = []
    for u in sorted(updates, key=lambda u: (u["arrival_ts"], u["update_id"])):
        key = (u["source_id"], u["natural_key"])
        seq, digest = int(u["source_seq"]), u["row_hash"]
        known = state.get(key)
        if known is None:
            state[key] = known = KeyState(next_key, seq, digest)
            next_key += 1
            outcome, reason = "new", None
        elif seq < known.last_source_seq:
            outcome, reason = "stale", "stale"
        elif seq == known.last_source_seq:
            outcome, reason = "duplicate", "redelivered"
        elif digest == known.row_hash:
            outcome, reason = "duplicate", "unchanged_content"
            known.last_source_seq = seq
        else:
            outcome, reason = "matched", None
            known.last_source_seq, known.row_hash = seq, digest
        decisions.append(Decision(u["update_id"], outcome, reason, known.surrogate_key))
    return decisions, state
