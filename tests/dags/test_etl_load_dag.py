import functools
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.airflow

GRAPHS = {
    "etl_load": {
        "route": {"ingest_load_validate", "loaded_by_stream"},
        "loaded_by_stream": {"validate"},
        "ingest_load_validate": {"report"},
        "validate": {"report"},
        "report": set(),
    },
    "etl_quality_report": {"quality_report": {"publish"}, "publish": set()},
    "etl_maintenance": {"rebalance": {"optimize"}, "optimize": {"vacuum"}, "vacuum": set()},
}


def test_no_import_errors(dag_bag):
    assert dag_bag.import_errors == {}
    assert set(dag_bag.dags) == set(GRAPHS)


@pytest.mark.parametrize("dag_id", sorted(GRAPHS))
def test_task_graph(dag_bag, dag_id):
    dag = dag_bag.dags[dag_id]
    assert {t.task_id: set(t.downstream_task_ids) for t in dag.tasks} == GRAPHS[dag_id]


@pytest.mark.parametrize("dag_id", sorted(GRAPHS))
def test_policy(dag_bag, dag_id):
    dag = dag_bag.dags[dag_id]
    assert dag.max_active_runs == 1
    assert dag.catchup is False  # no surprise backfill when a DAG is unpaused: backfills are explicit
    assert "etl" in dag.tags
    for task in dag.tasks:
        assert task.owner == "data-engineering"
        assert task.retries >= 1


def test_spark_tasks_of_every_dag_submit_the_etl_entry_point(dag_bag):
    expected = {
        ("etl_quality_report", "quality_report"): ["quality-report"],
        ("etl_maintenance", "rebalance"): ["maintain", "--steps", "rebalance"],
        ("etl_maintenance", "optimize"): ["maintain", "--steps", "optimize"],
        ("etl_maintenance", "vacuum"): ["maintain", "--steps", "vacuum"],
    }
    for (dag_id, task_id), args in expected.items():
        task = dag_bag.dags[dag_id].get_task(task_id)
        assert task._conn_id == "etl_spark" and task.application.endswith("etl/entrypoints/spark_entry.py")
        assert task.application_args[: len(args)] == args


def test_report_follows_whichever_path_route_took(dag_bag):
    """One of ingest_load_validate and validate is skipped by route: report runs after the other,
    and not after a failure."""
    dag = dag_bag.dags["etl_load"]
    assert dag.get_task("report").trigger_rule == "none_failed_min_one_success"
    assert dag.get_task("validate").trigger_rule == "all_success"  # skipped with loaded_by_stream


def test_strategy_settings_are_a_run_parameter_limited_to_the_strategies_own(dag_bag):
    import copy

    dag = dag_bag.dags["etl_load"]
    param = dag.params.get_param("strategy_settings")
    assert param.value == {}
    args = dag.get_task("ingest_load_validate").application_args
    assert args[args.index("--strategy-settings") + 1] == "{{ params.strategy_settings | tojson }}"
    assert "--settings-json" not in args

    def accepted(value) -> bool:
        try:
            copy.deepcopy(param).resolve(value)  # what Airflow does with a triggered run's conf
        except Exception:
            return False
        return True

    assert accepted({"n_invoke": 500, "k": 4, "r_wb": 0.5})
    for hostile in ({"warehouse_root": "/tmp/elsewhere"}, {"landing_root": "/"}, {"gx_root": "/x"},
                    {"meta_root": "/x"}, {"sources": "evil"}, {"max_rejected_fraction": 1},
                    {"n_invoke": "a lot"}, {"n_invoke": -1}):
        assert not accepted(hostile), hostile


def test_spark_tasks_use_the_connection_and_delta(dag_bag):
    dag = dag_bag.dags["etl_load"]
    for task_id in ("ingest_load_validate", "validate"):
        task = dag.get_task(task_id)
        assert task._conn_id == "etl_spark"
        assert task.application.endswith("etl/entrypoints/spark_entry.py")
        assert "io.delta:delta-spark" in task.conf["spark.jars.packages"]
        # One driver per interval: ingest, load and validate are `etl run`'s stages, not three tasks.
        assert task.application_args[0] == {"ingest_load_validate": "run", "validate": "validate"}[task_id]
    assert "{{ params.join_strategy }}" in dag.get_task("ingest_load_validate").application_args


def test_join_strategy_parameter_offers_every_strategy(dag_bag):
    from etl.core.registry import NAMES as JOIN_STRATEGIES

    param = dag_bag.dags["etl_load"].params.get_param("join_strategy")
    assert param.value == "native"
    assert param.schema["enum"] == list(JOIN_STRATEGIES)


