"""A real single-node Apache Kafka broker (KRaft mode: no ZooKeeper) on the loopback address, from
Kafka's own Maven Central artifacts, for the tests and the demo: nothing to install by hand.

The jars are resolved once with the Ivy that pyspark ships (the same resolver Spark uses for
``spark.jars.packages``) into ``<cache>/kafka-<version>/``; the broker runs in its own JVM and
process group, its log under its data directory. Production points the ETL at its own cluster
instead (``kafka_bootstrap_servers``, docs/deployment.md).

    python -m etl.devtools.kafka_broker start --dir var/kafka     # prints host:port
    python -m etl.devtools.kafka_broker stop --dir var/kafka
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
import uuid
from pathlib import Path

from etl.core.spark_conf import DEFAULT_TOOLS_CACHE
from etl.devtools.servers import ServerProcess, free_port, launch, refuse_if_running, resolve_jars, stop_recorded

KAFKA_VERSION = "4.1.1"
SCALA = "2.13"
DEFAULT_CACHE = DEFAULT_TOOLS_CACHE  # the broker's jars beside the recorded Spark jars (ETL_TOOLS_CACHE moves both)


def kafka_jars(version: str = KAFKA_VERSION, cache: Path = DEFAULT_CACHE) -> Path:
    """The broker's classpath directory, resolved from Maven Central the first time."""
    return resolve_jars("org.apache.kafka", f"kafka_{SCALA}", version, cache / f"kafka-{version}", cache,
                        f"Apache Kafka {version}")


class BrokerProcess(ServerProcess):
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def _properties(data_dir: Path, port: int, controller_port: int) -> str:
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={data_dir / 'log'}",
        "num.partitions=1",
        "auto.create.topics.enable=true",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "log.retention.hours=-1",  # a test's records stay for its reruns
        "",
    ])


def cluster_id(draw=lambda: uuid.uuid4().bytes) -> str:
    """A random cluster id as Kafka's own (``Uuid.randomUuid``) draws it: one in 64 base64 ids
    starts with '-', which ``StorageTool format -t`` reads as an option and fails on."""
    while True:
        cluster = base64.urlsafe_b64encode(draw()).decode().rstrip("=")
        if not cluster.startswith("-"):
            return cluster


