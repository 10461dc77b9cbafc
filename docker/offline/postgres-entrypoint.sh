#!/usr/bin/env bash
# First start on an empty volume: initdb with POSTGRES_USER as the superuser (password
# POSTGRES_PASSWORD, scram-sha-256 over TCP, trust on the local socket as the official image does),
# create POSTGRES_DB; then run the server on every interface of the container.
set -euo pipefail
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    printf 'host all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
    if [[ "$POSTGRES_DB" != postgres ]]; then
        echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" \
            | postgres --single -D "$PGDATA" -j postgres >/dev/null
    fi
    echo "postgres-entrypoint: initialised $PGDATA (database $POSTGRES_DB, owner $POSTGRES_USER)"
fi
if [[ "${1:-}" == postgres ]]; then
    shift
    exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
