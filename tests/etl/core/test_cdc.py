"""Debezium change events, written by hand in the shapes Debezium's connectors produce (JSON
converter, with and without the schema; Postgres, MySQL, SQL Server and Oracle ``source`` blocks
as their documentation shows them, decimals in the default ``decimal.handling.mode=precise``),
mapped onto the worked example's entities and onto a test model of accounts."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from etl.core.cdc import check_change, check_input
from etl.core.model import load_model, parse_model
from etl.core.oracle import decide, entity_rows
from etl.core.records import Reject
from etl.devtools.cdc import records_of
from tests.helpers import ROOT

MODEL = load_model(ROOT / "examples" / "shop" / "kafka.toml")
CUSTOMER, PRODUCT = MODEL.entity("customer"), MODEL.entity("product")
CRM, ERP = CUSTOMER.input_of("crm"), PRODUCT.input_of("erp")

SOURCE = {"version": "2.7.3.Final", "connector": "postgresql", "name": "crm", "ts_ms": 1795341601500,
          "snapshot": "false", "db": "crm", "sequence": "[\"24023120\",\"24023928\"]", "schema": "public",
          "table": "customers", "txId": 771, "lsn": 24023928, "xmin": None}
# credit_limit NUMERIC(12,2) = 1200.50: base64 of the unscaled 120050's bytes (01 d4 f2).
ROW = {"id": 42, "full_name": "Ada", "email": "ada@example.org", "city": "Oslo", "birth_date": 3652, "vip": True,
       "credit_limit": "AdTy", "updated_at": 1795341601234567}


def event(op="u", before=None, after=ROW, source=SOURCE, **extra) -> bytes:
    return json.dumps({"before": before, "after": after, "source": source, "op": op, "ts_ms": 1795341601600,
                       "transaction": None, **extra}).encode()


def crm(value, spec=CRM):
    return check_change(value, "crm", 65536, ("crm", "shop"), CUSTOMER, spec)


def reason(thunk) -> str:
    with pytest.raises(Reject) as err:
        thunk()
    return err.value.reason


def test_an_update_maps_after_through_the_fields_and_debeziums_encodings():
    u = crm(event())
    assert (u.source_id, u.natural_key, u.op) == ("crm", "42", "upsert")
    assert u.key == {"customer_id": 42}
    assert u.attributes == {
        "name": "Ada", "email": "ada@example.org", "city": "Oslo", "birth_date": date(1980, 1, 1), "vip": True,
        "credit_limit": Decimal("1200.50"), "updated_at": datetime(2026, 11, 22, 10, 0, 1, 234567, tzinfo=timezone.utc)}
    assert u.source_seq == 24023928  # the change's position in the source's log (source.lsn)
    assert u.event_ts == datetime(2026, 11, 22, 10, 0, 1, 500000, tzinfo=timezone.utc)  # source.ts_ms
    assert u.arrival_ts is None  # the record's timestamp, set by the reader


@pytest.mark.parametrize("op", ["c", "r", "u"])
def test_inserts_snapshot_reads_and_updates_are_upserts_of_after(op):
    assert crm(event(op)).op == "upsert"


def test_a_delete_is_the_row_in_before_whole_or_its_key_alone_and_a_tombstone_is_no_update():
    deleted = {**SOURCE, "lsn": 24024100}
    u = crm(event("d", before=ROW, after=None, source=deleted))  # REPLICA IDENTITY FULL: the row as it was
    assert (u.op, u.natural_key, u.attributes["name"], u.source_seq) == ("delete", "42", "Ada", 24024100)
    key_only = crm(event("d", before={"id": 42}, after=None, source=deleted))  # REPLICA IDENTITY DEFAULT
    assert (key_only.op, key_only.natural_key, key_only.attributes["name"]) == ("delete", "42", None)
    assert key_only.source_seq == 24024100  # its own position, not the deleted version's
    assert crm(None) is None


def test_an_envelope_with_its_schema_is_unwrapped():
    wrapped = json.dumps({"schema": {"type": "struct", "name": "crm.public.customers.Envelope"},
                          "payload": json.loads(event())}).encode()
    assert crm(wrapped) == crm(event())


def test_the_sequence_of_a_source_seq_entity_is_the_log_position():
    row = {"sku": "A-1", "region": "EU", "title": "Lamp", "price": "B8Y=", "stock": 3, "launched": 20000}
    u = check_change(event(after=row), "erp", 65536, ("erp",), PRODUCT, ERP)
    assert (u.natural_key, u.source_seq, u.attributes["price"]) == ('["A-1","EU"]', 24023928, Decimal("19.90"))
    assert u.attributes["launched"] == date(2024, 10, 4)


@pytest.mark.parametrize("value, reason, field", [
    (b"{not json", "malformed_json", None),
    (b"[1, 2]", "not_an_object", None),
    (b'{"op": "u", "op": "c"}', "duplicate_field", "op"),
    (json.dumps({"after": ROW, "source": SOURCE}).encode(), "bad_envelope", "op"),  # no op
    (event("c", after=None), "bad_envelope", "after"),  # an insert without its row
    (event("d", before=None, after=None), "bad_envelope", "before"),
    (event("t", after=None), "bad_op", "op"),  # a truncate names no row
    (event("m", after=None), "bad_op", "op"),
    (event(after={**ROW, "id": None}), "missing_natural_key", "after.id"),
    (event(after={**ROW, "id": "forty-two"}), "bad_natural_key", "after.id"),
    (event(source={**SOURCE, "lsn": None}), "bad_source_seq", "source.lsn"),
    (event(source={**SOURCE, "lsn": -1}), "bad_source_seq", "source.lsn"),
    (event(source={**SOURCE, "lsn": 2**63}), "bad_source_seq", "source.lsn"),  # past the 63 bits a sequence is stored in
    (event(source={**SOURCE, "ts_ms": None}), "bad_event_ts", "source.ts_ms"),
    (event(after={**ROW, "credit_limit": "1200.50"}), "bad_attribute_type", "after.credit_limit"),  # string mode's text, precise declared
    (event(after={**ROW, "vip": "yes"}), "bad_attribute_type", "after.vip"),
    (event(after={**ROW, "full_name": 7}), "bad_attribute_type", "after.full_name"),  # the column name, from the event's field
    (json.dumps({"schema": {"type": "struct"}, "payload": json.loads(event(after={**ROW, "vip": "yes"}))}).encode(),
     "bad_attribute_type", "payload.after.vip"),
    (b"x" * 70000, "oversized_record", None),
])
def test_each_bad_event_gets_its_reason_and_the_event_s_field(value, reason, field):
    """``reason_detail`` names the change event's own field (issue 45): what the user finds in raw_line."""
    with pytest.raises(Reject) as err:
        crm(value)
    assert (err.value.reason, err.value.field) == (reason, field)


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


