"""The Kafka client's settings: the site's properties file, then kafka_bootstrap_servers."""

from __future__ import annotations

import json

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


def test_settings_the_reader_cannot_run_with_are_refused_up_front_naming_them(tmp_path):
    """Spark's Kafka source refuses them only when it reads, with a trace; the ETL's reader sets
    its offsets itself."""
    path = tmp_path / "client.properties"
    path.write_text("bootstrap.servers=b:9092\nauto.offset.reset=earliest\nenable.auto.commit true\ngroup.id=etl\n")
    with pytest.raises(ConfigError, match="auto.offset.reset, enable.auto.commit cannot be set"):
        client_properties(EtlConfig(model_file=KAFKA_MODEL, entity="product", kafka_properties_file=str(path)))


class _JavaError:
    """What py4j puts under an error: the Java exception and its causes (toString, getCause)."""

    def __init__(self, *chain: str) -> None:
        self.chain = chain

    def toString(self) -> str:
        return self.chain[0]

    def getCause(self):
        return _JavaError(*self.chain[1:]) if len(self.chain) > 1 else None


def _failed(*chain: str) -> Exception:
    exc = RuntimeError("An error occurred while calling o412.count.")
    exc.java_exception = _JavaError(*chain)
    return exc


def test_a_failed_read_is_judged_by_its_java_exceptions_and_shown_without_secrets():
    from etl.core.offsets import OffsetRange
    from etl.io.kafka import KafkaUnavailable, read_failure
    from etl.io.runs import LandingChanged

    ranges, props = [OffsetRange("t", 0, 0, 5)], {"sasl.jaas.config": 'x required password="s3cret";'}
    down = read_failure(_failed("org.apache.spark.SparkException: Job aborted due to stage failure",
                                'org.apache.kafka.common.errors.TimeoutException: JAAS password="s3cret" timed out'),
                        ranges, "r", props)
    assert isinstance(down, KafkaUnavailable) and "TimeoutException" in str(down) and "s3cret" not in str(down)
    lost = read_failure(_failed("org.apache.spark.SparkException: [KAFKA_DATA_LOSS.START_OFFSET_RESET] Some data may "
                                "have been lost ... set the source option 'failOnDataLoss' to 'false'"), ranges, "r", props)
    assert isinstance(lost, LandingChanged) and "kafka:t:0:0-5" in str(lost)
    # Spark 4.2's own words for a consumer that waited in vain (InternalKafkaConsumer).
    slow = read_failure(_failed("org.apache.spark.SparkException: Job aborted",
                                "java.util.concurrent.TimeoutException: Cannot fetch record for offset 7 in 4000 milliseconds"),
                        ranges, "r", props)
    assert isinstance(slow, KafkaUnavailable) and "Cannot fetch record" in str(slow)
    # Credentials or ACLs refused: an operator's fix, not "retry later" (the stream would retry forever).
    refused = read_failure(_failed("org.apache.spark.SparkException: Job aborted",
                                   "org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics: [t]"),
                           ranges, "r", props)
    assert isinstance(refused, ConfigError) and "ACLs" in str(refused)
    # A bug of ours whose trace merely mentions Kafka's package is not "retry later".
    bug = _failed("org.apache.spark.api.python.PythonException: ZeroDivisionError at org.apache.kafka.clients.Foo")
    assert read_failure(bug, ranges, "r", props) is None


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
    tests' files and 1,000 random ones, refused by both or read into the same properties."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    jvm = spark.sparkContext._jvm
    # The properties Java read cross py4j as one JSON text (Spark's own Jackson): a round trip per
    # key and value took 56 ms a file, most of this test's 50 s in CI.
    as_json = jvm.com.fasterxml.jackson.databind.ObjectMapper()
    properties, reader = jvm.java.util.Properties, jvm.java.io.StringReader

    def java(text: str):
        props = properties()
        try:
            props.load(reader(text))
        except (Py4JJavaError, CapturedException):  # PySpark hands some Java exceptions back as its own
            return None
        return json.loads(as_json.writeValueAsString(props))

    def ours(text: str):
        try:
            return parse(text)
        except PropertiesError:
            return None

    def crosses_py4j(props) -> bool:  # a lone surrogate (an escaped half of a pair) reaches Python as '?'
        return props is None or not any(0xD800 <= ord(c) <= 0xDFFF for kv in props.items() for part in kv for c in part)

    # 1,000 random texts, a few py4j round trips each (the parser was also checked against a
    # literal port of the JDK's code on 400,000 without a JVM).
    texts = [text for text, _ in CASES.values()] + random_texts(7, 1000)
    read = [(text, java(text), mine) for text in texts if crosses_py4j(mine := ours(text))]
    assert len(read) > 850
    assert not [r for r in read if r[1] != r[2]], [r for r in read if r[1] != r[2]][:5]
    assert sum(theirs is None for _, theirs, _ in read) > 20  # Java's refusals were tried too


