#!/usr/bin/env bash
# The worked example of docs/model.md as a demo (`make demo-shop`): examples/shop/model.toml's
# customer and product dimensions, then its orders fact, each through its own load DAG with
# `airflow dags test` on an embedded SQLite Airflow, for the last complete 5 minutes. The orders
# DAG's sensors find both dimensions' runs of the interval reported (loaded and validated), so it loads at once.
set -euo pipefail
cd "$(dirname "$0")/.."
export ETL_MODEL_FILE=${ETL_MODEL_FILE:-$PWD/examples/shop/model.toml}
. scripts/demo-env.sh var/demo-shop.log

echo "==> preparing Airflow (SQLite under $AIRFLOW_HOME)"
airflow db migrate >>"$log" 2>&1 || { tail -30 "$log"; echo "airflow db migrate failed; see $log" >&2; exit 1; }
for entity in customer product orders; do
  echo "==> $entity: generating [$start, $end), then DAG etl_load_$entity (airflow dags test)"
  etl generate --entity "$entity" --start "$start" --duration 300 --rate 10 --key-domain 500 --overwrite 2>>"$log" >>"$log"
  if ! PYTHONUNBUFFERED=1 airflow dags test "etl_load_$entity" "$end" 2>&1 | tee -a "$log" | python -m etl.devtools.dag_test_progress; then
    grep -E "ERROR|Error|error:" "$log" | tail -20 >&2
    echo "the DAG run of $entity failed; full log in $log" >&2
    exit 1
  fi
  etl report --entity "$entity" --start "$start" --end "$end"
  echo
done
echo "Full log: $log. Tables: $ETL_WAREHOUSE_ROOT/{customer,product,orders}. docs/model.md shows how to read them."
