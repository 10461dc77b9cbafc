#!/usr/bin/env bash
# The part of the official Airflow image's /entrypoint that docker/compose.yaml relies on: `bash`,
# `python` and the project's programs run as given, anything else is an `airflow` subcommand
# (`api-server`, `scheduler`, ...).
set -e
if [[ $# -eq 0 ]]; then
    exec bash
fi
case "$1" in
    bash | sh | python | python3 | pip | etl | spark-submit | spark-class) exec "$@" ;;
    airflow) shift ;;
esac
exec airflow "$@"
