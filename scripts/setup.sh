#!/usr/bin/env bash
# Create the virtual environment, install the pinned dependencies, let Spark fetch the Delta jars
# once (recorded for every later driver) and write the drivers' class-data archive. Safe to run again.
set -euo pipefail
venv=${1:-.venv}
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1 && [ ! -x "${JAVA_HOME:-/nonexistent}/bin/java" ]; then
  echo "error: Java was not found. Spark needs Java 17 or newer: install it (e.g. 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME." >&2
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
echo "==> starting Spark once to fetch the Delta jars and write the drivers' class-data archive (about a minute)"
mkdir -p var; if ! SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1} "$venv/bin/python" -m etl.io.spark > var/setup-spark.log 2>&1; then cat var/setup-spark.log >&2; echo "error: Spark could not start (log above, also in var/setup-spark.log)" >&2; exit 1; fi; grep -E "class-data archive|is ready" var/setup-spark.log || true
touch "$venv/.installed"
echo "==> set-up done"
