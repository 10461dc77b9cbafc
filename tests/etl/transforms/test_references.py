"""A fact's references as Spark transforms, on a few rows: the key text Spark builds is the one the
dimension's line rules give (``encode_key``), probes carry the first naming fact's times, inferred
updates have the dimension's columns, and keys are set on the fact rows; a fact's member deleted at
its event time is flagged when read."""

from datetime import date, datetime, timedelta
from decimal import Decimal

from chispa import assert_df_equality

from etl.core.model import Reference, encode_key, parse_model
from etl.core.oracle import key_text
from etl.transforms.outcomes import resolve
from etl.transforms.references import deleted_at_event_time, encoded, inferred_updates, probes, with_references
from warehouse.schemas import schemas

T1, T2 = datetime(2026, 11, 22, 1, 0, 1), datetime(2026, 11, 22, 1, 0, 2)
MODEL = parse_model("""
[entities.product]
key = { sku = "string", region = "integer", day = "date", price = "decimal(6,2)", live = "boolean" }
attributes = { title = "string" }
[entities.sales]
kind = "fact"
key = { id = "integer" }
attributes = { s = "string", r = "integer", d = "date", p = "decimal(6,2)", l = "boolean" }
references = { product_sk = { dimension = "product", by = ["s", "r", "d", "p", "l"], source = "erp" } }
""")
SALES, PRODUCT = MODEL.entity("sales"), MODEL.entity("product")
FACTS = "update_id string, source_id string, s string, r long, d date, p decimal(6,2), l boolean, event_ts timestamp, arrival_ts timestamp, product_sk long"
VALUES = [("P\u00e9\"1", 7, date(2026, 1, 2), Decimal("0.50"), True), ("Q", -3, date(999, 12, 31), Decimal("1000.00"), False),
          ("a,b", 0, date(2026, 1, 2), Decimal("0.00"), True)]


def test_spark_encodes_a_reference_s_key_as_the_line_rules_do(spark):
    df = spark.createDataFrame([(f"f{i}", "shop", *v, T1, T1, None) for i, v in enumerate(VALUES)], FACTS)
    got = [r[0] for r in df.select(encoded(SALES, ("s", "r", "d", "p", "l"))).collect()]
    assert got == [encode_key(tuple(key_text(x) for x in v)) for v in VALUES]
    assert [r[0] for r in df.select(encoded(SALES, ("r",))).collect()] == ["7", "-3", "0"]


def test_probes_inferred_updates_and_the_keys_set_on_the_facts(spark):
    facts = spark.createDataFrame([
        ("f2", "shop", *VALUES[0], T2, T2, None),
        ("f1", "shop", *VALUES[0], T1, T2, None),  # same key, arrived first (same second, smaller id)
        ("f3", "shop", *VALUES[1], T2, T2, None),
    ], FACTS)
    wanted = probes(facts, SALES, PRODUCT)
    rows = {r.natural_key: r for r in wanted.collect()}
    assert len(rows) == 2 and all(r.source_id == "erp" for r in rows.values())
    first = rows[encode_key(tuple(key_text(x) for x in VALUES[0]))]
    assert (first.sku, first.region, first.event_ts) == (VALUES[0][0], 7, T1)  # the first naming fact's times
    columns = ["update_id", "source_id", "natural_key", "op", *(c.name for c in PRODUCT.columns), "source_seq", "event_ts",
               "arrival_ts", "row_hash"]
    updates = inferred_updates(wanted, SALES, PRODUCT, columns)
    decided = resolve(updates, next_key=40).collect()
    assert {(r.outcome, r.reason, r.op, r.title, r.source_seq, r.row_hash) for r in decided} == {("new", "inferred", "infer", None, -1, "")}
    assert sorted(r.surrogate_key for r in decided) == [40, 41]
    assert updates.schema.fieldNames()[:len(columns)] == columns
    assert schemas(PRODUCT).ingested_updates["title"].dataType == updates.schema["title"].dataType
    found = spark.createDataFrame([(r.source_id, r.natural_key, r.surrogate_key) for r in decided],
                                  "source_id string, natural_key string, km_surrogate_key long")
    got = with_references(facts, SALES, {"product": found})
    keys = {r.natural_key: r.surrogate_key for r in decided}
    assert got.columns == facts.columns  # the same columns, in the same order
    assert_df_equality(got.select("update_id", "product_sk"), spark.createDataFrame(
        [("f2", keys[first.natural_key]), ("f1", keys[first.natural_key]),
         ("f3", keys[encode_key(tuple(key_text(x) for x in VALUES[1]))])], "update_id string, product_sk long"),
        ignore_row_order=True, ignore_nullable=True)


