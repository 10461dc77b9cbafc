import os

import pytest

from tests.helpers import ROOT


@pytest.fixture(scope="session")
def dag_bag(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-home")
    os.environ.setdefault("AIRFLOW_HOME", str(home))
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))
