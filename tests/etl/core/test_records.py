"""The line rules (etl.core.records), without Spark: one reason per bad line, nothing merged, nothing
rounded. The same function runs on the executors during ingest (tests/etl/test_ingest.py)."""

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from etl.core.records import REJECT_REASONS, Reject, check_line, is_blank, printable, split_lines


def rec(**over) -> dict:
    r = {
        "source_id": "crm", "natural_key": "1", "op": "upsert", "source_seq": 5,
        "event_ts": "2026-11-22T01:00:01Z", "attributes": {"name": "A", "balance": "12.50"},
    }
    r.update(over)
    return r


def line(**over) -> bytes:
    return json.dumps(rec(**over)).encode()


def reason(raw: bytes, max_record_bytes: int = 65536, sources=()) -> str | None:
    try:
        check_line(raw, "crm", max_record_bytes, sources)
    except Reject as exc:
        return exc.reason
    return None


def attrs(**a) -> bytes:
    return line(attributes=a)


CASES = {
    # 1. exactly one JSON object per line
    "two objects on one line": (line() + line(), "trailing_content"),
    "an object then garbage": (line() + b" x", "trailing_content"),
    "an object, then a comma": (line() + b",", "trailing_content"),
    "a field twice": (b'{"source_id": "crm", "natural_key": "1", "natural_key": "2"}', "duplicate_field"),
    "a nested field twice": (line()[:-1] + b', "attributes": {"city": "a", "city": "b"}}', "duplicate_field"),
    "NaN is not JSON": (line()[:-1] + b', "x": NaN}', "malformed_json"),
    "nested past the parser's limit": (b"[" * 100_000 + b"]" * 100_000, "malformed_json"),
    "an integer past the digit limit": (line()[:-1] + b', "x": ' + b"9" * 5000 + b"}", "malformed_json"),
    "a JSON string, not an object": (b'"crm"', "not_an_object"),
    # 2. encoding
    "invalid UTF-8 in a key": (line()[:-1].replace(b'"1"', b'"k\xffx"') + b"}", "bad_encoding"),
    "Latin-1 text": ('{"source_id": "crm", "natural_key": "Müller"}'.encode("latin-1"), "bad_encoding"),
    "a lone surrogate escape": (line(natural_key="\ud800"), "bad_encoding"),
    "UTF-16": (json.dumps(rec()).encode("utf-16"), "bad_encoding"),
    # 3. types of every declared field
    "source_id a number": (line(source_id=7), "bad_source_id"),
    "source_id blank": (line(source_id="\u00a0"), "missing_source_id"),
    "natural_key an object": (line(natural_key={"id": 1}), "bad_natural_key"),
    "natural_key an array": (line(natural_key=["1"]), "bad_natural_key"),
    "natural_key a boolean": (line(natural_key=True), "bad_natural_key"),
    "natural_key a float": (line(natural_key=1.5), "bad_natural_key"),
    "natural_key null": (line(natural_key=None), "missing_natural_key"),
    "natural_key a tab": (line(natural_key="\t"), "missing_natural_key"),
    "natural_key a newline": (line(natural_key="\n"), "missing_natural_key"),
    "natural_key NBSP": (line(natural_key="\u00a0\u00a0"), "missing_natural_key"),
    "natural_key zero-width": (line(natural_key="\u200b\u200d\u2060\ufeff"), "missing_natural_key"),
    "natural_key ideographic space": (line(natural_key="\u3000"), "missing_natural_key"),
    "natural_key with a control character": (line(natural_key="a\x07b"), "bad_natural_key"),
    "natural_key too long": (line(natural_key="k" * 257), "oversized_natural_key"),
    "op upper case": (line(op="UPSERT"), "bad_op"),
    "op a list": (line(op=["upsert"]), "bad_op"),
    "source_seq a boolean": (line(source_seq=True), "bad_source_seq"),
    "source_seq a float": (line(source_seq=5.0), "bad_source_seq"),
    "source_seq negative": (line(source_seq=-1), "bad_source_seq"),
    "source_seq past bigint": (line(source_seq=2**63), "bad_source_seq"),
    "source_seq words": (line(source_seq="seven"), "bad_source_seq"),
    "event_ts a number": (line(event_ts=1764000000), "bad_event_ts"),
    "event_ts year 0": (line(event_ts="0000-01-01T00:00:00Z"), "bad_event_ts"),
    "event_ts year 10000": (line(event_ts="10000-01-01T00:00:00Z"), "bad_event_ts"),
    "event_ts before year 1 in UTC": (line(event_ts="0001-01-01T00:30:00+01:00"), "bad_event_ts"),
    "event_ts after 9999 in UTC": (line(event_ts="9999-12-31T23:30:00-01:00"), "bad_event_ts"),
    "arrival_ts words": (line(arrival_ts="soon"), "bad_arrival_ts"),
    "attributes a string": (line(attributes="A,a@x"), "bad_attributes"),
    "attributes an array": (line(attributes=["A"]), "bad_attributes"),
    "name a number": (attrs(name=5), "bad_attribute_type"),
    "city an object": (attrs(city={"x": 1}), "bad_attribute_type"),
    "balance a boolean": (attrs(balance=True), "bad_attribute_type"),
    "balance words": (attrs(balance="lots"), "bad_attribute_type"),
    "balance with an exponent as text": (attrs(balance="1e3"), "bad_attribute_type"),
    "balance rounded (number)": (b'{"source_id": "crm", "natural_key": "1", "op": "upsert", "source_seq": 5, '
                                 b'"event_ts": "2026-11-22T01:00:01Z", "attributes": {"balance": 12.345}}', "bad_attribute_value"),
    "balance rounded (text)": (attrs(balance="12.345"), "bad_attribute_value"),
    "balance past decimal(18,2)": (attrs(balance="12345678901234567"), "bad_attribute_value"),
    "balance with a huge exponent": (line()[:-1].replace(b'"12.50"', b"1e999999") + b"}", "bad_attribute_value"),
    "a NUL in a name": (attrs(name="a\u0000b"), "bad_attribute_value"),
    "U+0001 in a city": (attrs(city="a\u0001b"), "bad_attribute_value"),
    # the size limit comes first
    "oversized": (line(pad="x" * 100), "oversized_record"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_bad_line_gets_its_reason(name):
    raw, want = CASES[name]
    assert want in REJECT_REASONS
    assert reason(raw, max_record_bytes=200 if name == "oversized" else 1 << 20) == want


FIELD_OF_REASON = {  # the field of the line a reason is about (rejected_updates.reason_detail); absent: the whole line
    "bad_source_id": "source_id", "missing_source_id": "source_id", "bad_natural_key": "natural_key",
    "missing_natural_key": "natural_key", "oversized_natural_key": "natural_key", "bad_op": "op",
    "bad_source_seq": "source_seq", "bad_event_ts": "event_ts", "bad_arrival_ts": "arrival_ts", "bad_attributes": "attributes",
}
ATTRIBUTE_OF_CASE = {"name a number": "name", "city an object": "city", "a NUL in a name": "name", "U+0001 in a city": "city"}


@pytest.mark.parametrize("name", list(CASES))
def test_each_bad_line_names_the_field_its_reason_is_about(name):
    """Where, not only why (issue 45): with ten attributes, ``bad_attribute_type`` alone had the user
    re-read raw_line by hand."""
    raw, want = CASES[name]
    with pytest.raises(Reject) as err:
        check_line(raw, "crm", 200 if name == "oversized" else 1 << 20)
    if want in ("bad_attribute_type", "bad_attribute_value"):
        expected = f"attributes.{ATTRIBUTE_OF_CASE.get(name, 'balance')}"
    elif want == "duplicate_field":
        expected = "natural_key" if name == "a field twice" else "city"
    elif want == "bad_encoding" and name in ("invalid UTF-8 in a key", "a lone surrogate escape"):
        expected = "natural_key" if name == "a lone surrogate escape" else None  # invalid bytes fail the whole line's decoding
    else:
        expected = FIELD_OF_REASON.get(want)
    assert err.value.field == expected


def test_every_reason_is_exercised():
    # missing_reference is a fact's (test_a_fact_line_needs_its_references), bad_envelope a change event's (test_cdc.py)
    assert {want for _, want in CASES.values()} | {"source_mismatch", "unknown_source", "missing_reference", "bad_envelope"} == set(REJECT_REASONS)


def test_the_source_must_match_the_path_and_the_list():
    assert reason(line(source_id="web")) == "source_mismatch"
    assert reason(line(), sources=("web",)) == "unknown_source"


def test_a_good_line_is_typed_exactly():
    u = check_line(line(arrival_ts="2026-11-22T02:00:01+01:00", attributes={"name": " A ", "balance": 12.5}), "crm", 65536)
    assert (u.natural_key, u.attributes["name"], u.attributes["balance"], u.source_seq) == ("1", " A ", Decimal("12.50"), 5)
    assert u.event_ts == datetime(2026, 11, 22, 1, 0, 1, tzinfo=timezone.utc)
    assert u.arrival_ts == datetime(2026, 11, 22, 1, 0, 1, tzinfo=timezone.utc)
    assert check_line(line(arrival_ts=None, attributes=None), "crm", 65536).arrival_ts is None


def test_keys_are_never_trimmed_normalised_or_merged():
    keys = [" 1", "1 ", "1", "\u00e9", "e\u0301", "\U0001f600", "K", "k"]
    got = [check_line(line(natural_key=k), "crm", 65536).natural_key for k in keys]
    assert got == keys and len(set(got)) == len(keys)
    assert check_line(line(natural_key=42), "crm", 65536).natural_key == "42"  # the one documented conversion
    assert check_line(line(natural_key="k\u00ffx"), "crm", 65536).natural_key != check_line(
        line(natural_key="k\u00fex"), "crm", 65536).natural_key


def test_whitespace_and_invisible_characters_are_blank():
    assert all(is_blank(t) for t in ("", " ", "\t\n\r", "\u00a0", "\u2028", "\u200b", "\ufeff", "\u180e"))
    assert not any(is_blank(t) for t in ("a", " a ", "\u00e9", "0"))


def test_lines_of_a_file_bom_crlf_blank_and_a_cut_last_line():
    content = b"\xef\xbb\xbf" + line() + b"\r\n\r\n \t\n" + line(natural_key="2") + b"\n" + b'{"cut'
    got = list(split_lines(content))
    assert [n for n, _ in got] == [1, 2, 3, 4, 5]
    assert [b is None for _, b in got] == [False, True, True, False, False]
    assert reason(got[0][1]) is None  # the BOM is not part of the first record
    assert reason(got[4][1]) == "malformed_json"
    assert list(split_lines(b"")) == [] and list(split_lines(b"\n")) == [(1, None)]
    assert reason(b"\xef\xbb\xbf" + line()) == "malformed_json"  # a BOM inside a file is not skipped


def test_rejected_lines_are_shown_without_losing_bytes():
    assert printable(b'{"k": "\xff"}', 100) == '{"k": "\\xff"}'
    assert printable(b"abcdef", 3) == "abc"


def test_a_stream_is_read_line_by_line_as_the_bytes_are_split():
    """read_lines (what ingest runs over a file) agrees with split_lines, holds at most one line of
    the limit, and cuts a line that never ends instead of reading it into memory."""
    import hashlib
    import io
    import random

    from etl.core.records import read_lines

    rng = random.Random(5)
    for _ in range(300):
        parts = [rng.choice([b"", b" ", b"\r", b"\xef\xbb\xbf", b'{"a": 1}', b"x" * rng.randrange(0, 40), b"\xff"])
                 for _ in range(rng.randrange(0, 8))]
        content = rng.choice([b"", b"\xef\xbb\xbf"]) + rng.choice([b"\n", b"\r\n"]).join(parts) + rng.choice([b"", b"\n"])
        digest = hashlib.sha256()
        got = [(n, line) for n, line, _ in read_lines(io.BytesIO(content), 64, digest.update)]
        assert got == list(split_lines(content)), content
        assert digest.hexdigest() == hashlib.sha256(content).hexdigest()

    huge = b'{"k": "' + b"x" * 5_000_000 + b'"}\nnext\n'
    got = list(read_lines(io.BytesIO(huge), 100))
    assert [(n, len(line), over) for n, line, over in got] == [(1, 100, True), (2, 4, False)]


# ----------------------------------------------------------------------------- declared entities

from datetime import date  # noqa: E402

from etl.core.model import parse_model  # noqa: E402

ENTITY = parse_model("""
[entities.product]
key = { sku = "string", region = "integer" }
attributes = { price = "decimal(6,2)", launched = "date", active = "boolean", stock = "integer", seen = "timestamp", title = "string" }
sequence = "seen"
""").entity()


def product(**over) -> dict:
    r = {"source_id": "erp", "sku": "A-1", "region": 7, "op": "upsert", "event_ts": "2026-11-22T01:00:01Z",
         "attributes": {"price": "9.50", "launched": "2026-01-31", "active": True, "stock": 3,
                        "seen": "2026-11-22T01:00:00.000005Z", "title": "Pen"}}
    r.update(over)
    return r


def product_reason(rec: dict) -> str | None:
    try:
        check_line(json.dumps(rec).encode(), "erp", 65536, (), ENTITY)
    except Reject as exc:
        return exc.reason
    return None


def test_a_declared_entity_s_line_is_typed_by_its_model():
    u = check_line(json.dumps(product()).encode(), "erp", 65536, (), ENTITY)
    assert u.natural_key == '["A-1","7"]' and u.key == {"sku": "A-1", "region": 7}
    assert u.attributes == {"price": Decimal("9.50"), "launched": date(2026, 1, 31), "active": True, "stock": 3,
                            "seen": datetime(2026, 11, 22, 1, 0, 0, 5, tzinfo=timezone.utc), "title": "Pen"}
    assert u.source_seq == 1795309200000005  # the sequence attribute, in microseconds since 1970
    assert u.columns() == {"sku": "A-1", "region": 7, **u.attributes}
    # Integer key parts are one key however they are written; the encoding keeps parts apart.
    assert check_line(json.dumps(product(region="7")).encode(), "erp", 65536, (), ENTITY).natural_key == u.natural_key
    assert check_line(json.dumps(product(sku="A-1\",\"7")).encode(), "erp", 65536, (), ENTITY).natural_key != u.natural_key
    # Missing attributes are null; an undeclared field is ignored.
    v = check_line(json.dumps(product(attributes={"seen": "2026-11-22T01:00:00Z"}, colour="red")).encode(), "erp", 65536, (), ENTITY)
    assert v.attributes["price"] is None and v.attributes["title"] is None


ENTITY_CASES = {
    "a key part missing": (dict(region=None), "missing_natural_key"),
    "a key part blank": (dict(sku=" "), "missing_natural_key"),
    "an integer key part as text": (dict(region="seven"), "bad_natural_key"),
    "an integer key part as a float": (dict(region=7.5), "bad_natural_key"),
    "an integer key part as a boolean": (dict(region=True), "bad_natural_key"),
    "an integer key part past 64 bits": (dict(region=2**63), "bad_natural_key"),
    "an integer key part past 64 bits as text": (dict(region="9223372036854775808"), "bad_natural_key"),
    "an integer key part of 25 digits": (dict(region="1234567890123456789012345"), "bad_natural_key"),
    # The sequence is an attribute here: attributes that are no object are that, not a missing sequence.
    "attributes not an object": (dict(attributes="Pen"), "bad_attributes"),
    "attributes an array, the event time bad too": (dict(attributes=["Pen"], event_ts="now"), "bad_attributes"),
    "the sequence attribute missing": (dict(attributes={"price": "1.00"}), "bad_source_seq"),
    "the sequence attribute not a time": (dict(attributes={"seen": "soon"}), "bad_source_seq"),
    "the sequence attribute before 1970": (dict(attributes={"seen": "1969-12-31T23:59:59Z"}), "bad_source_seq"),
    "a decimal past its precision": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "price": "10000.00"}), "bad_attribute_value"),
    "a decimal past its scale": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "price": "1.005"}), "bad_attribute_value"),
    "a date not YYYY-MM-DD": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "launched": "31/01/2026"}), "bad_attribute_type"),
    "a date that does not exist": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "launched": "2026-02-30"}), "bad_attribute_type"),
    "a boolean as 1": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "active": 1}), "bad_attribute_type"),
    "an integer as text that is not one": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "stock": "3.5"}), "bad_attribute_type"),
    "an integer past 64 bits": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "stock": -(2**63) - 1}), "bad_attribute_value"),
    "an integer past 64 bits as text": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "stock": "9223372036854775808"}), "bad_attribute_value"),
    "an integer of 25 digits as text": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "stock": "1234567890123456789012345"}), "bad_attribute_value"),
    "the first bad attribute gives its reason": (
        dict(attributes={"seen": "2026-11-22T01:00:00Z", "price": "1.005", "launched": "31/01/2026"}), "bad_attribute_value"),
    "a string as a number": (dict(attributes={"seen": "2026-11-22T01:00:00Z", "title": 5}), "bad_attribute_type"),
    "a timestamp not ISO": (dict(event_ts="now"), "bad_event_ts"),
}


