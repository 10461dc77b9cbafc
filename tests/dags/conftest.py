import os

import pytest

from tests.helpers import ROOT


@pytest.fixture(scope="session")
def dag_bag(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-home")
    os.environ.setdefault("AIRFLOW_HOME", str(home))
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
    # No recorded jars: the DAGs' spark-submit settings name the packages (what a fresh site gets).
    os.environ.setdefault("ETL_SPARK_JARS_DIR", str(tmp_path_factory.mktemp("no-recorded-jars")))
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))