class _Consumer:
    """A Kafka client whose calls fail as the real one's do, for Broker's judgement of the failure."""

    def __init__(self, *chain: str) -> None:
        self.chain = chain

    def listTopics(self):
        raise _failed(*self.chain)

    def close(self) -> None:
        pass


class _Jvm:
    def __init__(self, creation_chain=None, call_chain=None) -> None:
        outer = self

        class Properties(dict):
            def put(self, k, v):
                self[k] = v

            def putIfAbsent(self, k, v):
                self.setdefault(k, v)

        def consumer(_props):
            if outer.creation_chain:
                raise _failed(*outer.creation_chain)
            return _Consumer(*outer.call_chain)

        self.creation_chain, self.call_chain = creation_chain, call_chain
        self.java = type("java", (), {"util": type("util", (), {"Properties": Properties})})
        self.org = type("org", (), {"apache": type("apache", (), {"kafka": type("kafka", (), {"clients": type(
            "clients", (), {"consumer": type("consumer", (), {"KafkaConsumer": staticmethod(consumer)})})})})})


def _session(jvm):
    return type("Spark", (), {"sparkContext": type("SC", (), {"_jvm": jvm})})


@pytest.mark.parametrize("chain, kind", [
    # Bootstrap names that do not resolve (brokers restarting under Kubernetes): retry later.
    (("org.apache.kafka.common.KafkaException: Failed to construct kafka consumer",
      "org.apache.kafka.common.config.ConfigException: No resolvable bootstrap urls given in bootstrap.servers"), "unavailable"),
    # A setting the client refuses: the operator's, exit 2.
    (("org.apache.kafka.common.KafkaException: Failed to construct kafka consumer",
      "org.apache.kafka.common.config.ConfigException: Invalid value x for configuration request.timeout.ms"), "config"),
])
def test_a_client_that_cannot_be_made_is_judged_by_its_cause(chain, kind):
    from etl.io.kafka import Broker, KafkaUnavailable

    with pytest.raises(KafkaUnavailable if kind == "unavailable" else ConfigError) as err:
        Broker(_session(_Jvm(creation_chain=chain)), {"bootstrap.servers": "kafka-0.kafka:9092"})
    assert "An error occurred while calling" not in str(err.value)


def test_a_cluster_that_refuses_the_credentials_is_an_operators_fix_not_retry_later():
    from etl.io.kafka import Broker, KafkaUnavailable

    broker = Broker(_session(_Jvm(call_chain=("org.apache.kafka.common.errors.SaslAuthenticationException: "
                                               "Authentication failed: Invalid username or password",))),
                    {"bootstrap.servers": "b:9093", "sasl.jaas.config": 'x required password="hunter2";'})
    with pytest.raises(ConfigError, match="refused the client") as err:
        broker.topics()
    assert not isinstance(err.value, KafkaUnavailable)
    down = Broker(_session(_Jvm(call_chain=("org.apache.kafka.common.errors.TimeoutException: Timeout expired "
                                             "while fetching topic metadata",))), {"bootstrap.servers": "b:9093"})
    with pytest.raises(KafkaUnavailable, match="TimeoutException"):
        down.topics()