# ------------------------------------------------------------------ each connector's own sequence

ACCOUNTS = parse_model("""
[entities.account]
key = { id = "integer" }
attributes = { owner = "string", balance = "decimal(12,2)", opened = "timestamp" }

[entities.account.inputs.pg]
format = "debezium"

[entities.account.inputs.my]
format = "debezium"
connector = "mysql"

[entities.account.inputs.ms]
format = "debezium"
connector = "sqlserver"

[entities.account.inputs.ora]
format = "debezium"
connector = "oracle"
fields = { id = "ID", owner = "OWNER", balance = "BALANCE", opened = "OPENED" }

[entities.account.inputs.pg_ms]
format = "debezium"
timestamp_unit = "ms"

[entities.account.inputs.pg_ns]
format = "debezium"
timestamp_unit = "ns"

[entities.account.inputs.pg_string]
format = "debezium"
decimal_handling = "string"

[entities.account.inputs.pg_double]
format = "debezium"
decimal_handling = "double"

[entities.band]
key = { floor = "decimal(9,2)" }
attributes = { label = "string" }

[entities.band.inputs.pg]
format = "debezium"

[entities.band.inputs.pg_string]
format = "debezium"
decimal_handling = "string"
""", "accounts.toml")
ACCOUNT, BAND = ACCOUNTS.entity("account"), ACCOUNTS.entity("band")
ACCOUNT_ROW = {"id": 7, "owner": "Ada", "balance": "AYag", "opened": 1795341601234567}  # balance 1000.00


