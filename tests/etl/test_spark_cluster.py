"""The job, unchanged, on a Spark standalone cluster: a master and two workers started from the
installed pyspark on 127.0.0.1, the ETL submitted with ``--master spark://...``; its tables must
equal a local-mode run's (the same job in the tests' local[2] session). Every process started here is stopped here."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from etl import jobs
from etl.core.config import load_config
from etl.core.interval import Interval
from etl.entrypoints.airflow_support import APPLICATION, submit_conf
from etl.generator import StreamSpec, generate_stream
from tests.helpers import T0, deterministic_tables
from tests.processes import Group

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

STRATEGY = "partitioned-range"
SETTINGS = {"memory_budget": 200_000, "n_invoke": 40, "wait_buffer_tuples": 300, "micro_batch_seconds": 60}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


class Cluster:
    """A standalone master and workers as child processes in their own process groups."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root, self.procs = root, []
        self.port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                        SPARK_LOG_DIR=str(root / "logs"), PYSPARK_PYTHON=sys.executable)
        self.work_dirs = [root / f"worker-{i}" for i in range(workers)]
        root.mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", "org.apache.spark.deploy.master.Master",
                        "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui))
            self.wait(lambda s: s.get("status") == "ALIVE", "the master")
            self.url = self.state()["url"]  # the port it bound, which may not be the one asked for
            for i, work in enumerate(self.work_dirs):
                work.mkdir(parents=True)
                self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                            "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(work))
            self.wait(lambda s: sum(w["state"] == "ALIVE" for w in s.get("workers", [])) == workers, "both workers")
        except BaseException:
            self.stop()  # never leave a daemon behind when the cluster does not come up
            raise

    def _start(self, name: str, cls: str, *args: str) -> None:
        self.procs.append(Group([str(spark_home() / "bin" / "spark-class"), cls, *args], self.root / f"{name}.log", self.env))

    def ui_port(self) -> int | None:
        """The port the master's log says its UI bound: Spark moves to the next port when the one
        asked for was taken in the meantime (``free_port`` only saw it free)."""
        log = (self.root / "master.log").read_text(errors="replace")
        found = re.findall(r"started service 'MasterUI' on port (\d+)", log)
        return int(found[-1]) if found else None

    def state(self) -> dict:
        ui = self.ui_port()
        if ui is None:
            return {}
        # An HTML answer (seen once in CI, under load) counts as not up yet, like a refused connection.
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                return json.load(r)
        except (OSError, ValueError):
            return {}

    def wait(self, ok, what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not all(p.running() for p in self.procs):
                raise RuntimeError(f"a Spark daemon exited while waiting for {what}; logs in {self.root}")
            if ok(self.state()):
                return
            time.sleep(1)
        raise TimeoutError(f"timed out waiting for {what}; logs in {self.root}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.signal(signal.SIGTERM)
        for p in self.procs:
            p.stop(grace=30)


def job_env(cfg) -> dict[str, str]:
    # Spark SQL's generated code as in production (the tests' other processes interpret:
    # docs/decisions/driver-codegen-for-tests.md): the job on the cluster is the product's, unchanged.
    return {"ETL_WAREHOUSE_ROOT": cfg.warehouse_root, "ETL_LANDING_ROOT": cfg.landing_root, "ETL_GX_ROOT": cfg.gx_root,
            "ETL_RUNS_ROOT": cfg.runs_root, "ETL_KEY_DOMAIN": str(cfg.key_domain), "ETL_SPARK_SHUFFLE_PARTITIONS": "2",
            "ETL_SPARK_CODEGEN": "true"}


def submit(cfg, master: str, interval: Interval, extra_conf: dict[str, str], log: Path) -> None:
    """What the DAG's SparkSubmitOperator runs: spark-submit of the job with the job's conf."""
    conf = {**submit_conf(cfg), **extra_conf}
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", master]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [APPLICATION, "run", "--start", interval.start.isoformat(), "--end", interval.end.isoformat(),
            "--join-strategy", STRATEGY, "--settings-json", json.dumps(SETTINGS)]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", **job_env(cfg))
    with open(log, "w") as out:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=900)
    assert done.returncode == 0, log.read_text()[-3000:]


def test_the_job_on_a_standalone_cluster_equals_the_local_run(spark, cfg, tmp_path):
    from etl.io.tables import read

    # Two micro-batches: the second finds the first's state (wait buffer, segments) on the cluster.
    interval = Interval(T0, T0.replace(minute=2))
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=6, key_domain=cfg.key_domain, seed=11), cfg.landing_path)
    local = cfg.replace(warehouse_root=str(tmp_path / "wh-local"), runs_root=str(tmp_path / "runs-local"),
                        gx_root=str(tmp_path / "gx-local"))
    on_cluster = cfg.replace(warehouse_root=str(tmp_path / "wh-cluster"), runs_root=str(tmp_path / "runs-cluster"),
                             gx_root=str(tmp_path / "gx-cluster"),
                             spark_driver_java_options=os.environ.get("ETL_SPARK_DRIVER_JAVA_OPTIONS", ""))
    # The local-mode run: the same job, with the configuration spark-submit's driver builds (the
    # environment and --settings-json), in this test's local[2] session; its tables in memory
    # (a reference: tests.helpers.reference_in_memory), the cluster's on Delta.
    as_submitted = load_config(env=job_env(local), overrides={**SETTINGS, "table_store": "memory"})
    jobs.ingest(spark, as_submitted, interval)
    jobs.load(spark, as_submitted, interval, strategy=STRATEGY)

    cluster = Cluster(tmp_path / "cluster")
    try:
        submit(on_cluster, cluster.url, interval,
               {"spark.executor.memory": "768m", "spark.cores.max": "2", "spark.executor.cores": "1",
                # short-lived executors, as the tests' drivers (tests/conftest.py)
                "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"},
               tmp_path / "cluster.log")
        apps = cluster.state().get("completedapps", [])
    finally:
        cluster.stop()
    assert not any(p.running() for p in cluster.procs)

    # It really ran on the cluster: one finished application, with an executor on each worker.
    assert [a["state"] for a in apps] == ["FINISHED"]
    for work in cluster.work_dirs:
        assert list(work.glob("app-*/*/stderr")), f"no executor ran on {work}"

    assert deterministic_tables(spark, on_cluster) == deterministic_tables(spark, as_submitted)
    assert read(spark, on_cluster, "outcome_log").count() > 0