def test_runs_cover_cron_data_intervals(dag_bag):
    """A run's data interval is the cron interval it closes (not a point in time)."""
    from airflow.sdk import CronDataIntervalTimetable

    timetable = dag_bag.dags["etl_load"].timetable
    assert isinstance(timetable, CronDataIntervalTimetable)
    assert timetable.expression == "0 * * * *"  # @hourly


DAG_FILES = ["etl_load.py", "etl_quality_report.py", "etl_maintenance.py"]


@functools.cache
def heavy_modules_by_dag_file() -> dict[str, list[str]]:
    """Each DAG file parsed in turn in one fresh interpreter: the heavy modules each one added (a
    file parsed after one that loaded some is reported as unchecked)."""
    from tests.helpers import ROOT

    code = (
        "import json, sys, runpy; out = {}; before = []\n"
        f"for name in {DAG_FILES!r}:\n"
        f"    runpy.run_path({str(ROOT / 'dags')!r} + '/' + name)\n"
        "    heavy = [m for m in ('pyspark.sql', 'great_expectations', 'delta') if m in sys.modules]\n"
        "    out[name] = ['unchecked: loaded before it'] if before else heavy\n"
        "    before = before or heavy\n"
        "print(json.dumps(out))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dag_file", DAG_FILES)
def test_parsing_imports_no_spark_or_gx(dag_file):
    assert heavy_modules_by_dag_file()[dag_file] == []


def test_parse_time_is_bounded(dag_bag):
    """The scheduler parses DAG files continuously: keep it well under a second."""
    stats = {s.file: s.duration.total_seconds() for s in dag_bag.dagbag_stats}
    assert all(stats[f] < 2.0 for f in ("etl_load.py", "etl_quality_report.py", "etl_maintenance.py")), stats


SHOP_GRAPHS = {
    **{f"etl_load_{e}": GRAPHS["etl_load"] for e in ("customer", "product")},
    # the orders fact waits for its two dimensions' loads of the same interval
    "etl_load_orders": {**GRAPHS["etl_load"], "wait_for_customer": {"route"}, "wait_for_product": {"route"}},
    **{f"etl_quality_report_{e}": GRAPHS["etl_quality_report"] for e in ("customer", "product", "orders")},
    **{f"etl_maintenance_{e}": GRAPHS["etl_maintenance"] for e in ("customer", "product", "orders")},
}


# The models the tests below parse, each with the settings it is parsed with: one interpreter
# parses them all (a DagBag per model; the DAG files read the model from the environment).
MODELS = {
    "shop": ("examples/shop/model.toml", {}),
    "facts": ("tests/models/facts/orders.toml", {"ETL_DIMENSION_POKE_SECONDS": "5"}),
    "kafka": ("examples/shop/kafka.toml", {}),
    # a warehouse on S3 whose store settings (keys among them) are in a file the DAGs never read
    "s3": ("examples/shop/model.toml", {"ETL_WAREHOUSE_ROOT": "s3a://bucket/warehouse", "ETL_META_ROOT": "/shared/meta",
                                        "ETL_SPARK_PROPERTIES_FILE": "/etc/etl/s3a.properties"}),
}


