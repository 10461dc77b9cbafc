"""The in-memory MERGEs keep Delta's rules where the load relies on them, checked without Spark
(their results against Delta's on the same rows: tests/etl/load/test_apply.py)."""

import pytest

from etl.core.row_merges import CLOSE, VERSION, MultipleMatches, merge_current_rows, merge_history_rows, merge_key_map_rows


def km(key, seg, batch, sk=1, row_hash="h", seq=1):
    return {"source_id": "crm", "natural_key": key, "surrogate_key": sk, "row_hash": row_hash, "last_source_seq": seq,
            "first_arrival_ts": 1, "last_arrival_ts": 1, "created_batch_seq": batch, "updated_batch_seq": batch,
            "segment_id": seg}


def change(key, seg, batch, is_new=False, sk=1, row_hash=None, seq=None, arrival=2):
    return {"source_id": "crm", "natural_key": key, "surrogate_key": sk, "applied_row_hash": row_hash,
            "max_source_seq": seq, "last_arrival_ts": arrival, "new_arrival_ts": arrival if is_new else None,
            "batch_seq": batch, "is_new": is_new, "segment_id": seg}


def test_a_key_outside_the_batch_s_segments_is_not_matched_and_a_null_never_wins_greatest():
    target = [km("1", 0, 1, seq=5), km("2", 1, 1, sk=2)]
    out = merge_key_map_rows(target, [change("1", 0, 2, row_hash=None, seq=None, arrival=None)], segments=[0])
    assert out[0]["row_hash"] == "h" and out[0]["last_source_seq"] == 5 and out[0]["last_arrival_ts"] == 1
    assert out[0]["updated_batch_seq"] == 2 and out[1] == target[1]
    # the same key named in a segment the condition leaves out is no match: a new key is inserted
    assert len(merge_key_map_rows(target, [change("2", 1, 3, is_new=True, sk=9)], segments=[0])) == 3
    assert target[0]["updated_batch_seq"] == 1  # the target rows are not changed in place


def test_two_changes_matching_one_row_are_refused_as_delta_refuses_them():
    with pytest.raises(MultipleMatches):
        merge_key_map_rows([km("1", 0, 1)], [change("1", 0, 2), change("1", 0, 2)])
    with pytest.raises(MultipleMatches):
        merge_current_rows([{"surrogate_key": 1, "updated_batch_seq": 1}], [{"surrogate_key": 1, "updated_batch_seq": 2}] * 2)


def test_each_change_is_matched_against_the_rows_before_the_merge_and_a_null_key_matches_nothing():
    """Two closes of one open version: Delta matches both against its snapshot and refuses; a
    match against the half-merged rows would close it once and say nothing."""
    columns = ["surrogate_key", "source_seq", "valid_from", "valid_to", "is_current", "updated_batch_seq"]
    open_version = dict(zip(columns, (1, 10, 5, None, True, 1)))
    close = {"_kind": CLOSE, "surrogate_key": 1, "valid_from": 7, "updated_batch_seq": 2, "source_seq": None}
    with pytest.raises(MultipleMatches):
        merge_history_rows([open_version], [close, dict(close)], columns, inferred=False)
    nameless = {**km("1", 0, 1), "natural_key": None}
    assert len(merge_key_map_rows([nameless], [change(None, 0, 2, is_new=True, sk=2)], segments=[0])) == 2
    # an empty segment list narrows nothing, as the MERGE's condition then names none
    assert merge_key_map_rows([km("1", 0, 1)], [change("1", 1, 2)], segments=[])[0]["updated_batch_seq"] == 2


def test_a_close_deletes_an_inferred_placeholder_and_closes_a_real_open_version():
    columns = ["surrogate_key", "source_seq", "valid_from", "valid_to", "is_current", "is_inferred", "updated_batch_seq"]
    placeholder = dict(zip(columns, (1, -1, 5, None, True, True, 1)))
    real = dict(zip(columns, (2, 10, 5, None, True, False, 1)))
    changes = [
        {"_kind": CLOSE, "surrogate_key": 1, "valid_from": 7, "updated_batch_seq": 2, "source_seq": None},
        {"_kind": CLOSE, "surrogate_key": 2, "valid_from": 7, "updated_batch_seq": 2, "source_seq": None},
        {"_kind": VERSION, **dict(zip(columns, (2, 11, 7, None, True, False, 2)))},
    ]
    out = merge_history_rows([placeholder, real], changes, columns, inferred=True)
    assert out == [{**real, "valid_to": 7, "is_current": False, "updated_batch_seq": 2},
                   dict(zip(columns, (2, 11, 7, None, True, False, 2)))]
    assert merge_history_rows(out, changes, columns, inferred=True) == out  # a replay: each version matches itself
    with pytest.raises(MultipleMatches):  # the open version closed and re-inserted by one batch: Delta refuses it too
        merge_history_rows([real], [changes[1], {"_kind": VERSION, **real}], columns, inferred=True)


def test_a_type1_close_sets_its_columns_on_every_version_and_closes_only_when_the_batch_made_one():
    columns = ["surrogate_key", "source_seq", "email", "valid_from", "valid_to", "is_current", "updated_batch_seq"]
    old = dict(zip(columns, (1, 10, "a1", 5, 7, False, 1)))
    opened = dict(zip(columns, (1, 11, "a1", 7, None, True, 1)))
    only_type1 = {"_kind": CLOSE, "surrogate_key": 1, "valid_from": None, "updated_batch_seq": 2, "source_seq": None,
                  "email": "a2", "_closes": False}
    out = merge_history_rows([old, opened], [only_type1], columns, inferred=False, type1=("email",))
    assert out == [{**old, "email": "a2", "updated_batch_seq": 2}, {**opened, "email": "a2", "updated_batch_seq": 2}]
    version = {"_kind": VERSION, **dict(zip(columns, (1, 12, "a3", 9, None, True, 3)))}
    closing = {**only_type1, "valid_from": 9, "updated_batch_seq": 3, "email": "a3", "_closes": True}
    out = merge_history_rows(out, [closing, version], columns, inferred=False, type1=("email",))
    assert out == [{**old, "email": "a3", "updated_batch_seq": 3},
                   {**opened, "email": "a3", "valid_to": 9, "is_current": False, "updated_batch_seq": 3},
                   {c: version[c] for c in columns}]
    assert merge_history_rows(out, [closing, version], columns, inferred=False, type1=("email",)) == out  # a replay
    # A later batch with the same e-mail closes the open version and leaves the others as they are.
    later = {**closing, "valid_from": 11, "updated_batch_seq": 4}
    newest = {"_kind": VERSION, **dict(zip(columns, (1, 13, "a3", 11, None, True, 4)))}
    again = merge_history_rows(out, [later, newest], columns, inferred=False, type1=("email",))
    assert again[:2] == out[:2] and again[2] == {**out[2], "valid_to": 11, "is_current": False, "updated_batch_seq": 4}
