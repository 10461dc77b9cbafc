"""The order of versions is recorded with the warehouse: a model edit that changes it is refused
before anything is written (the outside review: a kafka.toml user told to drop `sequence =
"updated_at"` would have had every later change judged stale against timestamps in key_map)."""

from __future__ import annotations

import pytest

from etl.core.config import ConfigError
from etl.io.sequence_store import SEQUENCE_FILE, check_sequence_definition

ACCOUNT = """
[entities.account]
sources = ["bank"]
key = { account_id = "integer" }
attributes = { owner = "string", updated_at = "timestamp" }
"""


def model(tmp_path, text: str, name: str):
    path = tmp_path / name
    path.write_text(ACCOUNT + text)
    return str(path)


def test_a_change_of_how_versions_are_ordered_is_refused_naming_it(cfg, tmp_path):
    by_attribute = cfg.replace(model_file=model(tmp_path, 'sequence = "updated_at"\n', "a.toml"), entity="account")
    check_sequence_definition(by_attribute)
    check_sequence_definition(by_attribute)  # the same again: fine
    assert (by_attribute.meta_path / SEQUENCE_FILE).exists()

    by_log = by_attribute.replace(model_file=model(
        tmp_path, '[entities.account.inputs.bank]\nformat = "debezium"\n', "b.toml"))
    with pytest.raises(ConfigError, match=r"entity 'account': the order of versions changed for \*, bank") as err:
        check_sequence_definition(by_log)
    assert "do not compare" in str(err.value) and "new warehouse" in str(err.value)

    other_widths = cfg.replace(warehouse_root=str(tmp_path / "w2"), model_file=model(
        tmp_path, '[entities.account.inputs.bank]\nformat = "debezium"\nconnector = "mysql"\n', "c.toml"), entity="account")
    check_sequence_definition(other_widths)
    wider = other_widths.replace(model_file=model(
        tmp_path, '[entities.account.inputs.bank]\nformat = "debezium"\nconnector = "mysql"\nsequence_bits = [18, 32, 13]\n',
        "d.toml"))
    with pytest.raises(ConfigError, match="changed for bank"):
        check_sequence_definition(wider)