@pytest.mark.parametrize("case", sorted(ENTITY_CASES))
def test_a_declared_entity_s_bad_line_gets_one_reason(case):
    over, expected = ENTITY_CASES[case]
    assert product_reason(product(**over)) == expected


def test_an_integer_as_text_may_have_leading_zeros():
    u = check_line(json.dumps(product(region="0000000000000000000000007", attributes={"seen": "2026-11-22T01:00:00Z", "stock": "-0042"})).encode(),
                   "erp", 65536, (), ENTITY)
    assert (u.key["region"], u.natural_key, u.attributes["stock"]) == (7, '["A-1","7"]', -42)


DATED = parse_model("""
[entities.shift]
key = { day = "date", shop = "string" }
attributes = { opened = "date" }
""").entity()


@pytest.mark.parametrize("day, opened, expected", [
    ("2027-02-28", "2027-02-28", None),
    ("2027-02-30", "2027-02-28", "bad_natural_key"),  # a date the calendar does not have, as a key part
    ("2027-02-28", "2027-02-30", "bad_attribute_type"),  # and as an attribute: the type's fault, as "30/02/2027" is
    ("2027-2-28", "2027-02-28", "bad_natural_key"),
])
def test_a_date_the_calendar_does_not_have(day, opened, expected):
    rec = {"source_id": "erp", "day": day, "shop": "Oslo", "op": "upsert", "source_seq": 1,
           "event_ts": "2026-11-22T01:00:01Z", "attributes": {"opened": opened}}
    try:
        u = check_line(json.dumps(rec).encode(), "erp", 65536, (), DATED)
    except Reject as exc:
        assert exc.reason == expected
    else:
        assert expected is None and u.natural_key == '["2027-02-28","Oslo"]'