def at(minute: int) -> datetime:
    return datetime(2026, 11, 22, 1, 0) + timedelta(minutes=minute)


FACT_ROWS = "order_id int, customer_sk long, event_ts timestamp"
WITH_FLAG = FACT_ROWS + ", customer_sk__deleted boolean"
CUSTOMER_SK = Reference("customer_sk", "customer", ("customer_id",))


def test_a_fact_is_flagged_when_its_history_member_was_deleted_at_its_event_time(spark):
    """The version ``versions_at_event_time`` gives the fact decides: a fact in a deleted version's
    interval is flagged, one after the member was created again is not, one older than the first
    version gets the first, but is not flagged when that first version is a delete (the member
    was alive at the fact's time); an inferred member is never deleted, a dangling key is not flagged."""
    history = spark.createDataFrame([
        # surrogate_key, valid_from, valid_to, source_seq, is_deleted, is_inferred
        (1, at(10), at(20), 1, False, False), (1, at(20), at(30), 2, True, False), (1, at(30), None, 3, False, False),
        (2, at(5), None, -1, False, True),  # an inferred member: one version, no content
        (3, at(10), at(15), 1, False, False), (3, at(15), None, 2, True, False),
        (4, at(20), None, 1, True, False),  # first seen as a delete
    ], "surrogate_key long, valid_from timestamp, valid_to timestamp, source_seq long, is_deleted boolean, is_inferred boolean")
    facts = spark.createDataFrame([
        (1, 1, at(5)),  # before the member's first version: the first, live
        (2, 1, at(25)),  # in the deleted version's interval
        (3, 1, at(35)),  # after it was created again
        (4, 2, at(40)),  # an inferred member
        (5, 3, at(12)), (6, 3, at(15)),  # before the delete, and at its very event time
        (7, 99, at(12)),  # dangling
        (8, None, at(12)),  # no key: nothing to say
        (9, 4, at(12)), (10, 4, at(25)),  # before a first version that is a delete (alive then), and after it
    ], FACT_ROWS)
    got = deleted_at_event_time(facts, history, CUSTOMER_SK, history=True)
    expected = spark.createDataFrame([
        (1, 1, at(5), False), (2, 1, at(25), True), (3, 1, at(35), False), (4, 2, at(40), False),
        (5, 3, at(12), False), (6, 3, at(15), True), (7, 99, at(12), False), (8, None, at(12), None),
        (9, 4, at(12), False), (10, 4, at(25), True),
    ], WITH_FLAG)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_fact_is_flagged_when_its_current_member_was_deleted_no_later_than_the_fact(spark):
    """A current-state dimension keeps only the member's last row: a delete flags the facts from
    its event time on, not those before it; an inferred or live member flags nothing."""
    current = spark.createDataFrame([
        (1, True, at(20), False),  # deleted at minute 20
        (2, False, at(10), False),
        (3, False, at(5), True),  # an inferred member
    ], "surrogate_key long, is_deleted boolean, event_ts timestamp, is_inferred boolean")
    facts = spark.createDataFrame([(1, 1, at(19)), (2, 1, at(20)), (3, 1, at(30)), (4, 2, at(30)), (5, 3, at(30)),
                                   (6, 99, at(30))], FACT_ROWS)
    got = deleted_at_event_time(facts, current, CUSTOMER_SK, history=False)
    expected = spark.createDataFrame([(1, 1, at(19), False), (2, 1, at(20), True), (3, 1, at(30), True),
                                      (4, 2, at(30), False), (5, 3, at(30), False), (6, 99, at(30), False)], WITH_FLAG)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