def change(source: str, op: str, block: dict | None, position: dict, entity=ACCOUNT, schema=None):
    """The update of one hand-written event of ``source``'s connector."""
    envelope = {"before": block if op == "d" else None, "after": None if op == "d" else block, "source": position,
                "op": op, "ts_ms": 1795341602000, "transaction": None}
    if schema is not None:
        envelope = {"schema": schema, "payload": envelope}
    return check_change(json.dumps(envelope).encode(), source, 65536, (), entity, entity.input_of(source))


def pg(lsn, **more) -> dict:
    return {"version": "2.7.3.Final", "connector": "postgresql", "name": "bank", "ts_ms": 1795341601500,
            "snapshot": "false", "db": "bank", "sequence": f"[null,\"{lsn}\"]", "schema": "public", "table": "accounts",
            "txId": 900, "lsn": lsn, "xmin": None, **more}


def mysql(file, pos, row=0) -> dict:
    return {"version": "2.7.3.Final", "connector": "mysql", "name": "bank", "ts_ms": 1795341601000, "snapshot": "false",
            "db": "bank", "sequence": None, "table": "accounts", "server_id": 223344, "gtid": None, "file": file,
            "pos": pos, "row": row, "thread": 7, "query": None}


def sqlserver(change_lsn, commit_lsn, serial, snapshot="false") -> dict:
    return {"version": "2.7.3.Final", "connector": "sqlserver", "name": "bank", "ts_ms": 1795341601500,
            "snapshot": snapshot, "db": "bank", "sequence": None, "schema": "dbo", "table": "accounts",
            "change_lsn": change_lsn, "commit_lsn": commit_lsn, "event_serial_no": serial}


def oracle(scn, commit_scn) -> dict:
    return {"version": "2.7.3.Final", "connector": "oracle", "name": "bank", "ts_ms": 1795341601000,
            "snapshot": "false", "db": "ORCLPDB1", "sequence": None, "schema": "BANK", "table": "ACCOUNTS",
            "txId": "6.28.807", "scn": scn, "commit_scn": commit_scn, "lcr_position": None,
            "rs_id": "0x0000c9.0000d3e8.0010", "ssn": 0, "redo_thread": 1, "user_name": "BANK"}


def test_postgres_orders_by_lsn_and_a_delete_has_a_new_position_whether_before_is_the_row_or_its_key():
    created = change("pg", "c", ACCOUNT_ROW, pg(24023928))
    updated = change("pg", "u", {**ACCOUNT_ROW, "owner": "Ada L."}, pg(24024160))
    full = change("pg", "d", {**ACCOUNT_ROW, "owner": "Ada L."}, pg(24024400))  # REPLICA IDENTITY FULL
    key_only = change("pg", "d", {"id": 7}, pg(24024400))  # REPLICA IDENTITY DEFAULT
    assert created.source_seq < updated.source_seq < full.source_seq == key_only.source_seq
    assert (full.op, full.attributes["owner"], key_only.attributes["owner"]) == ("delete", "Ada L.", None)


def test_mysql_orders_by_binlog_file_then_position_then_row_across_a_rotation():
    # pos restarts in every binlog file: alone it would put the new file's changes before the old's.
    late_in_file_3 = change("my", "u", ACCOUNT_ROW, mysql("mysql-bin.000003", 4_294_967_000))
    first_row = change("my", "u", ACCOUNT_ROW, mysql("mysql-bin.000004", 154, row=0))
    second_row = change("my", "u", ACCOUNT_ROW, mysql("mysql-bin.000004", 154, row=1))  # one rows event
    later = change("my", "d", ACCOUNT_ROW, mysql("mysql-bin.000004", 805))
    assert late_in_file_3.source_seq < first_row.source_seq < second_row.source_seq < later.source_seq
    assert first_row.source_seq == (4 << 44) | (154 << 12) | 0  # file (19 bits), pos (32), row (12)


