"""The order of versions is recorded with the warehouse: a model edit that changes it for a source
the warehouse has read is refused before anything is written (the outside review: a kafka.toml
user told to drop `sequence = "updated_at"` would have had every later change judged stale
against timestamps in key_map); a source added later takes its own."""

from __future__ import annotations

import json

import pytest

from etl.core.config import ConfigError
from etl.io.delta_tables import DeltaTables
from etl.io.sequence_store import SEQUENCE_FILE
from etl.io.sequence_store import check_sequence_definition as check_with

ACCOUNT = """
[entities.account]
sources = ["bank"{more}]
key = {{ account_id = "integer" }}
attributes = {{ owner = "string", updated_at = "timestamp" }}
"""


def check_sequence_definition(cfg, adopt=False):
    """Checked against the Delta warehouse's files (no Spark session needed to see key_map holds some)."""
    check_with(cfg, DeltaTables(None, cfg), adopt=adopt)


def model(tmp_path, text: str, name: str, more: str = ""):
    path = tmp_path / name
    path.write_text(ACCOUNT.format(more=more) + text)
    return str(path)


def test_a_change_of_how_versions_are_ordered_is_refused_naming_it(cfg, tmp_path):
    by_attribute = cfg.replace(model_file=model(tmp_path, 'sequence = "updated_at"\n', "a.toml"), entity="account")
    check_sequence_definition(by_attribute)
    check_sequence_definition(by_attribute)  # the same again: fine
    assert json.loads((by_attribute.meta_path / SEQUENCE_FILE).read_text()) == {
        "bank": {"attribute": "updated_at", "type": "timestamp"}}

    by_log = by_attribute.replace(model_file=model(
        tmp_path, '[entities.account.inputs.bank]\nformat = "debezium"\n', "b.toml"))
    with pytest.raises(ConfigError, match=r"entity 'account': the order of versions changed for source bank") as err:
        check_sequence_definition(by_log)
    assert "do not compare" in str(err.value) and "new warehouse" in str(err.value)

    other_widths = cfg.replace(warehouse_root=str(tmp_path / "w2"), model_file=model(
        tmp_path, '[entities.account.inputs.bank]\nformat = "debezium"\nconnector = "mysql"\n', "c.toml"), entity="account")
    check_sequence_definition(other_widths)
    wider = other_widths.replace(model_file=model(
        tmp_path, '[entities.account.inputs.bank]\nformat = "debezium"\nconnector = "mysql"\nsequence_bits = [18, 32, 13]\n',
        "d.toml"))
    with pytest.raises(ConfigError, match="changed for source bank"):
        check_sequence_definition(wider)


def test_a_source_added_to_the_model_takes_its_own_order(cfg, tmp_path):
    """The second review's case: a second Debezium source added to an entity is routine; its keys
    are its own, so nothing of the first source's is compared with it."""
    one = cfg.replace(model_file=model(tmp_path, '[entities.account.inputs.bank]\nformat = "debezium"\n', "one.toml"),
                      entity="account")
    check_sequence_definition(one)
    two = one.replace(model_file=model(tmp_path, '[entities.account.inputs.bank]\nformat = "debezium"\n'
                                                 '[entities.account.inputs.bank2]\nformat = "debezium"\nconnector = "mysql"\n',
                                       "two.toml", more=', "bank2"'))
    check_sequence_definition(two)
    assert set(json.loads((two.meta_path / SEQUENCE_FILE).read_text())) == {"bank", "bank2"}


def test_a_warehouse_with_keys_and_no_record_is_refused_until_its_owner_records_it(cfg, tmp_path):
    """Made by a version before the record: its key_map's sequences are of an order nobody wrote
    down. `etl init` with the model that loaded it adopts that order."""
    cfg = cfg.replace(model_file=model(tmp_path, "", "plain.toml"), entity="account")
    key_map = tmp_path / "warehouse" / "account" / "key_map" / "segment_id=0"
    key_map.mkdir(parents=True)
    (key_map / "part-00000.snappy.parquet").write_bytes(b"PAR1")
    with pytest.raises(ConfigError, match="holds keys but no record of how their versions are ordered") as err:
        check_sequence_definition(cfg)
    assert "`etl init`" in str(err.value) and not (cfg.meta_path / SEQUENCE_FILE).exists()
    check_sequence_definition(cfg, adopt=True)
    check_sequence_definition(cfg)
