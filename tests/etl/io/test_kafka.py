"""The Kafka client's settings: the site's properties file, then kafka_bootstrap_servers."""

from __future__ import annotations

import pytest

from etl.core.config import ConfigError, EtlConfig
from etl.io.kafka import client_properties, read_properties
from tests.helpers import ROOT

KAFKA_MODEL = str(ROOT / "examples" / "shop" / "kafka.toml")


def test_a_properties_file_holds_the_security_settings_outside_the_repository(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# the site's\nsecurity.protocol=SASL_SSL\nsasl.mechanism: PLAIN\n! old comment\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"p=q\";\n"
                    "bootstrap.servers=broker-a:9093\n")
    cfg = EtlConfig(model_file=KAFKA_MODEL, entity="product", kafka_properties_file=str(path))
    props = client_properties(cfg)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "PLAIN"
    assert props["sasl.jaas.config"].endswith('password="p=q";')  # only the first separator splits
    assert props["bootstrap.servers"] == "broker-a:9093"
    assert client_properties(cfg.replace(kafka_bootstrap_servers="b:1,c:2"))["bootstrap.servers"] == "b:1,c:2"


def test_without_servers_the_error_says_which_setting(tmp_path):
    with pytest.raises(ConfigError, match="reads Kafka topics: set 'kafka_bootstrap_servers'"):
        client_properties(EtlConfig(model_file=KAFKA_MODEL, entity="product"))
    with pytest.raises(ConfigError, match="no such file"):
        client_properties(EtlConfig(model_file=KAFKA_MODEL, entity="product", kafka_properties_file=str(tmp_path / "x")))
    (tmp_path / "bad").write_text("just words\n")
    with pytest.raises(ConfigError, match="is not key=value"):
        read_properties(tmp_path / "bad")
