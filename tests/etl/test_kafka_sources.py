"""Debezium change events on a real Kafka broker (KRaft, started here from Maven Central) load the
worked example's dimensions into the same tables as the same changes delivered as landing files:
through a scheduled run, and through the always-on loader SIGKILLed mid-run and restarted. A run
reads recorded offset ranges: a rerun reads the same records, a late record goes to the next run,
bad records are quarantined with their offset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from etl import jobs
from etl.core.interval import Interval
from etl.core.model import load_model
from etl.core.offsets import OffsetRange
from etl.devtools import kafka_broker
from etl.devtools.cdc import KafkaRecord, create_topics, landing_lines, produce, records_of
from etl.generator import StreamSpec, generate_stream
from etl.io.tables import read
from etl.stream import Stream
from tests.helpers import ROOT, assert_entity_equals_oracle, assert_same_warehouse

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

FILES_MODEL = ROOT / "examples" / "shop" / "model.toml"
KAFKA_MODEL = ROOT / "examples" / "shop" / "kafka.toml"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
RUN = Interval(T0, T0 + timedelta(minutes=4))
NEXT = Interval(RUN.end, RUN.end + timedelta(minutes=4))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = kafka_broker.start(tmp_path_factory.mktemp("kafka"))
    yield b
    b.stop()


def in_millis(landing: Path) -> None:
    """A Kafka timestamp is in milliseconds, so is Debezium's ts_ms: the landing files carry the
    same times (the same changes, delivered two ways)."""
    for path in landing.rglob("updates-*.jsonl"):
        out = []
        for raw in path.read_text().splitlines():
            try:
                line = json.loads(raw)
                for name in ("event_ts", "arrival_ts"):
                    ts = datetime.fromisoformat(line[name])
                    line[name] = ts.replace(microsecond=ts.microsecond // 1000 * 1000).isoformat()
                raw = json.dumps(line, sort_keys=True)
            except Exception:
                pass  # a malformed line stays as it is
            out.append(raw)
        path.write_text("\n".join(out) + "\n")


def configs(cfg, tmp_path, entity: str, broker):
    files = cfg.replace(model_file=str(FILES_MODEL), entity=entity, landing_root=str(tmp_path / "landing"),
                        warehouse_root=str(tmp_path / "files" / "warehouse"), runs_root=str(tmp_path / "files" / "runs"),
                        gx_root=str(tmp_path / "files" / "gx"))
    kafka = cfg.replace(model_file=str(KAFKA_MODEL), entity=entity, landing_root=str(tmp_path / "no-landing"),
                        warehouse_root=str(tmp_path / "kafka" / "warehouse"), runs_root=str(tmp_path / "kafka" / "runs"),
                        gx_root=str(tmp_path / "kafka" / "gx"), kafka_bootstrap_servers=broker.bootstrap)
    return files, kafka


def publish(spark, broker, files, entity: str) -> int:
    kafka_entity = load_model(KAFKA_MODEL).entity(entity)
    create_topics(spark, broker.bootstrap, [t for i in kafka_entity.kafka_inputs for t in i.topics], partitions=2)
    return produce(spark, broker.bootstrap, records_of(landing_lines(files.landing_path), kafka_entity, snapshot_lines=15))


def run(spark, cfg, interval):
    ingest = jobs.ingest(spark, cfg, interval)
    jobs.load(spark, cfg, interval)
    return ingest


@pytest.mark.parametrize("entity", ["customer", "product"])
def test_change_events_on_kafka_load_the_tables_the_landing_files_give(spark, cfg, tmp_path, broker, entity):
    files, kafka = configs(cfg, tmp_path, entity, broker)
    model_entity = files.entity_model
    generate_stream(StreamSpec(start=T0, duration_s=240, rate=3, key_domain=60, seed=11, sources=model_entity.sources,
                               delete_share=0.05), files.landing_path, entity=model_entity)
    in_millis(files.landing_path)
    produced = publish(spark, broker, files, entity)
    topic = kafka.entity_model.kafka_inputs[0].topics[0]
    hostile = [b"{not json", json.dumps({"op": "t", "source": {"ts_ms": 1}}).encode(),
               json.dumps({"op": "c", "after": None, "source": {"ts_ms": 1}}).encode()]
    at = int((T0 + timedelta(minutes=2)).timestamp() * 1000)
    produce(spark, broker.bootstrap, [KafkaRecord(topic, b"bad", v, at) for v in hostile])

    run(spark, files, RUN)
    summary = run(spark, kafka, RUN)
    assert summary["kafka_ranges"] == sum(2 for i in kafka.entity_model.kafka_inputs for _ in i.topics)
    assert summary["rejected_by_reason"] == {"bad_envelope": 1, "bad_op": 1, "malformed_json": 1}
    assert summary["lines"] + summary["blank_lines"] == produced + len(hostile)  # every record: an update, a reject or a tombstone
    assert_same_warehouse(spark, files, kafka, tables=[files.entity_model.table, "key_map"])
    assert_entity_equals_oracle(spark, kafka)
    assert jobs.validate(spark, kafka, RUN, raise_on_failure=False)["success"]

    rejected = read(spark, kafka, "rejected_updates").collect()
    assert sorted(r.reason for r in rejected) == ["bad_envelope", "bad_op", "malformed_json"]
    for r in rejected:  # where to find it: the range and the offset
        rng = OffsetRange.parse(r.file_name)
        assert rng.topic == topic and rng.start <= r.line_number < rng.end

    # A rerun reads exactly the recorded ranges; a record arriving late (its time in RUN, after RUN
    # was read) goes to the next run, never lost and never read twice.
    recorded = sorted((r.file_name, r.sha256) for r in read(spark, kafka, "landed_files").collect())
    jobs.ingest(spark, kafka, RUN)
    assert sorted((r.file_name, r.sha256) for r in read(spark, kafka, "landed_files").collect()) == recorded
    late = json.dumps({"op": "t", "source": {"ts_ms": 1}}).encode()
    produce(spark, broker.bootstrap, [KafkaRecord(topic, b"late", late, at)])
    nxt = jobs.ingest(spark, kafka, NEXT)
    assert nxt["rejected_by_reason"] == {"bad_op": 1}
    ranges = [OffsetRange.parse(r.file_name) for r in read(spark, kafka, "landed_files").collect()]
    for t in {r.topic for r in ranges}:
        for p in {r.partition for r in ranges if r.topic == t}:
            mine = sorted((r.start, r.end) for r in ranges if r.topic == t and r.partition == p)
            assert all(a[1] == b[0] for a, b in zip(mine, mine[1:])), mine  # contiguous, never overlapping


STREAM_SETTINGS = dict(schedule="* * * * *", micro_batch_seconds=30, stream_grace_seconds=1, key_domain=60)


def test_the_stream_reading_kafka_killed_mid_run_and_restarted_gives_the_scheduled_runs_tables(spark, cfg, tmp_path, broker):
    files, kafka = (c.replace(**STREAM_SETTINGS) for c in configs(cfg, tmp_path, "product", broker))
    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    runs = [Interval(now - timedelta(minutes=m), now - timedelta(minutes=m - 1)) for m in (3, 2, 1)]
    generate_stream(StreamSpec(start=runs[0].start, duration_s=180, rate=3, key_domain=60, seed=5, sources=("erp",)),
                    files.landing_path, entity=files.entity_model)
    in_millis(files.landing_path)
    publish(spark, broker, files, "product")

    # `etl stream` as a real process, SIGKILLed as its third batch's key_map MERGE commits.
    names = ("warehouse_root", "landing_root", "gx_root", "runs_root", "model_file", "entity", "kafka_bootstrap_servers",
             "spark_master", "spark_shuffle_partitions", "n_part", *STREAM_SETTINGS)
    settings = {k: str(getattr(kafka, k)) for k in names}
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", ETL_CRASH_AT="load.key_map_merged:3")
    with open(tmp_path / "stream.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "etl.entrypoints.cli", "stream", "--entity", "product",
                                 "--start", runs[0].start.isoformat(), "--settings-json", json.dumps(settings)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "stream.log").read_text()[-3000:]
    assert read(spark, kafka, "batch_ledger").count() >= 1  # it had committed before it died

    # Started again: it resumes the open run from its recorded ranges and finishes every run.
    deadline = time.monotonic() + 5
    while datetime.now(timezone.utc) < runs[-1].end + timedelta(seconds=1) and time.monotonic() < deadline:
        time.sleep(0.2)
    Stream(spark, kafka).run(until=runs[-1].end)
    for r in runs:
        run(spark, files, r)
    assert_same_warehouse(spark, files, kafka, tables=[files.entity_model.table, "key_map"])
    assert_entity_equals_oracle(spark, kafka)
    ledger = read(spark, kafka, "batch_ledger").groupBy("run_key", "batch_index").count()
    assert ledger.where("count > 1").count() == 0  # no batch committed twice
    applied = read(spark, kafka, "outcome_log").groupBy("update_id").count()
    assert applied.where("count > 1").count() == 0  # no record decided twice
    assert read(spark, kafka, "outcome_log").count() == read(spark, files, "outcome_log").count()  # none lost


def test_a_scheduled_run_reading_kafka_killed_mid_load_and_rerun_gives_the_landing_files_tables(spark, cfg, tmp_path, broker):
    """`etl run` (what the DAG's tasks run) SIGKILLed between its first batch's two MERGEs, then
    run again as a retry would: the recorded ranges are read again, nothing lost or doubled."""
    files, kafka = configs(cfg, tmp_path, "customer", broker)
    files, kafka = files.replace(key_domain=60), kafka.replace(key_domain=60)
    start = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)  # not RUN: the topics hold that one's records
    interval = Interval(start, start + timedelta(minutes=3))
    generate_stream(StreamSpec(start=start, duration_s=180, rate=3, key_domain=60, seed=23, sources=("crm", "shop")),
                    files.landing_path, entity=files.entity_model)
    in_millis(files.landing_path)
    publish(spark, broker, files, "customer")

    names = ("warehouse_root", "landing_root", "gx_root", "runs_root", "model_file", "entity", "kafka_bootstrap_servers",
             "spark_master", "spark_shuffle_partitions", "n_part", "key_domain", "micro_batch_seconds")
    settings = json.dumps({k: str(getattr(kafka, k)) for k in names})
    cmd = [sys.executable, "-m", "etl.entrypoints.cli", "run", "--entity", "customer", "--start", interval.start.isoformat(),
           "--end", interval.end.isoformat(), "--settings-json", settings]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    killed = subprocess.run(cmd, cwd=ROOT, env=dict(env, ETL_CRASH_AT="load.key_map_merged:1"), capture_output=True,
                            text=True, timeout=600, start_new_session=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "validation          passed" in again.stdout, again.stdout

    run(spark, files, interval)
    assert_same_warehouse(spark, files, kafka, tables=[files.entity_model.table, "key_map"])
    assert_entity_equals_oracle(spark, kafka)
    assert read(spark, kafka, "outcome_log").count() == read(spark, files, "outcome_log").count()
    assert read(spark, kafka, "outcome_log").groupBy("update_id").count().where("count > 1").count() == 0
