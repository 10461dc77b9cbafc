"""The warehouse model (etl.core.model): the shipped files parse, and every malformed model fails
before anything is written, with an error naming the file, the entity and the field."""

import os
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from etl.core.config import load_config
from etl.core.errors import ConfigError
from etl.core.model import (
    DEFAULT_MODEL_FILE,
    MAX_SOURCE_NAME_BYTES,
    RESERVED,
    RESERVED_DIRECTORIES,
    RETIRED_TABLES,
    ColumnType,
    encode_key,
    load_model,
    parse_model,
    source_name_problem,
)
from tests.helpers import ROOT

EXAMPLE = ROOT / "examples" / "shop" / "model.toml"
TEST_MODELS = sorted((ROOT / "tests" / "models").glob("*.toml"))


def test_the_default_model_is_today_s_customer():
    e = load_model().entity()
    assert (e.name, e.table, e.directory, e.history, e.sequence) == ("customer", "customer_current", "", "current", "source_seq")
    assert e.key_names == ("natural_key",) and e.key_columns_stored == ()
    assert e.attribute_names == e.compare == ("name", "email", "city", "balance")
    assert str(e.attributes[-1].type) == "decimal(18,2)"
    assert load_model(DEFAULT_MODEL_FILE) is load_model()  # read once per version of the file


def test_the_example_and_test_models_parse():
    shop = load_model(EXAMPLE)
    assert shop.names == ("customer", "product", "orders")
    customer, product, orders = shop.entities
    assert orders.is_fact and [r.dimension for r in orders.references] == ["customer", "product"]
    assert customer.inferred and product.inferred
    assert (customer.table, customer.directory, customer.sequence) == ("customer_history", "customer", "updated_at")
    assert "updated_at" not in customer.compare  # a new sequence is no new content
    assert product.key_names == ("sku", "region") and product.compare == ("title", "price", "launched")
    assert dict(product.settings) == {"n_part": 16} and product.join_strategy == "partitioned-hash"
    assert len(TEST_MODELS) >= 2
    for path in TEST_MODELS:
        load_model(path)


def test_an_entity_s_settings_and_directories_come_with_it(tmp_path):
    cfg = load_config(env={}, overrides={"model_file": str(EXAMPLE), "entity": "product", "warehouse_root": str(tmp_path / "w"),
                                         "landing_root": str(tmp_path / "l")})
    assert (cfg.entity, cfg.n_part, cfg.join_strategy, cfg.sources) == ("product", 16, "partitioned-hash", ("erp",))
    assert cfg.warehouse_path == tmp_path / "w" / "product" and cfg.landing_path == tmp_path / "l" / "product"
    assert cfg.meta_path == tmp_path / "w" / "product" / "_meta"
    assert cfg.for_entity("customer").join_strategy == "partitioned-range"
    # An override still wins over the entity's declaration.
    assert load_config(env={}, overrides={"model_file": str(EXAMPLE), "entity": "product", "n_part": 4}).n_part == 4
    default = load_config(env={}, overrides={"warehouse_root": str(tmp_path / "w")})
    assert default.warehouse_path == tmp_path / "w"  # the customer's tables stay at the root


def test_keys_encode_to_one_text_without_collisions():
    assert encode_key(("42",)) == "42"
    assert encode_key(("a,b", "c")) != encode_key(("a", "b,c"))
    assert encode_key(("a", "b")) == '["a","b"]'
    assert encode_key(('x"', "é")) == '["x\\"","é"]'


GOOD = """
[entities.product]
key = { sku = "string", region = "string" }
attributes = { price = "decimal(10,2)" }
"""

