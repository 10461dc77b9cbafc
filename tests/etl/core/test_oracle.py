from datetime import date, datetime
from decimal import Decimal

from etl.core.model import parse_model
from etl.core.oracle import KeyState, decide, entity_rows, inferred_rows, key_text, reference_key


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


def test_an_append_only_fact_keeps_its_first_content():
    updates = [u("a", "1", 1, "h1", 1), u("b", "1", 2, "h2", 2), u("c", "1", 2, "h2", 3), u("d", "1", 3, "h1", 4)]
    decisions, state = decide(updates, append_only=True)
    assert [(d.outcome, d.reason) for d in decisions] == [
        ("new", None), ("duplicate", "same_event"), ("duplicate", "redelivered"), ("duplicate", "unchanged_content")]
    assert state[("crm", "1")] == KeyState(1, 3, "h1")


MODEL = parse_model("""
[entities.product]
key = { sku = "string", region = "date" }
[entities.orders]
kind = "fact"
key = { id = "integer" }
attributes = { sku = "string", region = "date", p = "decimal(4,2)", b = "boolean" }
references = { product_sk = { dimension = "product", by = ["sku", "region"], source = "erp" } }
""")


def test_a_fact_names_its_dimension_s_key_as_the_line_rules_encode_it():
    assert [key_text(v) for v in (7, "x", Decimal("1.50"), date(2026, 1, 2), True)] == ["7", "x", "1.50", "2026-01-02", "true"]
    orders, product = MODEL.entity("orders"), MODEL.entity("product")
    fact = {"update_id": "f1", "source_id": "shop", "sku": "A", "region": date(2026, 1, 2), "arrival_ts": 5, "event_ts": 4}
    assert reference_key(fact, orders.references[0]) == ("erp", '["A","2026-01-02"]')
    later = {**fact, "update_id": "f2", "arrival_ts": 9, "event_ts": 1}
    known = {**fact, "update_id": "f3", "sku": "B"}
    rows = inferred_rows({orders: [later, fact, known]}, product, {("erp", '["B","2026-01-02"]')}, "history")
    # one member per unknown key, with the first naming fact's times, and its key columns
    assert rows == [{"source_id": "erp", "natural_key": '["A","2026-01-02"]', "sku": "A", "region": date(2026, 1, 2),
                     "is_deleted": False, "is_inferred": True, "row_hash": "", "event_ts": 4, "arrival_ts": 5,
                     "source_seq": -1, "valid_from": 4, "valid_to": None, "is_current": True}]


def test_a_late_event_time_leaves_its_predecessor_valid_for_no_time():
    """Versions go by sequence. One whose event time is not after its predecessor's start starts
    where the predecessor started; the predecessor keeps an empty interval [s, s), not the late one."""
    t = [datetime(2026, 11, 22, 1, m) for m in range(10)]

    def v(uid, seq, event, name):
        return {"update_id": uid, "source_id": "crm", "natural_key": "1", "source_seq": seq, "row_hash": name,
                "arrival_ts": t[seq], "event_ts": t[event], "op": "upsert", "name": name}

    updates = [v("a", 1, 5, "A"), v("b", 2, 2, "B"), v("c", 3, 5, "C"), v("d", 4, 8, "D")]
    decisions, _ = decide(updates)
    history = entity_rows(updates, decisions, ("name",), "history")
    assert [(r["name"], r["valid_from"], r["valid_to"]) for r in history] == [
        ("A", t[5], t[5]),  # B's event time (1:02) is earlier: A is valid for no time
        ("B", t[5], t[5]),  # C's (1:05) is not later than B's start: so is B
        ("C", t[5], t[8]),  # the late versions' successor holds from their start
        ("D", t[8], None),
    ]


def test_the_current_row_has_the_applied_sequence_and_key_map_the_highest_seen():
    """``<entity>_current.last_source_seq`` is the sequence of the version it holds; ``key_map``'s
    is the highest seen, which an unchanged-content duplicate advances (a stale line does not)."""
    updates = [{**u("a", "1", 10, "h1", 1), "event_ts": 1, "op": "upsert", "name": "A"},
               {**u("b", "1", 12, "h1", 2), "event_ts": 2, "op": "upsert", "name": "A"},
               {**u("c", "1", 11, "h2", 3), "event_ts": 3, "op": "upsert", "name": "old"}]
    decisions, state = decide(updates)
    assert [(d.outcome, d.reason) for d in decisions] == [("new", None), ("duplicate", "unchanged_content"), ("stale", "stale")]
    [current] = entity_rows(updates, decisions, ("name",), "current")
    assert (current["last_source_seq"], state[("crm", "1")].last_source_seq) == (10, 12)


