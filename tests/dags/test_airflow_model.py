"""The worked example of docs/model.md through a real Airflow: with ETL_MODEL_FILE naming
examples/shop/model.toml, standalone parses one load DAG per entity; a run of the customer's
(triggered, as the scheduler would) and a backfill of the product's load their entities with the
tables the job itself gives, equal to the reference join's; the orders fact's run, triggered first,
waits for both and loads every order with their keys."""

from datetime import datetime

import pytest

from etl import jobs
from etl.core.config import load_config
from etl.core.interval import Interval
from etl.generator import StreamSpec, generate_stream
from etl.io.tables import read
from tests.dags.test_airflow_standalone import Airflow, running
from tests.helpers import ROOT, assert_entity_equals_oracle, assert_equals_oracle, deterministic_tables

pytestmark = [pytest.mark.airflow, pytest.mark.e2e]
DAY = "2026-11-20"
MODEL = ROOT / "examples" / "shop" / "model.toml"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("standalone-model")
    af = Airflow(tmp)
    af.env["ETL_MODEL_FILE"] = str(MODEL)
    for entity in ("customer", "product", "orders"):
        cfg = load_config(env=af.env, overrides={"entity": entity})
        generate_stream(StreamSpec(start=datetime.fromisoformat(f"{DAY}T10:00:00+00:00"), duration_s=600, rate=2, seed=9,
                                   sources=cfg.sources, key_domain=300), cfg.landing_path, entity=cfg.entity_model, model=cfg.model)
    with running(af, ("etl_load_customer", "etl_load_product", "etl_load_orders")):
        yield af


def test_each_entity_loads_through_its_own_dag_run_and_backfill(airflow, spark, tmp_path):
    # The fact's run first: its sensors hold it until both dimensions' runs of the interval validated.
    airflow.trigger("etl_load_orders", f"{DAY}T10:00:00Z", f"{DAY}T10:10:00Z")
    airflow.trigger("etl_load_customer", f"{DAY}T10:00:00Z", f"{DAY}T10:10:00Z")
    airflow.backfill("--dag-id", "etl_load_product", "--from-date", f"{DAY}T10:00:00+00:00",
                     "--to-date", f"{DAY}T10:00:00+00:00", "--max-active-runs", "1")
    interval = Interval.parse(f"{DAY}T10:00:00+00:00", f"{DAY}T10:10:00+00:00")
    orders_run = airflow.wait_until_finished("etl_load_orders", 1, timeout=1500)[0]  # after both dimensions'
    for entity in ("customer", "product"):
        runs = airflow.wait_until_finished(f"etl_load_{entity}", 1)
        assert runs[0]["data_interval_start"].startswith(f"{DAY}T10:00")
        cfg = load_config(env=airflow.env, overrides={"entity": entity, "spark_master": "local[2]"})
        assert jobs.report(cfg, interval)["validation"] == "passed"
        assert_equals_oracle(spark, cfg)
        assert_entity_equals_oracle(spark, cfg)
        # The same interval loaded by the job itself, into a second warehouse.
        reference = cfg.replace(warehouse_root=str(tmp_path / entity / "wh"), runs_root=str(tmp_path / entity / "runs"))
        jobs.ingest(spark, reference, interval)
        jobs.load(spark, reference, interval)
        # (less the inferred members the orders' load allocated in the dimension after its run)
        assert deterministic_tables(spark, cfg, without_inferred=True) == deterministic_tables(spark, reference)

    # The orders fact: its run waited for both dimensions (the sensors succeeded, not skipped) and
    # loaded every order with the keys of the customer and product it names.
    states = {t["task_id"]: t["state"] for t in
              airflow.api(f"/dags/etl_load_orders/dagRuns/{orders_run['dag_run_id']}/taskInstances")["task_instances"]}
    assert states["wait_for_customer"] == states["wait_for_product"] == states["validate"] == "success", states
    orders = load_config(env=airflow.env, overrides={"entity": "orders", "spark_master": "local[2]"})
    assert jobs.report(orders, interval)["validation"] == "passed"
    assert_equals_oracle(spark, orders)
    names = {d: {r.surrogate_key: (r.source_id, r.natural_key) for r in read(spark, orders.for_entity(d), "key_map").collect()}
             for d in ("customer", "product")}
    rows = read(spark, orders, "orders_fact").collect()
    assert rows and all(names["customer"][r.customer_sk] == ("shop", str(r.customer_id)) for r in rows)
    assert all(names["product"][r.product_sk] == ("erp", f'["{r.sku}","{r.region}"]') for r in rows)
