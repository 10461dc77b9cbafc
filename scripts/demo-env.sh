# Sourced by the demos (scripts/demo.sh, scripts/demo_shop.sh): the venv and Airflow's environment,
# a 5-minute schedule, and the last complete 5 minutes as [$start, $end). $1: the demo's log file,
# emptied, as $log.
. scripts/airflow-env.sh
export ETL_SCHEDULE=${ETL_SCHEDULE:-"*/5 * * * *"}
export ETL_MICRO_BATCH_SECONDS=${ETL_MICRO_BATCH_SECONDS:-60}

now=$(date -u +%s)
end_s=$(( now / 300 * 300 ))
start_s=$(( end_s - 300 ))
start=$(date -u -d "@$start_s" +%Y-%m-%dT%H:%M:%SZ)
end=$(date -u -d "@$end_s" +%Y-%m-%dT%H:%M:%SZ)
log=$1
mkdir -p "$(dirname "$log")"
: > "$log"