def start(data_dir: Path, port: int = 0, version: str = KAFKA_VERSION, cache: Path = DEFAULT_CACHE,
          heap: str = "384m", timeout: float = 60.0) -> BrokerProcess:
    """Format (the first time) and start a broker on ``127.0.0.1:port`` (0: a free port)."""
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    state = data_dir / "broker.json"
    refuse_if_running(state, "a broker")
    jars = kafka_jars(version, cache)
    port = port or free_port()
    config = data_dir / "server.properties"
    config.write_text(_properties(data_dir, port, free_port()))
    classpath = str(jars / "*")
    if not (data_dir / "log" / "meta.properties").exists():
        subprocess.run(["java", "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(config)],
                       check=True, capture_output=True)
    command = ["java", f"-Xmx{heap}", "-XX:TieredStopAtLevel=1", "-cp", classpath, "kafka.Kafka", str(config)]
    return launch(command, BrokerProcess, port, data_dir, data_dir / "broker.log", state, "the Kafka broker", timeout)


def stop(data_dir: Path) -> bool:
    return stop_recorded(Path(data_dir) / "broker.json", BrokerProcess)


# --------------------------------------------------------------------------- what an operator or a producer does
# Through the Kafka client in Spark's JVM (py4j), as the tests drive the broker: the same client
# the ETL reads with, so nothing else is installed.


def _client_properties(spark, bootstrap: str, extra: dict[str, str] | None = None):
    p = spark.sparkContext._jvm.java.util.Properties()
    for k, v in {"bootstrap.servers": bootstrap, **(extra or {})}.items():
        p.put(k, v)
    return p


def _admin_call(spark, bootstrap: str, call) -> None:
    admin = spark.sparkContext._jvm.org.apache.kafka.clients.admin.Admin.create(_client_properties(spark, bootstrap))
    try:
        call(admin, spark.sparkContext._jvm)
    finally:
        admin.close()


def add_partitions(spark, bootstrap: str, topic: str, total: int) -> None:
    """Grow ``topic`` to ``total`` partitions (``kafka-topics --alter --partitions``)."""
    def call(admin, jvm):
        wanted = jvm.java.util.HashMap()
        wanted.put(topic, jvm.org.apache.kafka.clients.admin.NewPartitions.increaseTo(total))
        admin.createPartitions(wanted).all().get()
    _admin_call(spark, bootstrap, call)


_DELETE_RECORDS = """
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.TopicPartition;
public class DeleteRecords {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        try (Admin admin = Admin.create(p)) {
            admin.deleteRecords(Map.of(new TopicPartition(a[1], Integer.parseInt(a[2])),
                                       RecordsToDelete.beforeOffset(Long.parseLong(a[3])))).all().get();
        }
    }
}
"""


def _java_program(name: str, source_text: str, version: str, cache: Path, *jvm_options: str) -> list[str]:
    """The command running the single-file Java program ``name`` (its source kept in ``cache``,
    written again when it changed) against the Kafka client's jars."""
    source = cache / f"{name}.java"
    source.parent.mkdir(parents=True, exist_ok=True)
    if not source.exists() or source.read_text() != source_text:
        source.write_text(source_text)
    return ["java", *jvm_options, "-cp", str(kafka_jars(version, cache) / "*"), str(source)]


_TIMED_PRODUCER = """
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.kafka.clients.producer.*;
public class TimedProducer {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "5");
        p.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        long sent = 0;
        Exception[] failed = {null};
        Callback failure = (metadata, e) -> { if (e != null && failed[0] == null) failed[0] = e; };
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
             BufferedReader in = new BufferedReader(new InputStreamReader(new FileInputStream(a[2]), StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                int tab = line.indexOf('\\t');
                long at = Long.parseLong(line.substring(0, tab));
                long wait = at - System.currentTimeMillis();
                if (wait > 0) Thread.sleep(wait);  // what was sent leaves within linger.ms meanwhile
                producer.send(new ProducerRecord<>(a[1], null, at, null, line.substring(tab + 1).getBytes(StandardCharsets.UTF_8)),
                              failure);
                if (++sent % 1000 == 0) System.out.println(sent);
            }
            producer.flush();
        }
        if (failed[0] != null) {
            System.err.println("a record was not delivered: " + failed[0]);
            System.exit(1);
        }
        System.out.println(sent);
    }
}
"""


def timed_producer(bootstrap: str, topic: str, records: Path, version: str = KAFKA_VERSION,
                   cache: Path = DEFAULT_CACHE) -> subprocess.Popen:
    """Start a producer of its own (a JVM beside the broker, as a source system's client is) that
    sends each record of ``records`` (lines ``<timestamp ms>\\t<value>``, in time order) to
    ``topic`` when its timestamp comes, stamped with it. A producer in the driver's JVM through
    py4j (``Producer``) costs several round trips a record and fell behind 1,000 records/s while
    the driver loaded (2026-12-03); this one does not share the driver's process. Its stdout
    counts the records sent, every thousand and, once all are acknowledged, at the end; a record
    the broker did not take makes it exit 1, saying which error on stderr."""
    return subprocess.Popen(_java_program("TimedProducer", _TIMED_PRODUCER, version, cache, "-Xmx256m")
                            + [bootstrap, topic, str(records)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def delete_records(bootstrap: str, topic: str, partition: int, before: int, version: str = KAFKA_VERSION,
                   cache: Path = DEFAULT_CACHE) -> None:
    """Delete the partition's records before offset ``before``, as retention does: Kafka's Admin
    API from a JVM of its own, as an operator's tool calls it (py4j cannot pick
    ``RecordsToDelete.beforeOffset(long)`` reliably)."""
    run = subprocess.run(_java_program("DeleteRecords", _DELETE_RECORDS, version, cache)
                         + [bootstrap, topic, str(partition), str(before)], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"deleting records of {topic}:{partition} before {before} failed: {run.stderr[-2000:]}")


class Producer:
    """A Kafka producer in the session's JVM: ``send`` ``(topic, partition or None, timestamp_ms, key
    bytes or None, value bytes or None)`` records, each with its own timestamp (a producer's clock,
    late or not; None partition: by key), ``flush``, ``close``. ``properties``: more client settings."""

    def __init__(self, spark, bootstrap: str, properties: dict[str, str] | None = None) -> None:
        self._jvm = spark.sparkContext._jvm
        ser = "org.apache.kafka.common.serialization.ByteArraySerializer"
        self._producer = self._jvm.org.apache.kafka.clients.producer.KafkaProducer(_client_properties(
            spark, bootstrap, {"acks": "all", "enable.idempotence": "true", "key.serializer": ser, "value.serializer": ser,
                               **(properties or {})}))

    def send(self, topic: str, partition: int | None, ts: int, key: bytes | None, value: bytes | None) -> None:
        jvm = self._jvm
        self._producer.send(jvm.org.apache.kafka.clients.producer.ProducerRecord(
            topic, None if partition is None else jvm.java.lang.Integer(partition), jvm.java.lang.Long(ts),
            None if key is None else bytearray(key), None if value is None else bytearray(value)))

    def flush(self) -> None:
        self._producer.flush()

    def close(self) -> None:
        self._producer.close()


def send(spark, bootstrap: str, records, properties: dict[str, str] | None = None) -> int:
    """Produce ``records`` (``Producer.send``'s tuples) and wait for the broker to have them."""
    producer = Producer(spark, bootstrap, properties)
    n = 0
    try:
        for record in records:
            producer.send(*record)
            n += 1
        producer.flush()
    finally:
        producer.close()
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etl.devtools.kafka_broker", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--dir", default="var/kafka", help="the broker's data directory (default var/kafka)")
    parser.add_argument("--port", type=int, default=9092, help="listener port on 127.0.0.1 (default 9092; 0: any free)")
    args = parser.parse_args(argv)
    if args.action == "start":
        broker = start(Path(args.dir), args.port)
        print(broker.bootstrap)
    else:
        print("stopped" if stop(Path(args.dir)) else "no broker recorded there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