FACT = parse_model("""
[entities.product]
key = { sku = "string", region = "integer" }
[entities.orders]
kind = "fact"
key = { order_id = "integer" }
attributes = { sku = "string", region = "integer", quantity = "integer" }
references = { product_sk = { dimension = "product", by = ["sku", "region"] } }
""").entity("orders")


@pytest.mark.parametrize("attributes, expected", [
    ({"sku": "A-1", "region": 7, "quantity": 2}, None),
    ({"sku": "A-1", "region": "7", "quantity": None}, None),  # the quantity is no reference
    ({"region": 7}, "missing_reference"),
    ({"sku": None, "region": 7}, "missing_reference"),
    ({"sku": "  ", "region": 7}, "missing_reference"),  # blank: never a key of the dimension
    ({"sku": "A" * 257, "region": 7}, "missing_reference"),  # longer than a key may be
    ({"sku": "A\u0001", "region": 7}, "bad_attribute_value"),  # a control character: the attribute's rule says so first
    ({"sku": "A-1", "region": "seven"}, "bad_attribute_type"),  # the attribute's own type comes first
])
def test_a_fact_line_needs_its_references(attributes, expected):
    rec = {"source_id": "shop", "order_id": 1, "op": "upsert", "source_seq": 1, "event_ts": "2026-11-22T01:00:01Z",
           "attributes": attributes}
    try:
        u = check_line(json.dumps(rec).encode(), "shop", 65536, (), FACT)
    except Reject as exc:
        assert exc.reason == expected
    else:
        assert expected is None and u.columns()["sku"] == "A-1"


