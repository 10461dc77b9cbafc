"""Debezium change events, written by hand in the shape Debezium's Postgres connector produces
(JSON converter, with and without the schema), mapped onto the worked example's entities."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from etl.core.cdc import check_change, check_input
from etl.core.model import load_model
from etl.core.records import Reject
from tests.helpers import ROOT

MODEL = load_model(ROOT / "examples" / "shop" / "kafka.toml")
CUSTOMER, PRODUCT = MODEL.entity("customer"), MODEL.entity("product")
CRM, ERP = CUSTOMER.input_of("crm"), PRODUCT.input_of("erp")

SOURCE = {"version": "2.7.3.Final", "connector": "postgresql", "name": "crm", "ts_ms": 1795341601500,
          "snapshot": "false", "db": "crm", "sequence": "[\"24023120\",\"24023928\"]", "schema": "public",
          "table": "customers", "txId": 771, "lsn": 24023928, "xmin": None}
ROW = {"id": 42, "full_name": "Ada", "email": "ada@example.org", "city": "Oslo", "birth_date": 3652, "vip": True,
       "credit_limit": "1200.50", "updated_at": 1795341601234567}


def event(op="u", before=None, after=ROW, source=SOURCE, **extra) -> bytes:
    return json.dumps({"before": before, "after": after, "source": source, "op": op, "ts_ms": 1795341601600,
                       "transaction": None, **extra}).encode()


def crm(value, spec=CRM):
    return check_change(value, "crm", 65536, ("crm", "shop"), CUSTOMER, spec)


def test_an_update_maps_after_through_the_fields_and_debeziums_encodings():
    u = crm(event())
    assert (u.source_id, u.natural_key, u.op) == ("crm", "42", "upsert")
    assert u.key == {"customer_id": 42}
    assert u.attributes == {
        "name": "Ada", "email": "ada@example.org", "city": "Oslo", "birth_date": date(1980, 1, 1), "vip": True,
        "credit_limit": Decimal("1200.50"), "updated_at": datetime(2026, 11, 22, 10, 0, 1, 234567, tzinfo=timezone.utc)}
    # The customer's versions are ordered by updated_at (its sequence), in microseconds.
    assert u.source_seq == 1795341601234567
    assert u.event_ts == datetime(2026, 11, 22, 10, 0, 1, 500000, tzinfo=timezone.utc)  # source.ts_ms
    assert u.arrival_ts is None  # the record's timestamp, set by the reader


@pytest.mark.parametrize("op", ["c", "r", "u"])
def test_inserts_snapshot_reads_and_updates_are_upserts_of_after(op):
    assert crm(event(op)).op == "upsert"


def test_a_delete_is_the_row_in_before_and_a_tombstone_is_no_update():
    u = crm(event("d", before=ROW, after=None))
    assert (u.op, u.natural_key, u.attributes["name"]) == ("delete", "42", "Ada")
    key_only = crm(event("d", before={"id": 42, "updated_at": 1795341601234567}, after=None))  # REPLICA IDENTITY DEFAULT
    assert (key_only.op, key_only.attributes["name"]) == ("delete", None)
    assert crm(None) is None


def test_an_envelope_with_its_schema_is_unwrapped():
    wrapped = json.dumps({"schema": {"type": "struct", "name": "crm.public.customers.Envelope"},
                          "payload": json.loads(event())}).encode()
    assert crm(wrapped) == crm(event())


def test_the_sequence_of_a_source_seq_entity_is_the_log_position():
    row = {"sku": "A-1", "region": "EU", "title": "Lamp", "price": "19.90", "stock": 3, "launched": 20000}
    u = check_change(event(after=row), "erp", 65536, ("erp",), PRODUCT, ERP)
    assert (u.natural_key, u.source_seq, u.attributes["price"]) == ('["A-1","EU"]', 24023928, Decimal("19.90"))
    assert u.attributes["launched"] == date(2024, 10, 4)


@pytest.mark.parametrize("value, reason", [
    (b"{not json", "malformed_json"),
    (b"[1, 2]", "not_an_object"),
    (b'{"op": "u", "op": "c"}', "duplicate_field"),
    (json.dumps({"after": ROW, "source": SOURCE}).encode(), "bad_envelope"),  # no op
    (event("c", after=None), "bad_envelope"),  # an insert without its row
    (event("d", before=None, after=None), "bad_envelope"),
    (event("t", after=None), "bad_op"),  # a truncate names no row
    (event("m", after=None), "bad_op"),
    (event(after={**ROW, "id": None}), "missing_natural_key"),
    (event(after={**ROW, "id": "forty-two"}), "bad_natural_key"),
    (event(after={**ROW, "updated_at": None}), "bad_source_seq"),
    (event(source={**SOURCE, "ts_ms": None}), "bad_event_ts"),
    (event(after={**ROW, "credit_limit": "AeI="}), "bad_attribute_type"),  # decimal.handling.mode=precise
    (event(after={**ROW, "vip": "yes"}), "bad_attribute_type"),
    (b"x" * 70000, "oversized_record"),
])
def test_each_bad_event_gets_its_reason(value, reason):
    with pytest.raises(Reject) as err:
        crm(value)
    assert err.value.reason == reason


def test_a_missing_log_position_is_a_bad_sequence():
    row = {"sku": "A-1", "region": "EU"}
    with pytest.raises(Reject, match="bad_source_seq"):
        check_change(event(after=row, source={**SOURCE, "lsn": None}), "erp", 65536, ("erp",), PRODUCT, ERP)


def test_a_lines_source_reads_the_projects_own_lines():
    line = {"source_id": "shop", "customer_id": 7, "op": "upsert", "event_ts": "2026-11-22T07:00:00Z",
            "attributes": {"updated_at": "2026-11-22T07:00:00Z"}}
    lines = load_model(ROOT / "examples" / "shop" / "model.toml").entity("customer")
    u = check_input(json.dumps(line).encode(), "shop", 65536, (), lines, lines.input_of("shop"))
    assert (u.natural_key, u.op) == ("7", "upsert")
