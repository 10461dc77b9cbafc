"""Java properties files (etl.core.properties) as java.util.Properties.load(Reader) reads them,
without a JVM: files as operators write them. The same corpus, and random strings, are read by the
real java.util.Properties in tests/etl/io/test_kafka.py (Spark's JVM)."""

from __future__ import annotations

import random

import pytest

from etl.core.config import ConfigError
from etl.core.properties import PropertiesError, parse, read, redact

JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"etl\" password=\"s3cr3t=;:\";"

# name -> (the file's text, its properties; None: Java refuses it)
CASES = {
    "whitespace separates key and value": (
        "ssl.truststore.password SECRET\nssl.truststore.type\tJKS\n",
        {"ssl.truststore.password": "SECRET", "ssl.truststore.type": "JKS"}),
    "=, : and blanks around them": (
        "security.protocol=SASL_SSL\nsasl.mechanism : SCRAM-SHA-512\nclient.id =  etl \n",
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "client.id": "etl "}),
    "only the first separator splits": (
        "a = = b\nc:d:e\nf==g\nh := i\n", {"a": "= b", "c": "d:e", "f": "=g", "h": "= i"}),
    "a JAAS config continued over lines": (
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        "    username=\"etl\" \\\n"
        "\t password=\"s3cr3t=;:\";\n"
        "security.protocol=SASL_SSL\n",
        {"sasl.jaas.config": JAAS, "security.protocol": "SASL_SSL"}),
    "a continuation with CRLF and lone CR line ends": (
        "a=one \\\r\n   two\rb=three\r\n", {"a": "one two", "b": "three"}),
    "an even number of backslashes does not continue": (
        "path=C:\\\\temp\\\\\nnext=1\n", {"path": "C:\\temp\\", "next": "1"}),
    "a backslash at the end of the file is dropped": ("a=b\\", {"a": "b"}),
    "a comment inside a continuation is text": (
        "a=one\\\n  # not a comment\n! a comment\n  # a comment too\n", {"a": "one# not a comment"}),
    "a blank line ends a continuation": ("a=one\\\n   \nb=two\n", {"a": "one", "b": "two"}),
    "comments and blank lines": (
        "# the site's\n\n   \t\n! old\n  #indented\nkey=value # not a comment\n", {"key": "value # not a comment"}),
    "escapes": (
        "tab=a\\tb\nnl=a\\nb\nff=\\f\ncr=\\r\nu=caf\\u00e9\\u00E9\nother=\\a\\:\\=\\#\\\\\nemoji=\\uD83D\\uDE00\n",
        {"tab": "a\tb", "nl": "a\nb", "ff": "\f", "cr": "\r", "u": "café\u00e9", "other": "a:=#\\", "emoji": "\U0001F600"}),
    "escaped separators in a key": (
        "my\\ key\\:x\\=y = v\n\\#hash=1\n", {"my key:x=y": "v", "#hash": "1"}),
    "a key without a value": ("flag\nempty=\nspaces   \n", {"flag": "", "empty": "", "spaces": ""}),
    "the later key wins": ("a=1\na=2\n", {"a": "2"}),
    "leading blanks of a value are dropped, trailing ones kept": ("a=\t  x  \n", {"a": "x  "}),
    "non-ASCII as itself": ("name=Zoë ☃ 😀\n", {"name": "Zoë ☃ 😀"}),
    # Java's own oddities, kept: a lone "\" line makes the next line's start a logical line's start.
    "a continuation of nothing can start a comment": ("\\\n#x=1\ny=2\n", {"y": "2"}),
    "a lone backslash at the end is the empty key": ("a=1\n\\", {"a": "1", "": ""}),
    "a malformed \\u in a value": ("ssl.key.password=ab\\u12G4\n", None),
    "a \\u cut short by the line's end": ("a=\\u12\n", None),
    "a malformed \\u in a key": ("a\\u0=1\n", None),
}

# What random files are made of: the grammar's characters and the shapes they take together.
TOKENS = ("a", "k", "=", ":", " ", "\t", "\f", "\\", "\\\\", "\n", "\r", "\r\n", "#", "!", "u", "\\u", "\\u00e9",
          "\\u0041", "\\uD83D\\uDE00", "0", "F", "é", "😀", "t", "n", "\\\n", "\\\r\n", "\\\r", "  ", "x=y", "\\:",
          "\\=", "\\ ")


def random_texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 14))) for _ in range(n)]


@pytest.mark.parametrize("name", CASES)
def test_the_grammar_of_java_properties(name):
    text, want = CASES[name]
    if want is None:
        with pytest.raises(PropertiesError):
            parse(text, "client.properties")
    else:
        assert parse(text, "client.properties") == want


def test_a_secret_never_appears_in_an_error(tmp_path):
    """The error names the file and the line (a continuation's own line), never the value nor the line."""
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                    "  username=\"etl\" password=\"hunter2\\uZZZZ\";\n")
    with pytest.raises(ConfigError) as caught:
        read(path)
    message = str(caught.value)
    assert message == (f"properties file {str(path)!r}, line 3: a malformed \\uXXXX escape in a value "
                       f"(four hex digits must follow \\u)")
    assert "hunter2" not in message and "jaas" not in message


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "client.properties"
    path.write_bytes("a=1\r\nssl.truststore.password=pa\xdf".encode("latin-1") + b"word\n")
    with pytest.raises(PropertiesError, match=r"line 2: not UTF-8 \(byte 32 of the file\)$") as caught:
        read(path)
    assert "pa" not in str(caught.value).split("line 2")[1]


def test_a_file_is_read_as_utf8_without_its_byte_order_mark(tmp_path):
    path = tmp_path / "client.properties"
    path.write_bytes(b"\xef\xbb\xbfsecurity.protocol=SSL\nssl.truststore.password=p\xc3\xa4ss\n")
    assert read(path) == {"security.protocol": "SSL", "ssl.truststore.password": "päss"}


def test_an_unreadable_file_is_named(tmp_path):
    with pytest.raises(PropertiesError, match=r"properties file '.*missing.properties': cannot be read \(No such file"):
        read(tmp_path / "missing.properties")
    with pytest.raises(PropertiesError, match=r"cannot be read \(Is a directory\)"):
        read(tmp_path)


def test_any_text_gives_properties_or_a_properties_error():
    for text in random_texts(43, 5000):
        try:
            parse(text)
        except PropertiesError:
            pass


def test_a_clients_error_is_shown_with_its_secrets_masked():
    """What the Kafka client says when it refuses its settings may quote them: the passwords,
    the JAAS config and each option value in it are masked, the rest is kept."""
    props = parse("security.protocol=SASL_SSL\nssl.truststore.password=tpw-1\nssl.keystore.key=KEYDATA\n"
                  "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                  "  username=etl-user password=\"hunter 2\";\n")
    said = ("Invalid value tpw-1 for configuration ssl.truststore.password; KEYDATA; "
            "Value not specified for key 'etl-user' in JAAS config (password=\"hunter 2\") over SASL_SSL")
    assert redact(said, props) == ("Invalid value *** for configuration ssl.truststore.password; ***; "
                                   "Value not specified for key '***' in JAAS config (password=***) over SASL_SSL")