def test_sql_server_orders_by_its_hex_lsn_then_the_event_serial_number():
    insert = change("ms", "c", ACCOUNT_ROW, sqlserver("00000027:00000758:0003", "00000027:00000758:0005", 1))
    update = change("ms", "u", ACCOUNT_ROW, sqlserver("00000027:00000ac0:0002", "00000027:00000ac0:0007", 2))
    delete = change("ms", "d", ACCOUNT_ROW, sqlserver("00000027:00000db0:0005", "00000027:00000db0:0007", 1))
    next_vlf = change("ms", "u", ACCOUNT_ROW, sqlserver("00000028:00000010:0001", "00000028:00000010:0002", 1))
    assert insert.source_seq < update.source_seq < delete.source_seq < next_vlf.source_seq
    assert insert.source_seq == (((0x27 << 25 | 0x758) << 12 | 3) << 2) | 1  # VLF 24, block 25, slot 12, serial 2
    # A snapshot read carries only the snapshot's commit_lsn: it comes before every streamed change.
    read = change("ms", "r", ACCOUNT_ROW, sqlserver(None, "00000025:00000d98:00a2", None, snapshot="true"))
    assert read.source_seq == 0


def test_oracle_orders_by_its_scn_given_as_text():
    first = change("ora", "c", {"ID": 7, "OWNER": "Ada", "BALANCE": "AYag", "OPENED": 1795341601234567},
                   oracle("2122185", "2122185"))
    second = change("ora", "u", {"ID": 7, "OWNER": "Ada L.", "BALANCE": "AYag", "OPENED": 1795341601234567},
                    oracle("2125544", "2125544"))
    assert (first.source_seq, second.source_seq) == (2122185, 2125544)
    assert (second.natural_key, second.attributes["owner"], second.attributes["balance"]) == ("7", "Ada L.", Decimal("1000.00"))


@pytest.mark.parametrize("source, position", [
    ("my", mysql("mysql-bin.000003", 2**32)),  # past the 32-bit position of the binlog v4 event header
    ("my", mysql(f"mysql-bin.{2**19}", 4)),  # past the file number's 19 bits
    ("my", mysql("mysql-bin.000003", 154, row=2**12)),
    ("my", mysql("binlog", 154)),  # not a binlog file name
    ("ms", sqlserver("01000000:00000758:0003", "01000000:00000758:0005", 1)),  # VLF past 24 bits
    ("ms", sqlserver("00000027:00000758:0003", "00000027:00000758:0005", 4)),  # serial past 2 bits
    ("ms", sqlserver("00000027:00000758", "00000027:00000758:0005", 1)),  # a part missing
    ("ms", sqlserver(None, "00000027:00000758:0005", None)),  # a streamed change without its position
    ("ora", oracle("2122185.5", "2122185")),
    ("ora", oracle(str(2**63), "1")),
    ("pg", pg("24023928x")),
])
def test_a_position_that_does_not_fit_its_bits_is_refused_never_wrapped(source, position):
    block = {"ID": 7} if source == "ora" else {"id": 7}
    assert reason(lambda: change(source, "u", block, position)) == "bad_source_seq"


@pytest.mark.parametrize("text, number", [("0/16B3748", 0x16B3748), ("16/B374D848", 0x16_B374D848)])
def test_a_postgres_lsn_as_text_is_its_64_bit_number(text, number):
    assert change("pg", "u", ACCOUNT_ROW, pg(text)).source_seq == change("pg", "u", ACCOUNT_ROW, pg(number)).source_seq == number


# ------------------------------------------------------------------ decimals, as each mode sends them

def balance(source: str, value, schema=None):
    return change(source, "u", {**ACCOUNT_ROW, "balance": value}, pg(100), schema=schema).attributes["balance"]


def test_a_precise_decimal_is_its_base64_twos_complement_bytes_at_the_columns_scale():
    assert balance("pg", "0006") == Decimal("-29293.50")  # bytes d3 4d 3a: -2929350, not 6
    assert balance("pg", "AdTy") == Decimal("1200.50")
    assert balance("pg", "/w==") == Decimal("-0.01")
    assert balance("pg", "AA==") == Decimal("0.00")


