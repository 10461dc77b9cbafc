"""The Kafka client's settings: the site's properties file, then kafka_bootstrap_servers."""

from __future__ import annotations

import pytest

from etl.core.config import ConfigError, EtlConfig
from etl.core.properties import PropertiesError, parse
from etl.io.kafka import client_properties, read_properties
from tests.etl.core.test_properties import CASES, random_texts
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


def test_the_properties_file_is_read_as_java_reads_it_and_its_errors_keep_its_secrets(tmp_path):
    """An operator's file: a blank for a separator, a JAAS config continued over lines, escapes.
    The first used to be refused with the line (its password) in the error, the task log's."""
    path = tmp_path / "client.properties"
    path.write_text("security.protocol SASL_SSL\n"
                    "ssl.truststore.password  hunter2\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                    "    username=\"etl\" \\\n"
                    "    password=\"p=q\";\n"
                    "ssl.truststore.location=C\\:\\\\certs\\\\caf\\u00e9.jks\n")
    assert read_properties(path) == {
        "security.protocol": "SASL_SSL", "ssl.truststore.password": "hunter2",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="etl" password="p=q";',
        "ssl.truststore.location": "C:\\certs\\caf\u00e9.jks"}
    path.write_text("security.protocol=SSL\nssl.truststore.password=hunter2\\u00\n")
    with pytest.raises(ConfigError, match=r"client.properties', line 2: a malformed \\uXXXX escape in a value") as caught:
        client_properties(EtlConfig(model_file=KAFKA_MODEL, entity="product", kafka_properties_file=str(path)))
    assert "hunter2" not in str(caught.value)


def test_java_reads_every_properties_file_as_we_do(spark):
    """The parser against the real java.util.Properties.load(Reader) (the driver's JVM): the pure
    tests' files and 3000 random ones, refused by both or read into the same properties."""
    from py4j.protocol import Py4JJavaError

    jvm = spark.sparkContext._jvm

    def java(text: str):
        props = jvm.java.util.Properties()
        try:
            props.load(jvm.java.io.StringReader(text))
        except Py4JJavaError:
            return None
        return {str(k): str(props.getProperty(k)) for k in props.stringPropertyNames()}

    def ours(text: str):
        try:
            return parse(text)
        except PropertiesError:
            return None

    texts = [text for text, _ in CASES.values()] + random_texts(7, 3000)
    read = [(text, java(text), ours(text)) for text in texts]
    assert not [r for r in read if r[1] != r[2]], [r for r in read if r[1] != r[2]][:5]
    assert sum(theirs is None for _, theirs, _ in read) > 100  # Java's refusals were tried too
