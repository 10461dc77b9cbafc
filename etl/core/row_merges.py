"""The load's three MERGEs as pure functions of rows (dicts): what ``etl.io.delta_merges`` asks of
Delta, for the in-memory tables (``etl.io.memory_tables``) that protocol tests run on.

Each follows Delta's MERGE semantics as those MERGEs use them: a target row matches on the
condition as SQL evaluates it (a null comparison is no match), the first applicable matched clause
applies, a source row that matched no target row is inserted when its insert condition holds, and
two source rows matching one target row is an error (Delta's
``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE``). Every source row is matched against the
target as it was before the MERGE, as Delta matches against the table's snapshot, and a null key
matches nothing. tests/etl/load/test_apply.py runs every MERGE on both implementations against
the same expected rows."""

from __future__ import annotations

VERSION = "version"  # a history change that is a version to insert
CLOSE = "close"  # one that closes the key's open version where the batch's first version starts


# A new key's key_map row: each column and the change column it is taken from (delta_merges' insert).
KEY_MAP_INSERT = {
    "source_id": "source_id", "natural_key": "natural_key", "surrogate_key": "surrogate_key",
    "row_hash": "applied_row_hash", "last_source_seq": "max_source_seq", "first_arrival_ts": "new_arrival_ts",
    "last_arrival_ts": "last_arrival_ts", "created_batch_seq": "batch_seq", "updated_batch_seq": "batch_seq",
    "segment_id": "segment_id",
}


class MultipleMatches(ValueError):
    """Two source rows matched one target row: Delta refuses such a MERGE, so do we."""


def _lt(a, b) -> bool:
    return a is not None and b is not None and a < b


def _greatest(*values):
    """SQL's ``greatest``: nulls skipped, null only when all are."""
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _coalesce(*values):
    return next((v for v in values if v is not None), None)


def _claim(matched: dict, index: int, what: str) -> None:
    if index in matched:
        raise MultipleMatches(f"{what}: two source rows match the target row {index}")
    matched[index] = True


def merge_key_map_rows(target: list[dict], changes: list[dict], segments: list[int] | None = None) -> list[dict]:
    """``etl.io.delta_merges.merge_key_map`` on rows: known keys (in the batch's segments) advance
    their hash, sequence and arrival for a newer batch; new keys are inserted."""
    segs = set(segments) if segments is not None else {c["segment_id"] for c in changes}
    out = [dict(r) for r in target]
    at = {(r["source_id"], r["natural_key"]): i for i, r in enumerate(out)
          if r["source_id"] is not None and r["natural_key"] is not None and (not segs or r["segment_id"] in segs)}
    matched: dict = {}
    inserts = []
    for s in changes:
        i = at.get((s["source_id"], s["natural_key"]))
        if i is None:
            if s["is_new"]:
                row = {column: s[source] for column, source in KEY_MAP_INSERT.items()}
                if s.get("created_batch_seq") is not None:  # several batches applied at once: the one that created it
                    row["created_batch_seq"] = s["created_batch_seq"]
                inserts.append(row)
            continue
        _claim(matched, i, "key_map")
        t = out[i]
        if _lt(t["updated_batch_seq"], s["batch_seq"]):
            t.update(
                row_hash=_coalesce(s["applied_row_hash"], t["row_hash"]),
                last_source_seq=_greatest(t["last_source_seq"], s["max_source_seq"]),
                last_arrival_ts=_greatest(t["last_arrival_ts"], s["last_arrival_ts"]),
                updated_batch_seq=s["batch_seq"],
            )
    return out + inserts


def merge_current_rows(target: list[dict], state: list[dict]) -> list[dict]:
    """``merge_current`` on rows (``state`` conformed to the table): a key's row replaced by a
    newer batch's, a new key's inserted."""
    out = [dict(r) for r in target]
    at = {r["surrogate_key"]: i for i, r in enumerate(out) if r["surrogate_key"] is not None}
    matched: dict = {}
    inserts = []
    for s in state:
        i = at.get(s["surrogate_key"])
        if i is None:
            inserts.append(dict(s))
            continue
        _claim(matched, i, "current state")
        if _lt(out[i]["updated_batch_seq"], s["updated_batch_seq"]):
            out[i] = dict(s)
    return out + inserts


def merge_history_rows(target: list[dict], changes: list[dict], columns: list[str], inferred: bool,
                       type1: tuple[str, ...] = ()) -> list[dict]:
    """``merge_history`` on rows: the batch's versions inserted unless there already, each key's
    open version closed where the batch's first starts, an inferred placeholder deleted instead;
    with ``type1`` columns, those set on every stored version of the key, and the open version
    closed only when the batch made a version (``_closes``)."""
    out = [dict(r) for r in target]
    by_key: dict = {}
    for i, r in enumerate(out):
        if r["surrogate_key"] is not None:
            by_key.setdefault(r["surrogate_key"], []).append(i)

    def matches(t: dict, s: dict) -> bool:
        if s["_kind"] == VERSION:
            return t["source_seq"] is not None and t["source_seq"] == s["source_seq"]
        reaches = bool(t["is_current"]) or any(t[c] != s[c] for c in type1)  # (nulls equal, as SQL's <=>)
        return s["_kind"] == CLOSE and reaches and _lt(t["updated_batch_seq"], s["updated_batch_seq"])

    matched: dict = {}
    deleted: set[int] = set()
    inserts = []
    # Matched against the rows before the MERGE (``target``), changed in ``out``.
    hits_of = [[i for i in by_key.get(s["surrogate_key"], ()) if matches(target[i], s)] for s in changes]
    for s, hits in zip(changes, hits_of):
        if not hits:
            if s["_kind"] == VERSION:
                inserts.append({c: s[c] for c in columns})
            continue
        for i in hits:
            _claim(matched, i, "history")
            if s["_kind"] != CLOSE:
                continue
            if inferred and out[i].get("is_inferred"):
                deleted.add(i)
            elif type1:
                closes = bool(target[i]["is_current"]) and bool(s["_closes"])
                out[i].update({c: s[c] for c in type1}, updated_batch_seq=s["updated_batch_seq"])
                if closes:
                    out[i].update(valid_to=s["valid_from"], is_current=False)
            else:
                out[i].update(valid_to=s["valid_from"], is_current=False, updated_batch_seq=s["updated_batch_seq"])
    return [r for i, r in enumerate(out) if i not in deleted] + inserts