def test_a_variable_scale_decimal_is_read_at_its_own_scale_then_checked_against_the_column():
    assert balance("pg", {"scale": 1, "value": "AeI="}) == Decimal("48.20")
    assert balance("pg", {"scale": 3, "value": "BLA="}) == Decimal("1.20")  # 1.200: no digit lost
    assert reason(lambda: balance("pg", {"scale": 3, "value": "AeI="})) == "bad_attribute_value"  # 0.482 would round
    assert reason(lambda: balance("pg", {"scale": "3", "value": "AeI="})) == "bad_attribute_type"


def test_with_the_schema_a_precise_decimal_is_read_at_the_scale_the_schema_declares():
    column = {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
              "parameters": {"scale": "3", "connect.decimal.precision": "12"}, "field": "balance"}
    schema = {"type": "struct", "name": "bank.public.accounts.Envelope", "fields": [
        {"type": "struct", "optional": True, "name": "bank.public.accounts.Value", "field": "after",
         "fields": [{"type": "int32", "optional": False, "field": "id"}, column]}]}
    assert balance("pg", "BLA=", schema=schema) == Decimal("1.20")  # 1.200 at the source's NUMERIC(12,3)
    assert balance("pg", "BLA=") == Decimal("12.00")  # without a schema: the column's scale, 2
    assert reason(lambda: balance("pg", "AeI=", schema=schema)) == "bad_attribute_value"  # 0.482


@pytest.mark.parametrize("source, value, expected", [
    ("pg", 1000, "bad_attribute_type"),  # a number, but precise sends bytes
    ("pg", "1000.00", "bad_attribute_type"),  # text, not base64
    ("pg", "AeJ=", "bad_attribute_type"),  # not the text Java's encoder writes for any bytes
    ("pg", "", "bad_attribute_type"),
    ("pg", {"value": "AeI="}, "bad_attribute_type"),
    ("pg_string", 1000, "bad_attribute_type"),
    ("pg_string", "1000.005", "bad_attribute_value"),
    ("pg_string", "NAN", "bad_attribute_type"),  # Postgres's NaN in string mode
    ("pg_double", "1000.00", "bad_attribute_type"),
    ("pg_double", 0.30000000000000004, "bad_attribute_value"),  # a double's digits past the scale: refused, not rounded
])
def test_a_decimal_in_another_encoding_than_declared_is_refused_never_guessed(source, value, expected):
    assert reason(lambda: balance(source, value)) == expected


def test_string_and_double_modes_read_text_and_numbers():
    assert balance("pg_string", "1000.00") == balance("pg_double", 1000.0) == balance("pg", "AYag") == Decimal("1000.00")
    assert balance("pg_string", "0006") == Decimal("6.00")  # in string mode digits are the number


def test_a_decimal_key_is_read_the_same_way_and_refused_as_a_bad_key():
    def band(source, floor):
        return change(source, "u", {"floor": floor, "label": "low"}, pg(100), entity=BAND)

    assert band("pg", "0006").natural_key == "-29293.50"
    assert band("pg", "Alg=").natural_key == "6.00"  # two keys stay two
    assert band("pg_string", "6.00").natural_key == "6.00"
    assert reason(lambda: band("pg", 6)) == "bad_natural_key"
    assert reason(lambda: band("pg", "6.00")) == "bad_natural_key"
    assert reason(lambda: band("pg_string", 6)) == "bad_natural_key"


# ------------------------------------------------------------------ timestamps in any unit

INSTANTS = [  # one instant as ISO text, then as a number in ms, us and ns
    ("2026-11-22T10:00:01.234567891Z", 1795341601234, 1795341601234567, 1795341601234567891),
    ("1969-12-31T23:59:59.999999999Z", -1, -1, -1),  # before 1970: cut towards the past, like the text's digits
    ("1969-07-20T20:17:40.123456789Z", -14182939877, -14182939876544, -14182939876543211),
]


