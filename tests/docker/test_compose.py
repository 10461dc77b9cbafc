"""docker/: the compose file parses, its versions match the project's pins, and its Airflow
connection and paths line up with the package. No Docker engine is needed; `docker compose config`
runs too where the client has the compose plugin."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import fields

import pytest
import yaml

from etl.core.config import ENV_PREFIX, EtlConfig
from etl.entrypoints.airflow_support import SPARK_CONN_ID
from tests.helpers import ROOT

DOCKER = ROOT / "docker"
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
SPARK_SERVICES = ("spark-master", "spark-worker-1", "spark-worker-2")
ETL_IMAGE_SERVICES = ("airflow-init", *AIRFLOW_SERVICES, *SPARK_SERVICES)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    out = dict(re.match(r"([A-Za-z0-9_.\-]+)==(.+)", r).groups() for r in reqs if "==" in r)
    out["python"] = re.search(r">=(\d+\.\d+)", project["requires-python"]).group(1)
    return out


def dockerfile_args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", (DOCKER / "Dockerfile").read_text(), re.M))


def test_every_service_is_there_and_runs_this_projects_image(compose):
    services = compose["services"]
    assert {"postgres", *ETL_IMAGE_SERVICES} <= set(services)
    images = {services[s]["image"] for s in ETL_IMAGE_SERVICES}
    assert images == {"active-dw-etl:0.1.0"}
    assert services["airflow-scheduler"]["command"] == "scheduler"
    assert services["airflow-dag-processor"]["command"] == "dag-processor"
    assert services["airflow-triggerer"]["command"] == "triggerer"
    assert services["airflow-apiserver"]["command"] == "api-server"
    assert services["spark-master"]["entrypoint"][-1] == "org.apache.spark.deploy.master.Master"
    for w in ("spark-worker-1", "spark-worker-2"):
        assert services[w]["entrypoint"][-1] == "org.apache.spark.deploy.worker.Worker"


def test_the_always_on_loader_is_an_opt_in_service_stopped_gently(compose):
    stream, scheduler = compose["services"]["etl-stream"], compose["services"]["airflow-scheduler"]
    assert stream["command"] == ["etl", "stream"] and stream["profiles"] == ["stream"]
    assert stream["image"] == scheduler["image"] and stream["volumes"] == scheduler["volumes"]
    # The same warehouse, landing zone, runs and Spark master as the DAGs' jobs.
    assert {k: v for k, v in stream["environment"].items() if k.startswith("ETL_")} == \
        {k: v for k, v in scheduler["environment"].items() if k.startswith("ETL_")}
    assert stream["stop_signal"] == "SIGTERM" and stream["stop_grace_period"] == "10m"


def test_versions_match_the_pins(compose, pins):
    args = dockerfile_args()
    assert args["AIRFLOW_VERSION"] == pins["apache-airflow"]
    assert args["PYTHON_VERSION"] == pins["python"]
    assert compose["services"]["airflow-scheduler"]["build"]["args"] == {
        "AIRFLOW_VERSION": pins["apache-airflow"], "PYTHON_VERSION": pins["python"]}
    assert compose["services"]["airflow-scheduler"]["image"].endswith(":" + tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["version"])
    text = (DOCKER / "Dockerfile").read_text()
    # Everything, Spark and Delta included, is installed under the project's constraints.
    assert re.search(r"pip install .*-c /opt/etl/constraints.txt", text)
    constraints = (ROOT / "constraints.txt").read_text()
    for name in ("pyspark", "delta-spark", "apache-airflow", "apache-airflow-providers-apache-spark", "great-expectations"):
        spelled = re.escape(name).replace(r"\-", "[-_]")  # pip writes delta_spark or delta-spark
        assert re.search(rf"^{spelled}=={re.escape(pins[name])}$", constraints, re.M | re.I), name
    assert "openjdk-17" in text  # Spark 4 needs Java 17+


def test_the_spark_connection_points_at_the_compose_master(compose):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    env = compose["services"]["airflow-scheduler"]["environment"]
    var = f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}"
    conn = json.loads(env[var])
    master_cmd = compose["services"]["spark-master"]["command"]
    port = master_cmd[master_cmd.index("--port") + 1]
    url = f"spark://spark-master:{port}"
    assert f"{conn['host']}:{conn['port']}" == url == env["ETL_SPARK_MASTER"]
    for w in ("spark-worker-1", "spark-worker-2"):
        assert compose["services"][w]["command"][0] == url
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(var, env[var])
        assert SparkSubmitHook(conn_id=SPARK_CONN_ID)._connection["master"] == url


def test_paths_line_up_across_services_image_and_settings(compose):
    text = (DOCKER / "Dockerfile").read_text()
    settings = {f.name for f in fields(EtlConfig)}
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        env = compose["services"][name]["environment"]
        etl_vars = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX)}
        assert {k[len(ENV_PREFIX):].lower() for k in etl_vars} <= settings, "every ETL_* variable is a real setting"
        EtlConfig(**{k[len(ENV_PREFIX):].lower(): v for k, v in etl_vars.items()})
        mount = dict(v.split(":")[::-1] for v in compose["services"][name]["volumes"])
        assert mount["/opt/etl/var"] == "etl-var"
        for key in ("ETL_WAREHOUSE_ROOT", "ETL_LANDING_ROOT", "ETL_GX_ROOT", "ETL_RUNS_ROOT", "ETL_REPORTS_ROOT"):
            assert env[key].startswith("/opt/etl/var/"), key
            assert f"{key}={env[key]}" in text, f"the image's default for {key} is the same path"
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/etl/dags"
    # Executors read and write the same files as the driver: the same volume at the same path.
    for name in SPARK_SERVICES:
        assert "etl-var:/opt/etl/var" in compose["services"][name]["volumes"]
    # The image carries every package pyproject installs, and the DAGs.
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for pkg in [p.rstrip("*") for p in packages] + ["dags"]:
        assert f"COPY --chown=airflow:0 {pkg} /opt/etl/{pkg}" in text
        assert (ROOT / pkg).is_dir()
    assert "AIRFLOW__CORE__DAGS_FOLDER=/opt/etl/dags" in text


SECRETS = ("ETL_JWT_SECRET", "ETL_FERNET_KEY", "ETL_POSTGRES_PASSWORD", "ETL_ADMIN_PASSWORD")


def test_no_secret_has_a_working_default():
    """Compose refuses to start without each secret (``${VAR:?message}``), and no service carries a
    literal password; the message says where to read how to make one."""
    text = (DOCKER / "compose.yaml").read_text()
    uses = re.findall(r"\$\{(\w+)(:?[-?+]?)([^}]*)\}", text)
    required = {name for name, op, _ in uses if op == ":?"}
    assert required == set(SECRETS)
    for name, op, message in uses:
        if name in SECRETS:
            assert op == ":?" and "docs/deployment.md" in message, name
    assert "change-me" not in text and "airflow:airflow@" not in text
    services = yaml.safe_load(text)["services"]
    assert "airflow" not in services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert services["airflow-apiserver"]["environment"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"].startswith("/opt/etl/var/")
    init = services["airflow-init"]["command"][-1]
    assert "umask 077" in init and "chmod 600" in init and "AIRFLOW_ADMIN_PASSWORD" in init
    doc = (ROOT / "docs" / "deployment.md").read_text()
    for name in SECRETS:
        assert name in doc, f"docs/deployment.md says how to make {name}"


def test_published_ports_listen_on_loopback_unless_told_otherwise(compose):
    published = {s: svc.get("ports", []) for s, svc in compose["services"].items() if svc.get("ports")}
    assert set(published) == {"airflow-apiserver", "spark-master"}
    for ports in published.values():
        for port in ports:
            assert port.startswith("${ETL_BIND:-127.0.0.1}:"), port


def test_docker_compose_config_where_the_client_supports_it():
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no `docker compose` plugin on this machine (the YAML is checked by the tests above)")
    cmd = [docker, "compose", "-f", str(DOCKER / "compose.yaml"), "config", "--quiet"]
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    refused = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and "docs/deployment.md" in refused.stderr
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(env, **{k: "x" * 32 for k in SECRETS}))
    assert done.returncode == 0, done.stderr


def test_a_kafka_broker_is_an_opt_in_service_the_jobs_point_at(compose):
    from etl.devtools.kafka_broker import KAFKA_VERSION

    kafka = compose["services"]["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}" and kafka["profiles"] == ["kafka"]
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, single node
    assert "ports" not in kafka  # inside the compose network only
    advertised = kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"].split("//", 1)[1]
    for service in ("airflow-scheduler", "etl-stream"):
        assert compose["services"][service]["environment"]["ETL_KAFKA_BOOTSTRAP_SERVERS"] == \
            "${ETL_KAFKA_BOOTSTRAP_SERVERS:-" + advertised + "}"


def test_the_offline_path_changes_only_images_and_installs_as_the_dockerfile_does(compose, pins):
    """docker/compose.offline.yaml (images built here, no registry: `make test-compose`) overrides
    only the ``image`` of services docker/compose.yaml has, gives every service of the
    project's image the same offline image, and its Dockerfile installs what docker/Dockerfile
    does: the same Airflow and Python, the same pip install under constraints.txt, the same paths."""
    offline = yaml.safe_load((DOCKER / "compose.offline.yaml").read_text())["services"]
    assert set(offline) <= set(compose["services"])
    assert all(set(s) == {"image"} for s in offline.values()), offline
    assert {offline[s]["image"] for s in ETL_IMAGE_SERVICES} == {"active-dw-etl:0.1.0-offline"}
    text = (DOCKER / "offline" / "etl.Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    assert args["AIRFLOW_VERSION"] == pins["apache-airflow"] and args["PYTHON_VERSION"] == pins["python"]
    assert re.search(r"pip install .*-c /opt/etl/constraints.txt", text)
    official = (DOCKER / "Dockerfile").read_text()
    env = lambda t: set(re.findall(r"\b(ETL_\w+_ROOT=\S+|AIRFLOW__CORE__DAGS_FOLDER=\S+)", t))  # noqa: E731
    assert env(text) == env(official) and env(text)
    for part in ("etl", "warehouse", "expectations", "dags"):
        assert f"COPY --chown=airflow:0 {part} /opt/etl/{part}" in text, part
