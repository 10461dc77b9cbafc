#!/usr/bin/env bash
# Create the virtual environment, install the pinned dependencies, let Spark fetch the Delta jars
# once (recorded for every later driver), compile the local file system's class (with the JDK's
# javac, when there is one), write the drivers' class-data archive and fetch the
# scripts and styles of the Data Docs (npm registry). Safe to run again.
set -euo pipefail
venv=${1:-.venv}
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1 && [ ! -x "${JAVA_HOME:-/nonexistent}/bin/java" ]; then
  echo "error: Java was not found. Spark needs Java 17 or newer: install it (e.g. 'apt-get install openjdk-17-jdk-headless': a JDK, whose javac compiles one small class) or set JAVA_HOME." >&2
  exit 1
fi
java_major=$({ "${JAVA_HOME:+$JAVA_HOME/bin/}java" -version 2>&1 || true; } | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ -n "$java_major" ] && [ "$java_major" -lt 17 ]; then
  echo "error: Java $java_major found; Spark 4 needs Java 17 or newer." >&2
  exit 1
fi

python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      python=$candidate; break
    fi
  done
fi
if [ -z "$python" ]; then
  echo "error: Python 3.11 was not found (set PYTHON=/path/to/python3.11)." >&2
  exit 1
fi

echo "==> creating $venv with $($python --version)"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
echo "==> installing pinned dependencies (about a minute with a warm pip cache)"
"$venv/bin/python" -m pip install --quiet -c constraints.txt -e '.[dev]'
echo "==> starting Spark once to fetch the Delta jars, compile the local file system's class and write the drivers' class-data archive (about a minute)"
mkdir -p var; if ! SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1} "$venv/bin/python" -m etl.io.spark > var/setup-spark.log 2>&1; then cat var/setup-spark.log >&2; echo "error: Spark could not start (log above, also in var/setup-spark.log)" >&2; exit 1; fi; grep -E "class-data archive|local file system|no javac|is ready" var/setup-spark.log || true
# PostgreSQL for the Airflow tests' metadata database (etl.devtools.postgres starts a cluster of its
# own per test session; no service is started): Debian's server package, installed as root when
# missing, without its default cluster.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian's PostgreSQL server for the Airflow tests (apt-get, about a minute)"
    export DEBIAN_FRONTEND=noninteractive
    mkdir -p /etc/postgresql-common && { grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf || echo 'create_main_cluster = false' >> /etc/postgresql-common/createcluster.conf; }
    { apt-get install -y -qq postgresql >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; }; } \
      || echo "warning: 'apt-get install postgresql' failed; the Airflow tests need PostgreSQL's server" >&2
  else
    echo "note: PostgreSQL's server (initdb) not found; the Airflow tests need it (Debian: apt-get install postgresql)"
  fi
fi
# The S3-API server the object-store tests run the warehouse on (S3Proxy, from Maven Central, once).
"$venv/bin/python" -m etl.devtools.s3_server fetch
# Data Docs offline: GX's pages load their scripts and styles from CDNs; fetch the same files once
# from the npm registry (docs/decisions/offline-data-docs.md). Quiet when they are there; a failure
# is reported and set-up goes on (Data Docs then keep their CDN links).
"$venv/bin/python" -m etl.quality.offline_docs
# The browser the Data Docs test opens them in (tests/etl/quality/test_offline_docs.py; it skips without).
# As root on Debian it is installed (a system package: ETL_NO_BROWSER=1 skips it); else a note.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "${ETL_NO_BROWSER:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian's chromium for the Data Docs browser test (apt-get, about a minute; ETL_NO_BROWSER=1 skips it)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }; } \
      || echo "warning: 'apt-get install chromium' failed; the Data Docs browser test will skip" >&2
  else
    echo "note: chromium not found; the Data Docs browser test will skip (install it: apt-get install chromium)"
  fi
fi
touch "$venv/.installed"
echo "==> set-up done"