def test_a_fact_s_delete_repeats_its_references():
    """A delete is a line like any other: without the columns its references join by it is rejected."""
    rec = {"source_id": "shop", "order_id": 1, "op": "delete", "source_seq": 2, "event_ts": "2026-11-22T01:00:02Z"}
    with pytest.raises(Reject, match="missing_reference"):
        check_line(json.dumps(rec).encode(), "shop", 65536, (), FACT)
    u = check_line(json.dumps({**rec, "attributes": {"sku": "A-1", "region": 7}}).encode(), "shop", 65536, (), FACT)
    assert (u.op, u.columns()) == ("delete", {"order_id": 1, "sku": "A-1", "region": 7, "quantity": None})


def test_a_field_named_twice_is_named_as_text_any_table_holds_and_cut():
    """The name comes from the line: a lone surrogate escape cannot go into Arrow or a table
    (it failed the ingest's Spark task), and a name may be any length."""
    for raw, named in ((b'{"\\ud800": 1, "\\ud800": 2}', "\\ud800"), (('{"%s": 1, "%s": 2}' % ("k" * 500, "k" * 500)).encode(), "k" * 64)):
        with pytest.raises(Reject) as err:
            check_line(raw, "crm", 1 << 20)
        assert (err.value.reason, err.value.field) == ("duplicate_field", named)
        err.value.field.encode("utf-8")
