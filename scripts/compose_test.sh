#!/usr/bin/env bash
# `make test-compose`: docker/compose.yaml up for real, on the offline images (docker/compose.offline.yaml,
# built by scripts/compose_images.sh), then one run of the load DAG triggered through Airflow's REST
# API, the warehouse's tables read back, and the stack taken down with its volumes, whatever happened.
# Exit status non-zero on any failure. Heavy (about the whole of a 2-core machine for a quarter of an
# hour the first time, most of it the image build): not part of `make test` or `.ci/run`, whose
# tests/docker/test_compose.py checks the compose file statically.
#
# Needs a running Docker engine and the compose v2 plugin (`docker compose`); port 8080 (and 8081)
# on 127.0.0.1 free. Settings: DAY (the interval's day, default 2026-11-22), RATE (updates per
# second, default 2, over the hour 10:00-11:00), TIMEOUT (seconds to wait for the run, default 1800),
# KEEP=1 (leave the stack up for a look; `docker compose -p active-dw-etl-compose-test down -v` then).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DAY=${DAY:-2026-11-22}
RATE=${RATE:-2}
TIMEOUT=${TIMEOUT:-1800}
PROJECT=active-dw-etl-compose-test
API=http://127.0.0.1:8080
started=$(date +%s)
say() { echo "[compose_test $(date -u +%H:%M:%S) +$(( $(date +%s) - started ))s] $*"; }

# A Docker engine: the one running, else Debian's dockerd started here for this run (as root; the
# docker.io package) and stopped at the end. DOCKERD=no: never start one.
started_dockerd=
if ! docker info >/dev/null 2>&1; then
    if [[ "${DOCKERD:-auto}" != no && $(id -u) == 0 ]] && command -v dockerd >/dev/null; then
        say "no Docker engine answers: starting dockerd (log: /var/tmp/active-dw-etl-dockerd.log)"
        setsid dockerd --data-root "${DOCKER_DATA_ROOT:-/var/lib/docker}" > /var/tmp/active-dw-etl-dockerd.log 2>&1 &
        started_dockerd=$!
        trap 'kill "$started_dockerd" 2>/dev/null' EXIT  # until finish (below) takes over
        for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    fi
    docker info >/dev/null 2>&1 || { echo "no Docker engine answers (docker info failed; as root with Debian's docker.io, this script starts dockerd)" >&2; exit 1; }
fi
docker compose version >/dev/null 2>&1 || { echo "no compose v2 plugin (docker compose version failed)" >&2; exit 1; }
for url in "$API" http://127.0.0.1:8081; do
    if curl -s -o /dev/null "$url" 2>/dev/null; then
        echo "something already listens on $url (make airflow-stop?); the stack publishes 8080 and 8081" >&2; exit 1
    fi
done

say "images (scripts/compose_images.sh; each skipped if present)"
scripts/compose_images.sh

# The four secrets docker/compose.yaml requires (docs/deployment.md, "Secrets"), made for this run
# only, in this process's environment: nothing is written to docker/.env.
gen() { python3 -c "import base64, os, secrets; print($1)"; }
# (assigned, then exported: `export X=$(...)` would hide a failure of python3)
ETL_JWT_SECRET=$(gen 'secrets.token_urlsafe(32)')
ETL_FERNET_KEY=$(gen 'base64.urlsafe_b64encode(os.urandom(32)).decode()')  # what Fernet.generate_key() returns
ETL_POSTGRES_PASSWORD=$(gen 'secrets.token_urlsafe(24)')
ETL_ADMIN_PASSWORD=$(gen 'secrets.token_urlsafe(18)')
export ETL_JWT_SECRET ETL_FERNET_KEY ETL_POSTGRES_PASSWORD ETL_ADMIN_PASSWORD
unset ETL_BIND

# Only the runs triggered here: the scheduler does not start the cron schedule's own runs (as in
# tests/dags/test_airflow_standalone.py), so unpausing does not add a run of the current hour.
test_override=$(mktemp --suffix=.yaml)
cat > "$test_override" <<'YAML'
services:
  airflow-scheduler:
    environment:
      AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE: "False"
YAML
compose() { docker compose -p "$PROJECT" -f docker/compose.yaml -f docker/compose.offline.yaml -f "$test_override" "$@"; }

status=1
finish() {
    status=$?
    set +e
    if (( status != 0 )); then
        say "FAILED (exit $status); the services' states and last log lines:"
        compose ps -a
        compose logs --no-color --tail 40
    fi
    if [[ -n "${KEEP:-}" ]]; then
        say "KEEP=1: the stack stays up (docker compose -p $PROJECT down -v to remove it)"
    else
        say "down -v"
        compose down -v --remove-orphans >/dev/null 2>&1 || compose down -v --remove-orphans
    fi
    rm -f "$test_override"
    if [[ -n "$started_dockerd" && -n "${KEEP:-}" ]]; then
        say "KEEP=1: the dockerd this run started stays up too (pid $started_dockerd)"
    elif [[ -n "$started_dockerd" ]]; then
        say "stopping the dockerd this run started"
        kill "$started_dockerd" 2>/dev/null; wait "$started_dockerd" 2>/dev/null
    fi
    say "$([[ $status == 0 ]] && echo PASSED || echo FAILED) in $(( $(date +%s) - started )) s"
    exit "$status"
}
trap finish EXIT