def test_a_stale_or_duplicate_fact_line_still_names_inferred_members():
    """A fact line's references are resolved before its own outcome is decided: the keys a stale or
    re-delivered line names become inferred members all the same."""
    orders, product = MODEL.entity("orders"), MODEL.entity("product")
    day = date(2026, 1, 2)
    first = {"update_id": "f1", "source_id": "shop", "natural_key": "1", "id": 1, "sku": "A", "region": day,
             "source_seq": 5, "row_hash": "h", "arrival_ts": 1, "event_ts": 1}
    stale = {**first, "update_id": "f2", "sku": "B", "source_seq": 4, "row_hash": "h2", "arrival_ts": 2}
    again = {**first, "update_id": "f3", "sku": "C", "arrival_ts": 3}
    decisions, _ = decide([first, stale, again])
    assert [d.outcome for d in decisions] == ["new", "stale", "duplicate"]
    rows = inferred_rows({orders: [first, stale, again]}, product, set(), "current")
    assert sorted(r["sku"] for r in rows) == ["A", "B", "C"]


def test_an_update_at_the_last_position_with_other_content_is_a_conflict_not_a_redelivery():
    """Two changes of one row under one log position (Oracle: one SCN in one transaction): the
    second is not applied, and it is said, never passed off as the first delivered again."""
    updates = [u("a", "1", 10, "h1", 1), u("b", "1", 10, "h1", 2), u("c", "1", 10, "h2", 3)]
    decisions, state = decide(updates)
    assert [(d.outcome, d.reason) for d in decisions] == [
        ("new", None), ("duplicate", "redelivered"), ("duplicate", "sequence_conflict")]
    assert state[("crm", "1")] == KeyState(1, 10, "h1")


def test_type1_columns_make_no_version_and_hold_the_last_upsert_s_values_on_every_version():
    """A history entity with ``type1 = ["email"]``: an applied update whose version hash (the row
    hash's first digest) equals its predecessor's changes only type1 columns and makes no version;
    every version holds the e-mail of the key's last upsert, a later delete's version too."""
    t = [datetime(2026, 11, 22, 1, m) for m in range(10)]

    def v(uid, seq, name, email, op="upsert"):
        digest = ("D" if op == "delete" else name).ljust(64, "-") + email.ljust(64, "-")
        return {"update_id": uid, "source_id": "crm", "natural_key": "1", "source_seq": seq, "row_hash": digest,
                "arrival_ts": t[seq], "event_ts": t[seq], "op": op, "name": name, "email": email}

    updates = [v("a", 1, "Ann", "a@old"), v("b", 2, "Ann", "a@new"), v("c", 3, "Anne", "a@new"),
               v("d", 4, "Anne", "a@newest"), v("e", 5, "Anne", "gone@x", op="delete")]
    decisions, _ = decide(updates)
    assert [d.outcome for d in decisions] == ["new", "matched", "matched", "matched", "matched"]
    history = entity_rows(updates, decisions, ("name", "email"), "history", type1=("email",))
    assert [(r["name"], r["email"], r["source_seq"], r["valid_from"], r["valid_to"]) for r in history] == [
        ("Ann", "a@newest", 1, t[1], t[3]),  # b changed the e-mail only: no version
        ("Anne", "a@newest", 3, t[3], t[5]),  # d neither
        ("Anne", "a@newest", 5, t[5], None),  # the delete keeps the last upsert's e-mail
    ]
    without = entity_rows(updates, decisions, ("name", "email"), "history")
    assert [r["source_seq"] for r in without] == [1, 2, 3, 4, 5]  # no type1: every applied update is a version


def test_type1_values_of_keys_seen_only_as_deletes_and_of_several_keys_apart():
    """A key seen only as deletes keeps its first line's type1 values on every version (no upsert
    gave any); two deletes with the same other content are one version; each key's values are
    its own."""
    t = [datetime(2026, 11, 22, 1, m) for m in range(10)]

    def v(uid, key, seq, name, email, op):
        digest = ("D" if op == "delete" else name).ljust(64, "-") + (email or "").ljust(64, "-")
        return {"update_id": uid, "source_id": "crm", "natural_key": key, "source_seq": seq, "row_hash": digest,
                "arrival_ts": t[seq], "event_ts": t[seq], "op": op, "name": name, "email": email}

    updates = [v("a", "1", 1, None, "first@x", "delete"), v("b", "2", 2, "Bo", "b@1", "upsert"),
               v("c", "1", 3, None, "second@x", "delete"), v("d", "2", 4, "Bo", "b@2", "upsert")]
    decisions, _ = decide(updates)
    assert [d.outcome for d in decisions] == ["new", "new", "matched", "matched"]
    rows = entity_rows(updates, decisions, ("name", "email"), "history", type1=("email",))
    assert sorted((r["natural_key"], r["source_seq"], r["email"], r["is_current"]) for r in rows) == [
        ("1", 1, "first@x", True),  # the second delete changed the e-mail only: no version
        ("2", 2, "b@2", True),
    ]
