"""The reference join: the contract of DESIGN.md §3 written as the plainest possible Python.

Updates are taken one at a time in arrival order and judged against the state the previous ones
left. Every strategy must give the same outcomes, and the same surrogate keys up to the numbering
of keys allocated in the run. Used by the tests and, later, by the benchmarks as ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Iterable, Mapping

from etl.core.model import encode_key, version_hash


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
    append_only: bool = False,
) -> tuple[list[Decision], dict[tuple[str, str], KeyState]]:
    """Outcome of every update (dicts with update_id, source_id, natural_key, source_seq, row_hash,
    arrival_ts), and the key map afterwards. ``key_map`` is not modified. ``append_only``: a fact
    identified by an event id, whose newer content is a duplicate (``same_event``)."""
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
            # An event id's line names one event: at its position it is that event again.
            outcome, reason = "duplicate", "redelivered" if append_only or digest == known.row_hash else "sequence_conflict"
        elif digest == known.row_hash:
            outcome, reason = "duplicate", "unchanged_content"
            known.last_source_seq = seq
        elif append_only:
            outcome, reason = "duplicate", "same_event"
            known.last_source_seq = seq
        else:
            outcome, reason = "matched", None
            known.last_source_seq, known.row_hash = seq, digest
        decisions.append(Decision(u["update_id"], outcome, reason, known.surrogate_key))
    return decisions, state


def entity_rows(updates: Iterable[Mapping], decisions: Iterable[Decision], columns: tuple[str, ...],
                history: str, type1: tuple[str, ...] = ()) -> list[dict]:
    """The entity's table the reference expects after ``updates`` (the rows of ``ingested_updates``,
    with the entity's declared ``columns``) were decided as ``decisions``: for ``current``, each
    key's last applied update; for ``history``, one version per applied update, ordered by
    ``source_seq``, valid from its ``event_ts`` or its predecessor's start if later, to the next
    version's start (DESIGN.md §3 and docs/model.md, "History"). With ``type1`` columns an applied
    update whose ``version_hash`` equals its predecessor's makes no version, and every version holds
    the type1 values of the key's last applied update that is no delete (of its first, if all are)."""
    by_id = {u["update_id"]: u for u in updates}
    applied: dict[int, list[Mapping]] = {}
    for d in decisions:  # in arrival order
        if d.outcome in ("new", "matched"):
            applied.setdefault(d.surrogate_key, []).append(by_id[d.update_id])
    rows = []
    for sk, ups in applied.items():
        def row(u: Mapping) -> dict:
            return {"surrogate_key": sk, "source_id": u["source_id"], "natural_key": u["natural_key"],
                    **{c: u[c] for c in columns}, "is_deleted": u["op"] == "delete", "row_hash": u["row_hash"],
                    "event_ts": u["event_ts"], "arrival_ts": u["arrival_ts"]}
        if history == "current":
            last = ups[-1]
            rows.append({**row(last), "last_source_seq": int(last["source_seq"])})
            continue
        versions = sorted(ups, key=lambda u: int(u["source_seq"]))
        if type1:
            latest = None
            for u in versions:
                if latest is None or u["op"] != "delete":
                    latest = {c: u[c] for c in type1}
            versions = [{**u, **latest} for i, u in enumerate(versions)
                        if i == 0 or version_hash(u["row_hash"]) != version_hash(versions[i - 1]["row_hash"])]
        starts, start = [], None
        for u in versions:
            start = u["event_ts"] if start is None else max(start, u["event_ts"])
            starts.append(start)
        for i, u in enumerate(versions):
            last = i == len(versions) - 1
            rows.append({**row(u), "source_seq": int(u["source_seq"]), "valid_from": starts[i],
                         "valid_to": None if last else starts[i + 1], "is_current": last})
    return rows


def key_text(value) -> str:
    """A typed key part's canonical text, as the line rules give it (``etl.core.records``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def reference_key(update: Mapping, reference) -> tuple[str, str]:
    """The dimension key (``source_id``, ``natural_key``) a fact update names by ``reference``."""
    return (reference.source or update["source_id"], encode_key(tuple(key_text(update[c]) for c in reference.by)))


def inferred_rows(facts: Mapping[object, Iterable[Mapping]], dimension, known: set, history: str) -> list[dict]:
    """The inferred members the reference expects in ``dimension``'s table: each key a fact names
    (``facts``: fact entity -> its ingested updates) that the dimension never had (``known``), with
    no content, the times of the first fact naming it, flagged ``is_inferred``."""
    first: dict[tuple[str, str], Mapping] = {}
    for fact, updates in facts.items():
        for r in fact.references:
            if r.dimension != dimension.name:
                continue
            for u in updates:
                k = reference_key(u, r)
                if k not in known and (k not in first or (u["arrival_ts"], u["update_id"]) < (first[k]["arrival_ts"], first[k]["update_id"])):
                    first[k] = {**u, "_by": dict(zip((c.name for c in dimension.key), (u[c] for c in r.by)))}
    rows = []
    for (source, natural_key), u in first.items():
        row = {"source_id": source, "natural_key": natural_key,
               **{c.name: u["_by"].get(c.name) for c in dimension.columns},
               "is_deleted": False, "is_inferred": True, "row_hash": "", "event_ts": u["event_ts"], "arrival_ts": u["arrival_ts"]}
        if history == "current":
            row["last_source_seq"] = -1
        else:
            row.update(source_seq=-1, valid_from=u["event_ts"], valid_to=None, is_current=True)
        rows.append(row)
    return rows