@pytest.mark.parametrize("iso, ms, us, ns", INSTANTS)
def test_an_instant_given_in_any_unit_is_stored_as_its_iso_text_is(iso, ms, us, ns):
    def opened(source, value):
        return change(source, "u", {**ACCOUNT_ROW, "opened": value}, pg(100)).attributes["opened"]

    as_text = opened("pg", iso)
    assert opened("pg_ns", ns) == opened("pg", us) == as_text
    assert opened("pg_ms", ms) == as_text.replace(microsecond=as_text.microsecond // 1000 * 1000)


# ------------------------------------------------------------------ deletes end deleted

def decided(updates: list, entity) -> dict:
    """Each key's current row as the reference join (``etl.core.oracle``) leaves it."""
    rows = []
    for i, u in enumerate(updates):
        digest = repr((u.op, [u.attributes[c] for c in entity.compare]))
        rows.append({"update_id": f"u{i:03d}", "source_id": u.source_id, "natural_key": u.natural_key, "op": u.op,
                     "source_seq": u.source_seq, "row_hash": digest, "event_ts": u.event_ts, "arrival_ts": i,
                     **u.columns()})
    decisions, _ = decide(rows)
    table = entity_rows(rows, decisions, tuple(c.name for c in entity.columns), entity.history)
    return {r["natural_key"]: r for r in table if r.get("is_current", True)}


def test_accounts_deleted_with_a_full_or_key_only_before_or_after_an_update_end_deleted():
    """The held-out audit on the shipped example (examples/shop/kafka.toml's customer): a delete
    judged by the deleted version's updated_at was a duplicate, or refused when before held only
    the key, and the row stayed current."""
    v1 = {**ROW, "credit_limit": None, "updated_at": 1795341601000000}
    v2 = {**v1, "city": "Bergen", "updated_at": 1795341605000000}

    def at(op, row, lsn, before=None):
        return crm(event(op, before=before, after=None if op == "d" else row, source={**SOURCE, "lsn": lsn}))

    updates = [
        at("c", {**v1, "id": 1}, 100), at("d", None, 200, before={**v1, "id": 1}),  # REPLICA IDENTITY FULL
        at("c", {**v1, "id": 2}, 110), at("d", None, 210, before={"id": 2}),  # REPLICA IDENTITY DEFAULT
        at("c", {**v1, "id": 3}, 120), at("u", {**v2, "id": 3}, 130), at("d", None, 220, before={**v2, "id": 3}),
    ]
    current = decided(updates, CUSTOMER)
    assert {key: row["is_deleted"] for key, row in current.items()} == {"1": True, "2": True, "3": True}
    assert current["3"]["city"] == "Bergen"  # the row as it was when deleted


def test_the_devtools_delete_carries_the_row_as_it_was_and_a_new_position():
    """etl.devtools.cdc writes what a connector does: before is the key's row as last produced
    (or its key alone), never the delete line's own attributes; its lsn is the delete's."""
    line = {"source_id": "crm", "customer_id": 5, "op": "upsert", "event_ts": "2026-11-22T10:00:00Z",
            "attributes": {"name": "Ada", "city": "Oslo", "credit_limit": "10.00", "updated_at": "2026-11-22T10:00:00.000001Z"}}
    lines = [("crm", json.dumps({**line, "source_seq": 100}).encode()),
             ("crm", json.dumps({**line, "source_seq": 200, "attributes": {**line["attributes"], "city": "Bergen"}}).encode()),
             ("crm", json.dumps({**line, "source_seq": 300, "op": "delete",
                                 "attributes": {"name": "someone else", "updated_at": "2030-01-01T00:00:00Z"}}).encode())]
    for identity in ("full", "default"):  # Postgres's REPLICA IDENTITY
        produced = records_of(lines, CUSTOMER) if identity == "full" else records_of(lines, CUSTOMER, replica_identity=identity)
        values = [r.value for r in produced if r.value is not None]
        events = [json.loads(v) for v in values]
        assert events[-1]["before"] == (events[1]["after"] if identity == "full" else {"id": 5})
        assert (events[-1]["op"], events[-1]["source"]["lsn"]) == ("d", 300)
        assert events[0]["after"]["credit_limit"] == "A+g="  # decimal.handling.mode=precise: 1000 unscaled
        updates = [crm(v) for v in values]
        assert (updates[-1].op, updates[-1].source_seq, updates[-1].attributes["city"]) == \
            ("delete", 300, "Bergen" if identity == "full" else None)
        assert decided(updates, CUSTOMER)["5"]["is_deleted"]


HOSTILE_ENVELOPES = {
    "a 2 KB base64 decimal": lambda: event(after={**ROW, "credit_limit": "AQ" * 1400}),
    "a variable-scale decimal of 2 KB": lambda: event(after={**ROW, "credit_limit": {"scale": 2, "value": "AQ" * 1400}}),
    "a variable-scale decimal's scale past any decimal": lambda: event(after={**ROW, "credit_limit": {"scale": 2**31 - 1, "value": "AQ=="}}),
    "a schema scale of 20 digits": lambda: json.dumps({"schema": {"fields": [{"field": "after", "fields": [
        {"field": "credit_limit", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "99999999999999999999"}}]}]}, "payload": json.loads(event())}).encode(),
    "a schema's parameters as text": lambda: json.dumps({"schema": {"fields": [{"field": "after", "fields": [
        {"field": "credit_limit", "name": "org.apache.kafka.connect.data.Decimal", "parameters": "scale=2"}]}]},
        "payload": json.loads(event())}).encode(),
    "a schema's fields as a number": lambda: json.dumps({"schema": {"fields": 5}, "payload": json.loads(event())}).encode(),
    "a row's fields as a number": lambda: json.dumps({"schema": {"fields": [{"field": "after", "fields": 7}]},
                                                      "payload": json.loads(event())}).encode(),
}