say "docker compose up -d (postgres, airflow-init, api-server, scheduler, dag-processor, triggerer, spark master + 2 workers)"
compose up -d --no-build --quiet-pull
compose ps

say "waiting for the api-server's health check"
for i in $(seq 1 60); do
    health=$(docker inspect -f '{{.State.Health.Status}}' "$(compose ps -q airflow-apiserver)" 2>/dev/null || echo unknown)
    [[ "$health" == healthy ]] && break
    curl -fsS "$API/api/v2/monitor/health" >/dev/null 2>&1 && [[ $i -gt 2 ]] && { health="answering (docker: $health)"; break; }
    sleep 10
done
version=$(curl -fsS "$API/api/v2/version") || { echo "the api-server did not answer within 10 minutes (health: $health)" >&2; exit 1; }
say "api-server: $health; $version"

say "landing input: etl generate --start ${DAY}T10:00 --duration 3600 --rate $RATE"
compose --profile cli run --rm --no-deps airflow-cli etl generate --start "${DAY}T10:00" --duration 3600 --rate "$RATE"

say "trigger the load DAG through the REST API and wait for the run"
python3 - "$API" "$ETL_ADMIN_PASSWORD" "$DAY" "$TIMEOUT" <<'PY'
import json, sys, time, urllib.error, urllib.request

api, password, day, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
DAG = "etl_load"
started = time.time()

def call(path, method="GET", body=None, token=None, base=api + "/api/v2"):
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        raise SystemExit(f"{method} {path}: HTTP {e.code}: {e.read().decode()[:500]}")

def say(msg):
    print(f"  [+{time.time() - started:.0f}s] {msg}", flush=True)

token = call("/auth/token", "POST", {"username": "admin", "password": password}, base=api)["access_token"]
say("POST /auth/token as admin: got a JWT")
deadline = time.time() + 300
while True:  # the dag-processor parses dags/ a little after start
    req = urllib.request.Request(f"{api}/api/v2/dags/{DAG}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            dag = json.loads(resp.read())
        break
    except urllib.error.HTTPError as e:
        if e.code != 404 or time.time() > deadline:
            raise SystemExit(f"GET /dags/{DAG}: HTTP {e.code}: {e.read().decode()[:300]}")
        time.sleep(5)
dags = call("/dags?limit=100", token=token)["dags"]
say(f"DAGs parsed: {', '.join(sorted(d['dag_id'] for d in dags))}")
call(f"/dags/{DAG}", "PATCH", {"is_paused": False}, token=token)
say(f"PATCH /dags/{DAG} is_paused=false")
start, end = f"{day}T10:00:00Z", f"{day}T11:00:00Z"
run = call(f"/dags/{DAG}/dagRuns", "POST",
           {"logical_date": start, "data_interval_start": start, "data_interval_end": end, "conf": {}}, token=token)
run_id = run["dag_run_id"]
say(f"POST /dags/{DAG}/dagRuns: {run_id}, data interval [{run['data_interval_start']}, {run['data_interval_end']}), {run['state']}")
last = None
while True:
    if time.time() - started > timeout:
        raise SystemExit(f"the run did not finish within {timeout:.0f} s")
    run = call(f"/dags/{DAG}/dagRuns/{run_id}", token=token)
    tis = call(f"/dags/{DAG}/dagRuns/{run_id}/taskInstances", token=token)["task_instances"]
    now = run["state"], tuple((t["task_id"], t["state"]) for t in tis)
    if now != last:
        say(f"run {run['state']}: " + ", ".join(f"{t}={s}" for t, s in now[1]))
        last = now
    if run["state"] in ("success", "failed"):
        break
    time.sleep(10)
for t in tis:
    if t["start_date"] and t["end_date"]:
        say(f"  {t['task_id']}: try {t['try_number']}, {t['state']}, {t['duration'] or 0:.0f} s")
if run["state"] != "success":
    raise SystemExit(f"the run ended {run['state']}")
xcom = call(f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/report/xcomEntries/return_value", token=token)
summary = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
say("report's return value: " + json.dumps({k: summary[k] for k in summary if not isinstance(summary[k], (dict, list))}))
if not (summary.get("updates_in", 0) > 0 and summary.get("validation") == "passed"):
    raise SystemExit("the run's summary has no updates or a failed validation")
PY

say "the run's Spark application on the cluster (the master's log)"
launched=$(compose logs --no-color spark-master | grep -o 'Launching executor app-[0-9-]*/[0-9]* on worker worker-[0-9]*-[0-9.]*' || true)
echo "$launched" | sed 's/^/  /'
workers=$({ grep -o 'worker-[0-9]*-[0-9.]*$' <<<"$launched" || true; } | sort -u | wc -l)
(( workers == 2 )) || { echo "the run's executors ran on $workers worker(s), not on both" >&2; exit 1; }

say "the warehouse's tables (etl show, from the airflow-cli container)"
compose --profile cli run --rm --no-deps airflow-cli etl show --spark-master "local[2]"
compose --profile cli run --rm --no-deps airflow-cli etl show customer_current --spark-master "local[2]" --limit 3

say "summary: stack up, the load DAG's run through the REST API succeeded (executors on both Spark workers), tables read back"
compose ps --format 'table {{.Service}}\t{{.State}}\t{{.Status}}'
