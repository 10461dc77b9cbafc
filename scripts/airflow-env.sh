# Environment for running this project's DAGs on the embedded default: SQLite Airflow under var/,
# the project's dags/, no example DAGs, modest parallelism for 2 cores, Spark local.
# Source it: `. scripts/airflow-env.sh`. Every value can be overridden beforehand.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$ROOT/.venv/bin:$PATH"
export AIRFLOW_HOME=${AIRFLOW_HOME:-$ROOT/var/airflow}
export AIRFLOW__CORE__DAGS_FOLDER=${AIRFLOW__CORE__DAGS_FOLDER:-$ROOT/dags}
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__PARALLELISM=${AIRFLOW__CORE__PARALLELISM:-2}
export AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG=${AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG:-2}
export AIRFLOW__LOGGING__LOGGING_LEVEL=${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}
# The Spark master of the jobs comes from this Airflow connection (local unless you change it).
export AIRFLOW_CONN_ETL_SPARK=${AIRFLOW_CONN_ETL_SPARK:-'{"conn_type": "spark", "host": "local[2]"}'}
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$ROOT/.venv/bin/python}
export PYSPARK_DRIVER_PYTHON=${PYSPARK_DRIVER_PYTHON:-$ROOT/.venv/bin/python}
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export ETL_WAREHOUSE_ROOT=${ETL_WAREHOUSE_ROOT:-$ROOT/var/warehouse}
export ETL_LANDING_ROOT=${ETL_LANDING_ROOT:-$ROOT/var/landing}
export ETL_GX_ROOT=${ETL_GX_ROOT:-$ROOT/var/gx}
export ETL_RUNS_ROOT=${ETL_RUNS_ROOT:-$ROOT/var/runs}
export ETL_REPORTS_ROOT=${ETL_REPORTS_ROOT:-$ROOT/var/reports}
(umask 077; mkdir -p "$AIRFLOW_HOME")  # the metadata DB, logs and the admin password: private