@pytest.mark.parametrize("case", HOSTILE_ENVELOPES)
def test_a_hostile_envelope_is_an_update_or_a_reject_never_a_crash(case):
    """One such event on a topic would be read again by every retry of its range: a crash there
    stops the entity for good. Each is an update (a shape that still says what it means) or a
    reason, nothing else."""
    try:
        crm(HOSTILE_ENVELOPES[case]())
    except Reject:
        pass


def test_random_envelopes_are_updates_rejects_or_tombstones_only():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.text(max_size=40),
                        st.sampled_from(["AdTy", "0006", "AQ==", "00000027:00000758:0005", "16/B374D848", "mysql-bin.000003"]))
    values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                          max_leaves=12)
    rows = st.fixed_dictionaries({}, optional={k: values for k in ROW})
    envelopes = st.fixed_dictionaries({}, optional={
        "op": st.one_of(st.sampled_from(["c", "u", "d", "r", "t"]), values), "before": st.one_of(rows, values),
        "after": st.one_of(rows, values), "source": st.one_of(st.fixed_dictionaries({}, optional={k: values for k in SOURCE}), values),
        "schema": values, "payload": values, "ts_ms": values})

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(envelopes)
    def check(envelope):
        try:
            crm(json.dumps(envelope).encode())
        except Reject:
            pass

    check()


def test_another_connectors_event_is_refused_not_ordered_by_the_declared_ones_rule():
    """A MySQL event on an input declared Postgres (the default) has no lsn: refused as a bad
    envelope, where its position could otherwise be read by a rule that does not fit it."""
    assert reason(lambda: change("pg", "u", ACCOUNT_ROW, mysql("mysql-bin.000003", 154))) == "bad_envelope"


def test_mariadbs_events_on_an_input_declared_mysql_are_read_by_the_same_rule():
    """Both connectors write file, pos and row: one rule reads both, so the name is no mismatch."""
    assert change("my", "u", ACCOUNT_ROW, {**mysql("mariadb-bin.000004", 154), "connector": "mariadb"}).source_seq == (4 << 44) | (154 << 12)


def test_a_value_the_connector_could_not_read_is_refused_never_stored():
    """Postgres under REPLICA IDENTITY DEFAULT sends an unchanged TOASTed column as Debezium's
    placeholder; storing it would overwrite the real text with it."""
    row = {**ACCOUNT_ROW, "owner": "__debezium_unavailable_value"}
    assert reason(lambda: change("pg", "u", row, pg(24023928))) == "bad_attribute_type"
