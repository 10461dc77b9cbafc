#!/usr/bin/env bash
# Airflow on the embedded default: `airflow standalone` (api-server, scheduler, dag-processor,
# triggerer) on SQLite under var/airflow, bound to 127.0.0.1, the project's DAGs only.
#   scripts/airflow.sh start   # starts in the background, waits until healthy, prints the login
#   scripts/airflow.sh stop    # stops every process it started (its whole process group)
#   scripts/airflow.sh status
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/airflow-env.sh
export AIRFLOW__API__HOST=${AIRFLOW__API__HOST:-127.0.0.1}
export AIRFLOW__API__PORT=${AIRFLOW__API__PORT:-8080}
export AIRFLOW__API__BASE_URL=${AIRFLOW__API__BASE_URL:-http://127.0.0.1:$AIRFLOW__API__PORT}
pid_file=$AIRFLOW_HOME/standalone.pid
log=$AIRFLOW_HOME/standalone.log
url=http://127.0.0.1:$AIRFLOW__API__PORT

running() { [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; }

case "${1:-}" in
  start)
    if running; then echo "Airflow is already running (pid $(cat "$pid_file")): $url"; exit 0; fi
    # The admin password is made here, private, before Airflow starts: Airflow then neither
    # generates one nor prints it to standalone.log.
    umask 077
    passwords=${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated}
    if [ ! -s "$passwords" ]; then
      python - "$passwords" <<'PY'
import json, os, secrets, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as f:
    json.dump({"admin": secrets.token_urlsafe(18)}, f)
PY
    fi
    chmod 600 "$passwords"
    airflow db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/migrate.log" >&2; exit 1; }
    setsid airflow standalone >"$log" 2>&1 < /dev/null &
    echo $! > "$pid_file"
    echo "starting Airflow (log: $log) ..."
    for _ in $(seq 1 180); do
      if curl -fsS "$url/api/v2/monitor/health" >/dev/null 2>&1; then break; fi
      if ! running; then tail -30 "$log" >&2; echo "Airflow exited during start-up; see $log" >&2; exit 1; fi
      sleep 1
    done
    curl -fsS "$url/api/v2/monitor/health" >/dev/null || { echo "Airflow did not become healthy in 180 s; see $log" >&2; exit 1; }
    echo "Airflow is up: $url"
    echo "log in as admin; the password is in $passwords (readable by you only):"
    echo "  python -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"admin\"])' $passwords"
    echo "stop it with: make airflow-stop"
    ;;
  stop)
    if ! running; then echo "Airflow is not running"; rm -f "$pid_file"; exit 0; fi
    pgid=$(cat "$pid_file")
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pgid" 2>/dev/null || true
    rm -f "$pid_file"
    echo "Airflow stopped"
    ;;
  status)
    if running; then echo "running (pid $(cat "$pid_file")): $url"; else echo "not running"; fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