def test_a_piece_reads_its_own_rows_and_only_its_neighbours_of_the_rest(spark, cfg):
    """``recorded_ranges`` against the pure rule (``etl.core.offsets.neighbours``) on ``landed_files``
    as runs write it: two runs' 2-s pieces of two partitions (a range of a piece that read nothing
    repeats), where each piece ended, offsets lost to retention, a topic recorded as absent, a
    landing file; the piece planned lies between recorded ones of its own run."""
    from datetime import datetime, timedelta, timezone

    from etl.core.interval import Interval
    from etl.core.offsets import OffsetRange, Recorded, absent_name, neighbours, piece_end_name
    from etl.io.kafka import recorded_ranges
    from etl.io.tables import append
    from warehouse.schemas import LANDED_FILES

    t0 = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
    runs = [Interval(t0, t0 + timedelta(minutes=1)), Interval(t0 + timedelta(minutes=1), t0 + timedelta(minutes=2))]
    rows, offset = [], {0: 0, 1: 0}
    for run in runs:
        for second in range(0, 60, 2):
            at = run.start + timedelta(seconds=second)
            names = [piece_end_name(at + timedelta(seconds=2))]
            for p in (0, 1):
                n = (second // 2) % 3 * p  # partition 0's ranges are all empty: the same name in every piece
                names.append(OffsetRange("t", p, offset[p], offset[p] + n).name)
                offset[p] += n
            if second == 30:
                names += [absent_name("u"), "kafka:t:1:500-510:lost"]
            rows += [(run.run_key, name, "shop", at.replace(tzinfo=None), 0, "", 0, 0) for name in names]
    a, b = runs[1].start + timedelta(seconds=20), runs[1].start + timedelta(seconds=40)
    rows += [
        # a landing file of the piece's own minutes: not a Kafka row
        (runs[1].run_key, "crm/updates-20261122T1001.jsonl", "crm", runs[1].start.replace(tzinfo=None), 10, "x", 1, 0),
        # a dotted topic's range, and another run's rows inside the piece and at its very start
        # (runs never overlap; these only check that the piece's own rows are its run's)
        ("other-run", "kafka:orders.v2-eu:0:0-4", "shop", (a + timedelta(seconds=4)).replace(tzinfo=None), 0, "", 0, 0),
        ("other-run", "kafka:t:1:900-901", "shop", a.replace(tzinfo=None), 0, "", 0, 0),
        # a name that ends in a line break is no range (Java's $ would take it for one)
        ("other-run", "kafka:t:0:9000-9001\n", "shop", (a - timedelta(minutes=5)).replace(tzinfo=None), 0, "", 0, 0),
    ]
    append(spark.createDataFrame(rows, LANDED_FILES), cfg, "landed_files")

    own, others = recorded_ranges(spark, cfg, runs[1], a, b)

    utc = timezone.utc
    mine = sorted((r[1], r[3].replace(tzinfo=utc)) for r in rows if r[0] == runs[1].run_key and r[1].startswith("kafka:")
                  and a <= r[3].replace(tzinfo=utc) < b)
    epoch = datetime(1970, 1, 1, tzinfo=utc)
    assert sorted((r.file_name, epoch + timedelta(microseconds=r.minute_us)) for r in own) == mine
    parsed = [Recorded.parse(r[3].replace(tzinfo=utc), r[1]) for r in rows
              if not (r[0] == runs[1].run_key and a <= r[3].replace(tzinfo=utc) < b)]
    expected = neighbours([p for p in parsed if p is not None], a)
    assert sorted(others, key=repr) == sorted(expected, key=repr)
    # partitions 0 and 1 each before and after the piece (1 at its start too), topic u absent, orders.v2-eu after
    assert len(others) == 7


def test_the_streams_carried_neighbours_are_the_tables_until_another_loader_writes_it(spark, cfg):
    """``KnownRanges`` on Delta: piece after piece planned without reading ``landed_files``, what
    it carries equal to what the table answers; the next piece reads the table again after a write
    by anyone else between two pieces or during one, a range left without its row, a piece
    failed or written over, or a piece before the carried ones."""
    from datetime import datetime, timedelta, timezone

    from etl.core.interval import Interval
    from etl.core.offsets import OffsetRange, absent_name
    from etl.io.kafka import KafkaPlan, KnownRanges, PlannedRange, piece_neighbours, recorded_ranges
    from etl.io.tables import open_tables
    from warehouse.schemas import LANDED_FILES

    tables = open_tables(spark, cfg)
    t0 = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
    run, step = Interval(t0, t0 + timedelta(minutes=2)), timedelta(seconds=5)
    offset, known, reads = {0: 0, 1: 0}, KnownRanges(), []

    def row(run_key: str, name: str, at: datetime) -> tuple:
        return (run_key, name, "shop", at.replace(tzinfo=None), 0, "", 0, 0)

    def foreign() -> None:  # another loader records a range of an earlier run
        tables.append(spark.createDataFrame([row("other", "kafka:t:1:900-901", t0 - timedelta(minutes=9))], LANDED_FILES),
                      "landed_files")

    def piece(a, during=None, unseen: int = 0) -> list:
        """A piece as the ingest plans and writes it (``unseen``: ranges whose records all went
        unseen, without their row); returns the neighbours it was planned from."""
        b = a + step
        before = known.carried
        carried = piece_neighbours(spark, cfg, run, a, b, known)[1]
        if known.carried == before:
            reads.append(a)
        else:  # what the table would have answered
            assert sorted(carried, key=repr) == sorted(recorded_ranges(spark, cfg, run, a, b)[1], key=repr)
        plan = KafkaPlan()
        for p in (0, 1):
            plan.ranges.append(PlannedRange(None, OffsetRange("t", p, offset[p], offset[p] + 2 * p), a, b))
            offset[p] += 2 * p
        if a == t0:
            plan.markers.append((None, absent_name("u"), a))
        names = [r.range.name for r in plan.ranges][unseen:] + [m[1] for m in plan.markers]
        if during:
            during()
        tables.append(spark.createDataFrame([row(run.run_key, n, a) for n in names], LANDED_FILES), "landed_files")
        known.written(tables, plan, b, kafka_rows=len(names))
        return carried

    pieces = [t0 + i * step for i in range(12)]
    for a in pieces[:4]:
        piece(a)
    assert reads == pieces[:1] and known.carried == 3  # only the first piece read the table
    foreign()  # between two pieces
    assert any(r.range is not None and r.range.end == 901 for r in piece(pieces[4]))
    piece(pieces[5], during=foreign)  # during a piece: its own write is not the only one
    piece(pieces[6])
    piece(pieces[7], unseen=1)  # partition 0's range has no row
    piece(pieces[8])
    known.forget()  # what the ingest does when a piece fails or is written over
    piece(pieces[9])
    assert known.take(tables, pieces[9]) is None  # a piece before the carried ones reads the table
    assert reads == [pieces[i] for i in (0, 4, 6, 8, 9)]

