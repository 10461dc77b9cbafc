"""A model's ``inputs.<source>`` of change events (docs/sources.md): the defaults each Debezium
connector gives, and what is refused when the model loads, with the file, entity and field named."""

from __future__ import annotations

import pytest

from etl.core.errors import ConfigError
from etl.core.model import CONNECTOR_SEQUENCES, SEQUENCE_BITS, Input, load_model, parse_model

ENTITY = "[entities.account]\nkey = { id = 'integer' }\nattributes = { owner = 'string', updated_at = 'timestamp' }\n"


def input_of(spec: str) -> Input:
    return parse_model(ENTITY + "[entities.account.inputs.bank]\n" + spec).entity().input_of("bank")


def test_a_debezium_input_defaults_to_postgres_its_lsn_and_precise_decimals():
    spec = input_of("format = 'debezium'\n")
    assert (spec.connector, spec.sequence, spec.sequence_bits) == ("postgresql", ("source.lsn",), (63,))
    assert (spec.event_time, spec.timestamp_unit, spec.decimal_handling) == ("source.ts_ms", "us", "precise")
    assert Input("bank").sequence == spec.sequence and Input("bank").decimal_handling == "precise"


@pytest.mark.parametrize("connector, sequence, bits", [
    ("postgresql", ("source.lsn",), (63,)),
    ("oracle", ("source.scn",), (63,)),
    ("mysql", ("source.file", "source.pos", "source.row"), (19, 32, 12)),
    ("mariadb", ("source.file", "source.pos", "source.row"), (19, 32, 12)),
    ("sqlserver", ("source.change_lsn", "source.event_serial_no"), (24, 25, 12, 2)),
])
def test_each_connector_gives_its_own_sequence_packed_in_63_bits(connector, sequence, bits):
    spec = input_of(f"format = 'debezium'\nconnector = '{connector}'\n")
    assert (spec.sequence, spec.sequence_bits) == (sequence, bits)
    assert sum(bits) <= SEQUENCE_BITS


def test_every_connector_is_declared_with_widths_that_fit():
    assert set(CONNECTOR_SEQUENCES) == {"postgresql", "oracle", "mysql", "mariadb", "sqlserver"}
    assert all(sum(bits) <= SEQUENCE_BITS and len(bits) >= len(paths) for paths, bits in CONNECTOR_SEQUENCES.values())


def test_a_sequence_may_be_given_as_one_path_or_as_paths_with_their_widths():
    assert input_of("format = 'debezium'\nsequence = 'source.txId'\n").sequence_bits == (63,)
    mysql = input_of("format = 'debezium'\nconnector = 'mysql'\nsequence_bits = [21, 32, 10]\n")
    assert (mysql.sequence, mysql.sequence_bits) == (("source.file", "source.pos", "source.row"), (21, 32, 10))
    both = input_of("format = 'debezium'\nsequence = ['source.commit_lsn', 'ts_ms']\nsequence_bits = [10, 11, 12, 30]\n")
    assert (both.sequence, both.sequence_bits) == (("source.commit_lsn", "ts_ms"), (10, 11, 12, 30))


def test_change_events_on_an_entity_ordered_by_an_attribute_are_refused_with_why_and_what_to_do(tmp_path):
    """A delete's before is the row as it was (or its key alone): its updated_at is the deleted
    version's, so the delete would be judged a duplicate (or refused) and the row would stay."""
    path = tmp_path / "kafka.toml"
    path.write_text(ENTITY + "sequence = 'updated_at'\n[entities.account.inputs.bank]\nformat = 'debezium'\n"
                    "topics = ['bank.public.accounts']\n")
    with pytest.raises(ConfigError) as err:
        load_model(path)
    message = str(err.value)
    assert f"model file {str(path)!r}, entity 'account': inputs.bank" in message
    assert "the entity's sequence is its attribute 'updated_at'" in message
    assert "a delete's 'before' is the row as it was (or only its key)" in message
    assert "leave the entity's 'sequence' out" in message and "inputs.bank.sequence" in message


def test_the_projects_own_lines_from_kafka_may_still_order_by_an_attribute():
    model = parse_model(ENTITY + "sequence = 'updated_at'\n[entities.account.inputs.bank]\ntopics = ['bank.lines']\n")
    assert model.entity().sequence == "updated_at"


BAD = {
    "unknown connector": ("connector = 'db3'", "connector 'db3' must be one of postgresql, oracle, mysql, mariadb, sqlserver"),
    "several fields without widths": ("sequence = ['source.file', 'source.pos']",
                                      "sequence ['source.file', 'source.pos'] has several fields: give 'sequence_bits'"),
    "an empty sequence": ("sequence = []", "sequence [] must name a field of the event"),
    "a path in a list": ("sequence = ['source.file', 'after.pos']\nsequence_bits = [20, 32]",
                         "sequence ['source.file', 'after.pos'] must name a field of the event"),
    "widths past 63 bits": ("connector = 'mysql'\nsequence_bits = [20, 32, 12]",
                            "sequence_bits [20, 32, 12] add up to 64 bits; a sequence is stored in 63"),
    "fewer widths than fields": ("connector = 'mysql'\nsequence_bits = [31, 32]",
                                 "sequence_bits [31, 32] has 2 width(s) for 3 sequence fields"),
    "a width of 0": ("sequence = 'source.lsn'\nsequence_bits = [0]",
                     "sequence_bits [0] must be a list of widths in bits (1 to 63)"),
    "a width of true": ("sequence_bits = [true]", "sequence_bits [True] must be a list of widths"),
    "a width as text": ("sequence_bits = '63'", "sequence_bits '63' must be a list of widths"),
    "decimal handling": ("decimal_handling = 'base64'",
                         "decimal_handling 'base64' must be one of precise, string, double "
                         "(the connector's decimal.handling.mode)"),
    "event time path": ("event_time = 'after.ts'", "event_time 'after.ts' must name a field of the event"),
    "a binlog position without its file": ("sequence = 'source.pos'", "source.pos starts again in every file"),
    "a binlog position before its file": ("sequence = ['source.pos', 'source.file']\nsequence_bits = [32, 19]",
                                          "a binlog position is its file, then its place in the file, then its row"),
    "a binlog row alone": ("sequence = 'source.row'", "a binlog position is its file"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_input_names_the_file_the_entity_and_the_field(case, tmp_path):
    spec, message = BAD[case]
    path = tmp_path / "model.toml"
    path.write_text(ENTITY + "[entities.account.inputs.bank]\nformat = 'debezium'\n" + spec + "\n")
    with pytest.raises(ConfigError) as err:
        load_model(path)
    assert message in str(err.value)
    assert f"model file {str(path)!r}, entity 'account': inputs.bank: " in str(err.value)


@pytest.mark.parametrize("field", ["connector = 'mysql'", "sequence_bits = [63]", "decimal_handling = 'string'"])
def test_change_event_fields_on_an_input_of_lines_are_refused(field):
    with pytest.raises(ConfigError, match="map change events: set format = \"debezium\""):
        parse_model(ENTITY + "[entities.account.inputs.bank]\n" + field + "\n")