BAD = {
    "not TOML": ("[entities.product\n", "is not valid TOML"),
    "no entity": ("x = 1\n", "unknown top-level field 'x'"),
    "empty": ("", "declares no entity"),
    "no key": ("[entities.product]\nattributes = { a = 'string' }\n", "entity 'product': 'key' is missing"),
    "empty key": ("[entities.product]\nkey = {}\n", "'key' must be a table of column = type with at least one column"),
    "bad type": ("[entities.product]\nkey = { sku = 'text' }\n", "key column 'sku': unknown type 'text'"),
    "bad decimal": ("[entities.product]\nkey = { sku = 'string' }\nattributes = { p = 'decimal(3,5)' }\n",
                    "attributes column 'p': 'decimal(3,5)': decimal(p,s) needs"),
    "reserved": ("[entities.product]\nkey = { sku = 'string' }\nattributes = { op = 'string' }\n",
                 "attributes column 'op': the name is the pipeline's own column"),
    "prefix": ("[entities.product]\nkey = { km_x = 'string' }\n", "key column 'km_x': names starting with"),
    "twice": ("[entities.product]\nkey = { sku = 'string' }\nattributes = { sku = 'string' }\n", "column 'sku' declared twice"),
    "natural_key in a composite key": ("[entities.p]\nkey = { natural_key = 'string', b = 'string' }\n",
                                       "key column 'natural_key': the name is the pipeline's own column"),
    "natural_key not text": ("[entities.p]\nkey = { natural_key = 'integer' }\n", "key column 'natural_key' must be a string"),
    "compare": ("[entities.product]\nkey = { sku = 'string' }\ncompare = ['price']\n", "compare names 'price', which is not an attribute"),
    "sequence": ("[entities.product]\nkey = { sku = 'string' }\nattributes = { t = 'string' }\nsequence = 't'\n",
                 "sequence 't' must be 'source_seq' or an integer or timestamp attribute"),
    "history": ("[entities.product]\nkey = { sku = 'string' }\nhistory = 'scd2'\n", "history 'scd2' must be one of current, history"),
    "field": ("[entities.product]\nkey = { sku = 'string' }\nkeys = 1\n", "unknown field 'keys'"),
    "strategy": ("[entities.product]\nkey = { sku = 'string' }\njoin_strategy = 'fast'\n", "entity 'product': join_strategy:"),
    "settings": ("[entities.product]\nkey = { sku = 'string' }\nsettings = { warehouse_root = '/' }\n",
                 "settings 'warehouse_root': not a setting an entity may set"),
    "entity name": ("[entities.Product]\nkey = { sku = 'string' }\n", "entity 'Product': an entity name is"),
    "shared directory": ("[entities.a]\nkey = { k = 'string' }\ndirectory = 'x'\n[entities.b]\nkey = { k = 'string' }\ndirectory = 'x'\n",
                         "entities share the directory x"),
    "sources": ("[entities.product]\nkey = { sku = 'string' }\nsources = 'erp'\n", "'sources' must be a list of non-empty strings"),
    # Facts: their references are checked against the dimensions they name.
    "kind": ("[entities.p]\nkey = { k = 'string' }\nkind = 'cube'\n", "kind 'cube' must be one of dimension, fact"),
    "references of a dimension": ("[entities.p]\nkey = { k = 'string' }\nreferences = {}\n", "references is for kind = \"fact\" only"),
    "fact without references": ("[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\n", "a fact needs 'references'"),
    "key and event_id": ("[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\nevent_id = { e = 'string' }\n",
                         "declare 'key' (a correction replaces the fact) or 'event_id'"),
    "event_id of two columns": ("[entities.f]\nkind = 'fact'\nevent_id = { a = 'string', b = 'string' }\n", "'event_id' must be one typed column"),
    "fact history": ("[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\nhistory = 'history'\n", "a fact has no versions"),
    "unknown dimension": (GOOD + "[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\nattributes = { s = 'string' }\n"
                          "references = { p_sk = { dimension = 'store', by = ['s'] } }\n", "reference 'p_sk': no entity 'store'"),
    "by a missing column": (GOOD + "[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\n"
                            "references = { p_sk = { dimension = 'product', by = ['sku', 'region'] } }\n", "by names 'sku', which is not a column"),
    "by too few columns": (GOOD + "[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\nattributes = { s = 'string' }\n"
                           "references = { p_sk = { dimension = 'product', by = ['s'] } }\n", "by has 1 column(s) but 'product''s key has 2"),
    "by of another type": (GOOD + "[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\nattributes = { s = 'string', r = 'integer' }\n"
                           "references = { p_sk = { dimension = 'product', by = ['s', 'r'] } }\n", "by column 'r' is integer but 'product''s key column 'region' is string"),
    "a fact referenced": ("[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\nreferences = { g_sk = { dimension = 'g', by = ['id'] } }\n"
                          "[entities.g]\nkind = 'fact'\nkey = { id = 'integer' }\nreferences = { f_sk = { dimension = 'f', by = ['id'] } }\n",
                          "'g' is a fact; a reference names a dimension"),
    "reference name taken": (GOOD + "[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\nattributes = { s = 'string', r = 'string' }\n"
                             "references = { s = { dimension = 'product', by = ['s', 'r'] } }\n", "reference 's': the name is a declared column already"),
    "reference source": (GOOD.replace("[entities.product]", "[entities.product]\nsources = ['erp']") +
                         "[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\nattributes = { s = 'string', r = 'string' }\n"
                         "references = { p_sk = { dimension = 'product', by = ['s', 'r'], source = 'web' } }\n",
                         "source 'web' is not one of 'product''s sources"),
    "reference by the fact's sources": (GOOD.replace("[entities.product]", "[entities.product]\nsources = ['erp']") +
                                        "[entities.f]\nkind = 'fact'\nsources = ['shop']\nkey = { id = 'integer' }\n"
                                        "attributes = { s = 'string', r = 'string' }\n"
                                        "references = { p_sk = { dimension = 'product', by = ['s', 'r'] } }\n",
                                        "the fact's source(s) shop are not 'product''s sources"),
    "reference by a timestamp": ("[entities.d]\nkey = { t = 'timestamp' }\n[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\n"
                                 "attributes = { at = 'timestamp' }\nreferences = { d_sk = { dimension = 'd', by = ['at'] } }\n",
                                 "a reference by a timestamp key column is not supported"),
    # Inputs: how a source's changes arrive (docs/sources.md).
    "input of an unknown source": ("[entities.p]\nkey = { k = 'string' }\nsources = ['erp']\n[entities.p.inputs.crm]\nformat = 'debezium'\n",
                                   "inputs.crm: 'crm' is not one of the entity's sources (erp)"),
    "input format": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.crm]\nformat = 'avro'\n", "format 'avro' must be one of lines, debezium"),
    "input topic": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.crm]\ntopics = ['a topic']\n", "topic 'a topic' is not a Kafka topic name"),
    "input topic twice": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.crm]\ntopics = ['t']\n[entities.p.inputs.web]\ntopics = ['t']\n",
                          "inputs.web: topic 't' is read by inputs.crm already"),
    "input mapping of lines": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.crm]\nfields = { k = 'id' }\n",
                               "'fields' map change events: set format = \"debezium\""),
    "input field": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.crm]\nformat = 'debezium'\nfields = { id = 'id' }\n",
                    "inputs.crm: fields names 'id', which is not a key column or attribute"),
    "input sequence of an attribute-ordered entity": (
        "[entities.p]\nkey = { k = 'string' }\nattributes = { t = 'timestamp' }\nsequence = 't'\n[entities.p.inputs.crm]\nformat = 'debezium'\nsequence = 'source.lsn'\n",
        "the entity's sequence is its attribute 't', taken from the change's row"),
    "input event path": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.crm]\nformat = 'debezium'\nevent_time = 'after.ts'\n",
                         "event_time 'after.ts' must name a field of the event"),
    "input unit": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.crm]\nformat = 'debezium'\ntimestamp_unit = 's'\n",
                   "timestamp_unit 's' must be one of ms, us, ns"),
    "input field name": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.crm]\ntopic = 't'\n", "inputs.crm: unknown field 'topic'"),
    "reference field": (GOOD + "[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\n"
                        "references = { p_sk = { dimension = 'product', by = ['id'], on = 1 } }\n", "reference 'p_sk': unknown field 'on'"),
    # Source names become folders of the landing zone (source_id=<name>): one safe path component.
    "source outside the landing zone": ("[entities.p]\nkey = { k = 'string' }\nsources = ['crm', '../../../x']\n",
                                        "entity 'p': sources: '../../../x' holds a path separator"),
    "source with a backslash": ("[entities.p]\nkey = { k = 'string' }\nsources = ['..\\x']\n", "sources: '..\\\\x' holds a path separator"),
    "source '..'": ("[entities.p]\nkey = { k = 'string' }\nsources = ['..']\n", "sources: '..' is '.' or '..'"),
    "source with a NUL": ('[entities.p]\nkey = { k = "string" }\nsources = ["crm\\u0000"]\n', "sources: 'crm\\x00' holds a control character"),
    "source with a line break": ('[entities.p]\nkey = { k = "string" }\nsources = ["c\\nrm"]\n', "sources: 'c\\nrm' holds a control character"),
    "source of spaces": ("[entities.p]\nkey = { k = 'string' }\nsources = ['  ']\n", "sources: '  ' is only whitespace"),
    "source with a trailing space": ("[entities.p]\nkey = { k = 'string' }\nsources = ['crm ']\n", "sources: 'crm ' begins or ends with whitespace"),
    "source too long for a folder": ("[entities.p]\nkey = { k = 'string' }\nsources = ['" + "é" * 200 + "']\n",
                                     "is 400 bytes long in UTF-8; at most 245"),
    "input of a source outside the landing zone": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.inputs.'../x']\nformat = 'debezium'\n",
                                                   "entity 'p': inputs.<source>: '../x' holds a path separator"),
    "reference source outside the landing zone": (GOOD + "[entities.f]\nkind = 'fact'\nkey = { id = 'integer' }\n"
                                                  "attributes = { s = 'string', r = 'string' }\n"
                                                  "references = { p_sk = { dimension = 'product', by = ['s', 'r'], source = '/etc' } }\n",
                                                  "entity 'f': reference 'p_sk': source: '/etc' holds a path separator"),
    # Spark resolves column names without case: names equal up to case are one column.
    "columns equal up to case": ("[entities.p]\nkey = { k = 'string' }\nattributes = { name = 'string', Name = 'string' }\n",
                                 "entity 'p': columns 'name' and 'Name' are one column to Spark"),
    "key and attribute equal up to case": ("[entities.p]\nkey = { Sku = 'string' }\nattributes = { sku = 'string' }\n",
                                           "columns 'Sku' and 'sku' are one column to Spark"),
    "reserved up to case: Source_Id": ("[entities.p]\nkey = { k = 'string' }\nattributes = { Source_Id = 'string' }\n",
                                       "attributes column 'Source_Id': the name is the pipeline's own column ('source_id' to Spark"),
    "a ledger column beside the log's: matched": ("[entities.p]\nkey = { k = 'string' }\nattributes = { Matched = 'integer' }\n",
                                                 "attributes column 'Matched': the name is the pipeline's own column"),
    "reserved up to case: IS_DELETED": ("[entities.p]\nkey = { k = 'string' }\nattributes = { IS_DELETED = 'boolean' }\n",
                                        "attributes column 'IS_DELETED': the name is the pipeline's own column"),
    "reserved up to case: SURROGATE_KEY": ("[entities.p]\nkey = { SURROGATE_KEY = 'integer' }\n",
                                           "key column 'SURROGATE_KEY': the name is the pipeline's own column"),
    "natural_key up to case": ("[entities.p]\nkey = { Natural_Key = 'string' }\n", "key column 'Natural_Key': the name is the pipeline's own column"),
    "prefix up to case": ("[entities.p]\nkey = { k = 'string' }\nattributes = { KM_x = 'string', O_y = 'string' }\n",
                          "attributes column 'KM_x': names starting with km_, o_, _ (in any case) are reserved"),
    "reference equal up to case to an attribute": (
        "[entities.customer]\nkey = { customer_id = 'integer' }\n[entities.orders]\nkind = 'fact'\nkey = { id = 'integer' }\n"
        "attributes = { customer_id = 'integer' }\nreferences = { Customer_Id = { dimension = 'customer', by = ['customer_id'] } }\n",
        "reference 'Customer_Id': the name is a declared column already ('customer_id': Spark compares column names without case)"),
    "reference equal up to case to a reserved name": (
        "[entities.customer]\nkey = { customer_id = 'integer' }\n[entities.orders]\nkind = 'fact'\nkey = { id = 'integer' }\n"
        "attributes = { customer_id = 'integer' }\nreferences = { Surrogate_Key = { dimension = 'customer', by = ['customer_id'] } }\n",
        "references column 'Surrogate_Key': the name is the pipeline's own column"),
    "references equal up to case": (
        "[entities.customer]\nkey = { customer_id = 'integer' }\n[entities.orders]\nkind = 'fact'\nkey = { id = 'integer' }\n"
        "attributes = { customer_id = 'integer' }\nreferences = { c_sk = { dimension = 'customer', by = ['customer_id'] }, "
        "C_SK = { dimension = 'customer', by = ['customer_id'] } }\n",
        "reference 'C_SK': the name is reference already ('c_sk'"),
    "event_id equal up to case to an attribute": (
        "[entities.customer]\nkey = { customer_id = 'integer' }\n[entities.clicks]\nkind = 'fact'\nevent_id = { Click = 'string' }\n"
        "attributes = { click = 'string', customer_id = 'integer' }\n"
        "references = { c_sk = { dimension = 'customer', by = ['customer_id'] } }\n",
        "columns 'Click' and 'click' are one column to Spark"),
    # type1: a history entity's attributes overwritten on every version, whose change alone makes none.
    "type1 of a current entity": ("[entities.p]\nkey = { k = 'string' }\nattributes = { e = 'string' }\ntype1 = ['e']\n",
                                  "entity 'p': type1 is for history = \"history\" entities"),
    "type1 of a fact": ("[entities.customer]\nkey = { customer_id = 'integer' }\n[entities.orders]\nkind = 'fact'\n"
                        "key = { id = 'integer' }\nattributes = { customer_id = 'integer' }\ntype1 = ['customer_id']\n"
                        "references = { c_sk = { dimension = 'customer', by = ['customer_id'] } }\n",
                        "entity 'orders': type1 is for history"),
    "type1 of no attribute": ("[entities.p]\nkey = { k = 'string' }\nattributes = { e = 'string' }\nhistory = 'history'\ntype1 = ['k']\n",
                              "entity 'p': type1 names 'k', which is not an attribute (e)"),
    "type1 of the sequence": ("[entities.p]\nkey = { k = 'string' }\nattributes = { e = 'string', t = 'timestamp' }\n"
                              "history = 'history'\nsequence = 't'\ntype1 = ['t']\n", "type1 names 't', the sequence column"),
    "type1 not a list": ("[entities.p]\nkey = { k = 'string' }\nattributes = { e = 'string' }\nhistory = 'history'\ntype1 = 'e'\n",
                         "'type1' must be a list of non-empty strings"),
    "type1 twice": ("[entities.p]\nkey = { k = 'string' }\nattributes = { e = 'string' }\nhistory = 'history'\ntype1 = ['e', 'e']\n",
                    "type1 names a column twice"),
    "strict deleted references of a dimension": ("[entities.p]\nkey = { k = 'string' }\n[entities.p.settings]\n"
                                                 "strict_deleted_references = true\n",
                                                 "entity 'p': settings 'strict_deleted_references' is a fact's"),
    # A directory is the entity's place under every root: never a name the pipeline puts there.
    "directory of the key_map table": ("[entities.p]\nkey = { k = 'string' }\ndirectory = 'key_map'\n",
                                       "entity 'p': directory 'key_map' is a name the pipeline uses under the roots"),
    "directory of the GX project": ("[entities.p]\nkey = { k = 'string' }\ndirectory = 'gx'\n", "directory 'gx' is a name the pipeline uses"),
    "directory of the run snapshots": ("[entities.p]\nkey = { k = 'string' }\ndirectory = 'runs'\n", "directory 'runs' is a name the pipeline uses"),
    "directory of the stream's state": ("[entities.p]\nkey = { k = 'string' }\ndirectory = 'stream'\n", "directory 'stream' is a name"),
    "entity named as a system table": ("[entities.batch_ledger]\nkey = { k = 'string' }\n",
                                       "entity 'batch_ledger': directory 'batch_ledger' (the entity's name: the default directory) is a name"),
    "entity named as the stream's state": ("[entities.stream]\nkey = { k = 'string' }\n", "entity 'stream': directory 'stream' (the entity's name"),
    "directory of the table of the entity at the roots": (
        "[entities.customer]\ndirectory = ''\nkey = { natural_key = 'string' }\n[entities.p]\nkey = { k = 'string' }\n"
        "directory = 'customer_current'\n",
        "entity 'p': directory 'customer_current' is the table of entity 'customer', which lives at the roots"),
    "entity named as the table of the entity at the roots": (
        "[entities.orders_fact]\nkey = { k = 'string' }\n[entities.customer]\nkey = { customer_id = 'integer' }\n"
        "[entities.orders]\ndirectory = ''\nkind = 'fact'\nkey = { id = 'integer' }\nattributes = { customer_id = 'integer' }\n"
        "references = { c_sk = { dimension = 'customer', by = ['customer_id'] } }\n",
        "entity 'orders_fact': directory 'orders_fact' is the table of entity 'orders'"),
    # What tomllib cannot read without recursing once per level: 5,000 levels.
    "arrays nested 5,000 deep": ("a = " + "[" * 5000 + "]" * 5000 + "\n", "nests arrays or tables too deeply"),
    "inline tables nested 5,000 deep": ("[entities.p]\nkey = { k = 'string' }\nsettings = " + "{ a = " * 5000 + "1" + " }" * 5000 + "\n",
                                        "nests arrays or tables too deeply"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_model_names_the_file_the_entity_and_the_field(case, tmp_path):
    text, message = BAD[case]
    path = tmp_path / "model.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_model(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_a_bad_setting_value_in_a_model_fails_with_the_entity_named(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text(GOOD + "[entities.product.settings]\nn_part = 'many'\n")
    with pytest.raises(ConfigError, match="entity 'product', settings.*n_part"):
        load_config(env={}, overrides={"model_file": str(path)})
    with pytest.raises(ConfigError, match="no entity 'customer'"):
        load_config(env={}, overrides={"model_file": str(path), "entity": "customer"})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(env={}, overrides={"model_file": str(tmp_path / "missing.toml")})


def test_types_parse_case_and_space_insensitively():
    assert parse_model(GOOD).entity().attributes[0].type == ColumnType("decimal", 10, 2)
    assert str(parse_model("[entities.p]\nkey = { a = ' Decimal( 5 , 0 ) ' }\n").entity().key[0].type) == "decimal(5,0)"



FACTS = ROOT / "tests" / "models" / "facts" / "orders.toml"


def test_a_fact_s_references_and_the_dimensions_they_make_inferred():
    model = load_model(FACTS)
    customer, product, orders = (model.entity(n) for n in ("customer", "product", "orders"))
    assert (orders.kind, orders.table, orders.history, orders.append_only) == ("fact", "orders_fact", "current", False)
    assert [(r.name, r.dimension, r.by, r.source) for r in orders.references] == [
        ("customer_sk", "customer", ("customer_id",), ""), ("product_sk", "product", ("sku", "region"), "erp")]
    # the surrogate keys are the fact's last columns, never compared (not content of the line)
    assert [c.name for c in orders.columns][-2:] == ["customer_sk", "product_sk"]
    assert "customer_sk" not in orders.compare
    assert customer.inferred and product.inferred and not orders.inferred
    assert not load_model(TEST_MODELS[0]).entity().inferred  # nothing references it there


def test_an_event_id_makes_an_append_only_fact(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text(GOOD + "[entities.clicks]\nkind = 'fact'\nevent_id = { click_id = 'string' }\n"
                    "attributes = { sku = 'string', region = 'string' }\n"
                    "references = { product_sk = { dimension = 'product', by = ['sku', 'region'] } }\n")
    clicks = load_model(path).entity("clicks")
    assert clicks.append_only and clicks.key_names == ("click_id",) and clicks.table == "clicks_fact"


# ----------------------------------------------------------------------------- source names

HOSTILE_SOURCE_NAMES = ["../../../x", "a/b", "/etc", "..\\x", "..", ".", "", "   ", "\t", " crm", "crm\n", "cr\x00m",
                        "\x1b[31mred", "crm\x7f", "crm\u0085", "x" * (MAX_SOURCE_NAME_BYTES + 1), "\udcff",
                        "crm\u202egnp.exe", "cr\u2028m", "c\u200brm", "c:rm", "C:"]


@pytest.mark.parametrize("name", HOSTILE_SOURCE_NAMES, ids=repr)
def test_a_source_name_that_is_not_one_safe_folder_name_is_refused(name):
    assert source_name_problem(name)


def test_source_names_a_landing_zone_can_hold_pass_up_to_the_longest_folder_name(tmp_path):
    from etl.io.landing import SOURCE_PREFIX, landing_file

    assert MAX_SOURCE_NAME_BYTES + len(SOURCE_PREFIX.encode()) == 255  # the longest file name of ext4, XFS, APFS
    longest = "é" * (MAX_SOURCE_NAME_BYTES // 2) + "x" * (MAX_SOURCE_NAME_BYTES % 2)
    for name in ("crm", "web-shop", "ERP.eu", "a b", "käse", "x=1", longest):
        assert source_name_problem(name) is None, name
        path = landing_file(tmp_path, name, datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc))
        path.parent.mkdir(parents=True)  # the filesystem holds it, one folder under the root
        assert path.relative_to(tmp_path).parts[0] == SOURCE_PREFIX + name
    assert source_name_problem(longest + "x")
    # Where a path is built from a source name, it is refused too.
    with pytest.raises(ValueError, match="holds a path separator"):
        landing_file(tmp_path, "../../../x", datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc))


# ----------------------------------------------------------------------------- reading the model file

def _refused(path, *expected: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_model(path)
    message = str(err.value)
    assert str(path) in message and all(e in message for e in expected), message
    return message


def test_a_symlink_loop_as_the_model_file_is_refused_naming_it(tmp_path):
    (tmp_path / "a.toml").symlink_to(tmp_path / "b.toml")
    (tmp_path / "b.toml").symlink_to(tmp_path / "a.toml")
    _refused(tmp_path / "a.toml", "model file", "cannot be found", "setting 'model_file'")


def test_a_directory_as_the_model_file_is_refused_naming_it(tmp_path):
    (tmp_path / "model.toml").mkdir()
    _refused(tmp_path / "model.toml", "is a directory, not a file")


def test_a_fifo_as_the_model_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "model.toml"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(pytest.raises(ConfigError, load_model, fifo)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # blocked opening the FIFO: let it go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading the model file blocked on a FIFO")
    assert outcome and "is a FIFO, not a file" in str(outcome[0].value) and str(fifo) in str(outcome[0].value)


def test_a_model_file_of_invalid_utf8_is_refused_naming_it(tmp_path):
    path = tmp_path / "model.toml"
    path.write_bytes(b"[entities.p]\nkey = { k = 'string' }\nattributes = { caf\xe9 = 'string' }\n")  # Latin-1
    _refused(path, "is not UTF-8 text (byte 0xe9 at offset 54)")


def test_an_unreadable_model_file_is_refused_naming_it(tmp_path):
    from tests.etl.io.test_landing import without_dac_override

    path = tmp_path / "model.toml"
    path.write_text(GOOD)
    path.chmod(0)
    code = ("import sys\nfrom etl.core.errors import ConfigError\nfrom etl.core.model import load_model\n"
            "try:\n    load_model(sys.argv[1])\nexcept ConfigError as exc:\n    print(exc); sys.exit(2)\n")
    done = subprocess.run(without_dac_override([sys.executable, "-c", code, str(path)]), capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"model file {str(path)!r} cannot be read: permission denied" in done.stdout


def test_a_model_path_with_a_nul_byte_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"model file 'model\\x00\.toml' cannot be found"):
        load_model("model\x00.toml")


# ----------------------------------------------------------------------------- what the pipeline owns

def test_the_reserved_columns_cover_every_column_written_beside_the_declared_ones():
    """A declared column shares a row with these (warehouse/schemas.py): each must be reserved,
    in any case, or the entity's table or a log would hold two columns of one name to Spark."""
    from pyspark.sql.types import ArrayType, StructType

    from warehouse.schemas import schemas, tables, views

    def structs(schema):
        yield schema
        for f in schema.fields:
            kind = f.dataType
            while isinstance(kind, ArrayType):
                kind = kind.elementType
            if isinstance(kind, StructType):
                yield from structs(kind)

    from etl.ingest import checked_schema

    for model in (load_model(), load_model(EXAMPLE), load_model(FACTS), *map(load_model, TEST_MODELS)):
        for e in model.entities:
            declared = {c.name for c in e.columns}
            s = schemas(e)
            every = [t.schema for t in tables(e).values()] + [v.schema for v in views(e).values()]
            every += [getattr(s, f) for f in s.__dataclass_fields__ if isinstance(getattr(s, f), StructType)]
            # A view that explodes an array of rows puts its source's own columns beside them
            # (outcome_log: the ledger's counts and metrics beside each logged update's columns),
            # and the strategies join key_map's columns onto the updates.
            every += [tables(e)[v.source].schema for v in views(e).values() if v.explode]
            every += [StructType([*tables(e)["key_map"].schema.fields, *s.ingested_updates.fields])]
            every.append(checked_schema(e))  # what the executors hand back: reject_reason, reject_field beside the columns
            for schema in every:
                for struct in structs(schema):
                    names = {f.name for f in struct.fields}
                    if names & declared or any(f.name == "outcomes" for f in struct.fields):
                        beside = {n for n in names - declared if n.lower() not in RESERVED and not n.lower().startswith(("km_", "o_", "_"))}
                        assert not beside, (e.name, beside)


def test_the_reserved_directories_cover_what_the_code_writes_under_each_root(tmp_path):
    """Every name the code puts directly under a root for the entity that lives there (found by
    asking the code for its paths) is refused as another entity's directory: reserved, the root
    entity's table, or no directory name at all."""
    from etl import jobs
    from etl.core.config import EtlConfig
    from etl.core.interval import Interval
    from etl.core.layout import SlotArray
    from etl.core.spark_conf import spark_conf
    from etl.io.landing import landing_file
    from etl.io.layout_store import PENDING, write_layout
    from etl.io.lock import LoadLock
    from etl.io.stream_status import stream_dir
    from etl.quality.gate import data_docs_index, rebuild_context
    from etl.quality.report import report_dir
    from etl.strategies.base import JoinStrategy
    from warehouse.schemas import tables, views

    roots = {r: tmp_path / r for r in ("warehouse", "landing", "gx", "runs", "reports", "meta")}
    cfg = EtlConfig(**{f"{r}_root": str(p) for r, p in roots.items() if r != "meta"})  # the customer, at the roots
    with_meta = cfg.replace(meta_root=str(roots["meta"]))
    interval = Interval.parse("2026-11-22T01:00", "2026-11-22T02:00")
    (cfg.gx_path / "gx").mkdir(parents=True)
    paths = [Path(cfg.table_path(t)) for t in (*tables(cfg.entity_model), *views(cfg.entity_model))]
    paths += [cfg.meta_path, Path(spark_conf(cfg)["spark.sql.warehouse.dir"]), rebuild_context(cfg, keep_history=False),
              data_docs_index(cfg), jobs.run_dir(cfg, interval), report_dir(cfg, interval),
              landing_file(cfg.landing_path, "crm", interval.start)]
    paths += [LoadLock(with_meta.meta_path, "test").path, write_layout(with_meta, SlotArray.even(100, 2), PENDING),
              with_meta.meta_path / "tables.lock",  # etl/io/tables.py's guard of ensure_tables (a literal there)
              stream_dir(with_meta), JoinStrategy._snapshot_path(SimpleNamespace(cfg=with_meta, run_key=interval.run_key, name="native"))]
    written = set()
    for path in paths:
        root = next(r for r in roots.values() if path.is_relative_to(r))
        written.add(path.relative_to(root).parts[0])
    assert {"key_map", "batch_ledger", "customer_current", "_meta", "gx", "runs", "stream", "load.lock"} <= written
    for name in sorted(written):
        with pytest.raises(ConfigError, match="directory"):
            parse_model(DEFAULT_MODEL_FILE.read_text() + f"[entities.other]\nkey = {{ k = 'string' }}\ndirectory = {name!r}\n")
    # Nothing reserved that the code does not write, but what older versions wrote.
    assert RESERVED_DIRECTORIES - set(RETIRED_TABLES) <= written

    # Any entity at the roots: its own table, whatever its kind.
    orders = load_model(FACTS).entity("orders")
    assert set(tables(orders)) - {orders.table} <= RESERVED_DIRECTORIES
    with pytest.raises(ConfigError, match="directory 'orders_fact' is the table of entity 'orders'"):
        parse_model(FACTS.read_text().replace("[entities.orders]\n", "[entities.orders]\ndirectory = ''\n")
                    + "[entities.other]\nkey = { k = 'string' }\ndirectory = 'orders_fact'\n")


def test_every_whole_model_the_docs_show_loads():
    """A reader copies the docs' examples: each TOML block that declares an entity's key is a model
    the check accepts (the format example once paired change events with an attribute sequence,
    which the model refuses, and spread an inline table over two lines, which TOML refuses)."""
    import re

    for doc in ("model.md", "sources.md", "ingest.md"):
        text = (Path(__file__).resolve().parents[3] / "docs" / doc).read_text()
        blocks = [b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if re.search(r"^(key|event_id) = ", b, re.M)]
        for block in blocks:
            if "dimension = " in block:  # a fact: with the worked example's dimensions it names
                shop = (Path(__file__).resolve().parents[3] / "examples" / "shop" / "model.toml").read_text()
                block = shop[:shop.index("[entities.orders]")] + "\n" + block
            parse_model(block, f"docs/{doc}")


def test_type1_columns_split_the_compared_columns_of_a_history_entity(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text("[entities.customer]\nkey = { id = 'integer' }\nhistory = 'history'\n"
                    "attributes = { name = 'string', email = 'string', phone = 'string', seen = 'timestamp' }\n"
                    "compare = ['name', 'email']\ntype1 = ['email', 'phone']\n")
    entity = load_model(path).entity()
    assert entity.type1 == ("email", "phone")
    assert (entity.version_compare, entity.type1_compare) == (("name",), ("email",))
    assert load_model().entity().type1 == ()


def test_a_fact_may_make_its_deleted_references_strict_in_its_settings(tmp_path):
    path = tmp_path / "model.toml"
    path.write_text("[entities.customer]\nkey = { customer_id = 'integer' }\n[entities.orders]\nkind = 'fact'\n"
                    "key = { id = 'integer' }\nattributes = { customer_id = 'integer' }\n"
                    "references = { c_sk = { dimension = 'customer', by = ['customer_id'] } }\n"
                    "[entities.orders.settings]\nstrict_deleted_references = true\n")
    cfg = load_config(env={}, overrides={"model_file": str(path), "entity": "orders", "warehouse_root": str(tmp_path / "w")})
    assert cfg.strict_deleted_references
    assert not load_config(env={}, overrides={"model_file": str(path), "entity": "customer"}).strict_deleted_references
