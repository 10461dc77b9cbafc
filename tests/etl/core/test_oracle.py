from datetime import datetime

from etl.core.oracle import KeyState, decide, entity_rows


def u(uid, key, seq, digest, t, source="crm"):
    return {"update_id": uid, "source_id": source, "natural_key": key, "source_seq": seq, "row_hash": digest, "arrival_ts": t}


def test_each_outcome_once():
    updates = [
        u("a", "1", 10, "h1", 1),  # new
        u("b", "1", 11, "h2", 2),  # matched
        u("c", "1", 11, "h2", 3),  # re-delivered
        u("d", "1", 12, "h2", 4),  # unchanged content
        u("e", "1", 9, "h9", 5),  # stale
        u("f", "2", 5, "x", 6),  # new
    ]
    decisions, state = decide(updates)
    assert [(d.update_id, d.outcome, d.reason, d.surrogate_key) for d in decisions] == [
        ("a", "new", None, 1),
        ("b", "matched", None, 1),
        ("c", "duplicate", "redelivered", 1),
        ("d", "duplicate", "unchanged_content", 1),
        ("e", "stale", "stale", 1),
        ("f", "new", None, 2),
    ]
    assert state[("crm", "1")] == KeyState(1, 12, "h2")


def test_known_keys_keep_their_surrogate_key_and_sources_are_separate():
    known = {("crm", "7"): KeyState(41, 100, "old")}
    decisions, _ = decide([u("a", "7", 101, "new", 1), u("b", "7", 5, "x", 2, source="web")], known, next_key=42)
    assert [(d.outcome, d.surrogate_key) for d in decisions] == [("matched", 41), ("new", 42)]
    assert known[("crm", "7")].last_source_seq == 100  # the input is not modified


def test_entity_rows_give_the_current_row_or_the_versions_with_their_validity():
    t = [datetime(2026, 11, 22, 1, 0, s) for s in range(6)]

    def u(uid, seq, event, arrival, name, op="upsert", h=None):
        return {"update_id": uid, "source_id": "crm", "natural_key": "1", "source_seq": seq, "row_hash": h or name,
                "arrival_ts": t[arrival], "event_ts": t[event], "op": op, "name": name}

    updates = [u("a", 10, 2, 0, "A"), u("b", 11, 1, 1, "B"), u("c", 9, 3, 2, "old"), u("d", 12, 4, 3, "B", h="B"),
               u("e", 13, 5, 4, None, op="delete")]
    decisions, _ = decide(updates)
    assert [d.outcome for d in decisions] == ["new", "matched", "stale", "duplicate", "matched"]
    [current] = entity_rows(updates, decisions, ("name",), "current")
    assert (current["name"], current["is_deleted"], current["last_source_seq"]) == (None, True, 13)
    history = entity_rows(updates, decisions, ("name",), "history")
    assert [(r["name"], r["source_seq"], r["valid_from"], r["valid_to"], r["is_current"]) for r in history] == [
        ("A", 10, t[2], t[2], False),  # B's event time is earlier: B starts where A did
        ("B", 11, t[2], t[5], False),
        (None, 13, t[5], None, True),  # the delete is the open version
    ]