@functools.cache
def parsed_models(home: str) -> dict[str, dict]:
    from tests.helpers import ROOT

    code = (
        "import json, os, sys; from airflow.dag_processing.dagbag import DagBag; result = {}\n"
        "for name, (model, settings) in json.loads(sys.argv[1]).items():\n"
        "    os.environ.update(settings, ETL_MODEL_FILE=model)\n"
        f"    bag = DagBag(dag_folder={str(ROOT / 'dags')!r})\n"
        "    result[name] = {'errors': {k: str(v) for k, v in bag.import_errors.items()}, 'dags': {d.dag_id: {"
        "'graph': {t.task_id: sorted(t.downstream_task_ids) for t in d.tasks},"
        "'args': {t.task_id: list(getattr(t, 'application_args', None) or []) for t in d.tasks},"
        "'senses': {t.task_id: [t.external_dag_id, t.external_task_id, t.mode, t.soft_fail, t.poke_interval, t.timeout] for t in d.tasks if hasattr(t, 'external_dag_id')},"
        "'strategy': d.params.get_param('join_strategy').value if 'join_strategy' in d.params else None,"
        "'packages': {t.task_id: (getattr(t, 'conf', None) or {}).get('spark.jars.packages') for t in d.tasks if getattr(t, 'conf', None)},"
        "'properties': {t.task_id: t.properties_file for t in d.tasks if hasattr(t, 'properties_file')},"
        "'tags': sorted(d.tags)} for d in bag.dags.values()}}\n"
        "    for key in settings: os.environ.pop(key)\n"
        "print(json.dumps(result))"
    )
    env = {**os.environ, "AIRFLOW_HOME": home, "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"), "ETL_SPARK_JARS_DIR": f"{home}/no-recorded-jars"}
    models = {name: (str(ROOT / path), settings) for name, (path, settings) in MODELS.items()}
    done = subprocess.run([sys.executable, "-c", code, json.dumps(models)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def dags_of_model(name: str, tmp_path_factory) -> dict:
    """The DAGs of model ``name`` (MODELS), parsed from the model file alone, as a dict."""
    got = parsed_models(str(tmp_path_factory.getbasetemp() / "airflow-models"))[name]
    assert got["errors"] == {}
    return got["dags"]


def test_the_example_model_gets_one_dag_of_each_kind_per_entity(tmp_path_factory):
    """The worked example's model (docs/model.md: two dimensions and a fact): the DAGs come from
    the model file alone, each task works on its DAG's entity, and each DAG's join strategy is its
    entity's."""

    dags = dags_of_model("shop", tmp_path_factory)
    assert {d: {t: set(n) for t, n in v["graph"].items()} for d, v in dags.items()} == SHOP_GRAPHS
    for entity, strategy in (("customer", "partitioned-range"), ("product", "partitioned-hash"), ("orders", "native")):
        load = dags[f"etl_load_{entity}"]
        assert load["strategy"] == strategy and f"entity:{entity}" in load["tags"]
        assert bool(load["senses"]) == (entity == "orders")  # a dimension waits for nobody
        for kind in ("load", "quality_report", "maintenance"):
            for task, args in dags[f"etl_{kind}_{entity}"]["args"].items():
                if args:
                    assert args[args.index("--entity") + 1] == entity, (kind, task)


def test_a_fact_s_load_waits_for_its_dimensions_loads_of_the_same_interval(tmp_path_factory):

    dags = dags_of_model("facts", tmp_path_factory)  # parsed with dimension_poke_seconds = 5
    load = dags["etl_load_orders"]
    waits = {"wait_for_customer": {"route"}, "wait_for_product": {"route"}}
    assert {t: set(n) for t, n in load["graph"].items()} == {**{t: set(n) for t, n in GRAPHS["etl_load"].items()}, **waits}
    # the sensors poke the dimensions' load DAGs' report task (after the interval validated), freeing their slot in between, and
    # give way (skipped, the load goes on) when a dimension has not loaded within the wait; how
    # often they ask and how long they wait are settings (dimension_poke_seconds, dimension_wait_seconds)
    assert load["senses"] == {"wait_for_customer": ["etl_load_customer", "report", "reschedule", True, 5.0, 3600.0],
                              "wait_for_product": ["etl_load_product", "report", "reschedule", True, 5.0, 3600.0]}
    assert set(dags) == {f"etl_{k}_{e}" for k in ("load", "quality_report", "maintenance") for e in ("customer", "product", "orders")}


def test_a_model_reading_kafka_topics_gets_the_same_dags_with_spark_kafka_source(tmp_path_factory):
    """examples/shop/kafka.toml (the dimensions fed by Debezium on Kafka, docs/sources.md): the same
    DAGs as the landing-file model, and every Spark task fetches Spark's Kafka source."""
    from etl.core.spark_conf import kafka_package

    dags = dags_of_model("kafka", tmp_path_factory)
    assert {d: {t: set(n) for t, n in v["graph"].items()} for d, v in dags.items()} == SHOP_GRAPHS
    packages = [p for d in dags.values() for p in d["packages"].values()]
    assert packages and all(kafka_package() in p.split(",") for p in packages)



def test_a_warehouse_on_s3_gets_the_same_dags_with_the_s3a_connector_and_the_site_s_properties_file(tmp_path_factory):
    """ETL_WAREHOUSE_ROOT=s3a://... (docs/deployment.md): every Spark task fetches the S3A
    connector and hands spark-submit the site's properties file by its path (its values, keys
    among them, stay out of the DAG: the file does not even exist where the DAGs are parsed)."""
    dags = dags_of_model("s3", tmp_path_factory)
    assert {d: {t: set(n) for t, n in v["graph"].items()} for d, v in dags.items()} == SHOP_GRAPHS
    properties = {(d, t): f for d, v in dags.items() for t, f in v["properties"].items()}
    assert len(properties) == 18 and set(properties.values()) == {"/etc/etl/s3a.properties"}  # 3 entities x 6 Spark tasks
    packages = [p for d in dags.values() for p in d["packages"].values()]
    assert len(packages) == 18 and all("org.apache.hadoop:hadoop-aws:3.5.0" in p.split(",") for p in packages)
