"""The warehouse model (etl.core.model): the shipped files parse, and every malformed model fails
before anything is written, with an error naming the file, the entity and the field."""

import pytest

from etl.core.config import load_config
from etl.core.errors import ConfigError
from etl.core.model import DEFAULT_MODEL_FILE, ColumnType, encode_key, load_model, parse_model
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
