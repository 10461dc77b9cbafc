#!/usr/bin/env bash
# The demo: generate a small bursty update stream for the last complete 5 minutes, then run the
# load DAG on it end to end (route -> ingest_load_validate -> report) with `airflow dags test`
# on an embedded SQLite Airflow, showing each task and the jobs' [etl] lines as they run
# (etl.devtools.dag_test_progress; Airflow's whole log goes to var/demo.log), and print what happened.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-env.sh var/demo.log

echo "==> 1/3 generating a bursty update stream for [$start, $end) into $ETL_LANDING_ROOT"
etl generate --start "$start" --duration 300 --rate 40 --overwrite 2>>"$log" | tee -a "$log" \
  | python -c 'import json,sys; d=json.load(sys.stdin); print("    %s updates in %s files; intended kinds: %s" % (d["lines"], d["files"], d["kinds"]))'

echo "==> 2/3 preparing Airflow (SQLite under $AIRFLOW_HOME)"
airflow db migrate >>"$log" 2>&1 || { tail -30 "$log"; echo "airflow db migrate failed; see $log" >&2; exit 1; }

echo "==> 3/3 running DAG etl_load for the interval [$start, $end) (airflow dags test; about four minutes, longer on a busy machine)"
if ! PYTHONUNBUFFERED=1 airflow dags test etl_load "$end" 2>&1 | tee -a "$log" | python -m etl.devtools.dag_test_progress; then
  grep -E "ERROR|Error|error:" "$log" | tail -20 >&2
  echo "the DAG run failed; full log in $log" >&2
  exit 1
fi
grep -q "state=success\|DagRunState.SUCCESS\|success" "$log" || true

echo
etl report --start "$start" --end "$end"
echo
echo "Full log: $log. Tables: $ETL_WAREHOUSE_ROOT. Data Docs: open the path above in a browser."
