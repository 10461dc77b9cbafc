from etl.core.oracle import KeyState, decide


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
