#!/usr/bin/env bash
# The offline path's images (docs/deployment.md, "Without an image registry"), built on this
# machine from Debian packages, PyPI and Maven Central, for a Docker engine that cannot pull from
# any image registry. The base is made once (skipped when it exists); the other two are built every
# time on top of it, from Docker's layer cache when nothing they copy has changed (seconds), so a
# change to etl/, dags/, docker/offline/ or the pins is always in the image. FORCE=1 remakes the
# base and builds without the cache.
#
#   active-dw-etl-offline/debian:bookworm    debootstrap --variant=minbase, then `docker import`
#   active-dw-etl-offline/postgres:15        docker/offline/postgres.Dockerfile (Debian's PostgreSQL 15)
#   active-dw-etl:0.1.0-offline              docker/offline/etl.Dockerfile (the project, as docker/Dockerfile)
#
# Needs root (debootstrap), debootstrap, and a running Docker engine. MIRROR picks the Debian mirror.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
BASE=active-dw-etl-offline/debian:bookworm
POSTGRES=active-dw-etl-offline/postgres:15
ETL=active-dw-etl:0.1.0-offline
WORK=${OFFLINE_WORK:-/var/tmp/active-dw-etl-offline}

have() { [[ -z "${FORCE:-}" ]] && docker image inspect "$1" >/dev/null 2>&1; }
say() { echo "[compose_images $(date -u +%H:%M:%S)] $*"; }

if have "$BASE"; then
    say "$BASE exists"
else
    command -v debootstrap >/dev/null || { echo "debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
    say "debootstrap bookworm from $MIRROR"
    rm -rf "$WORK/rootfs"
    mkdir -p "$WORK"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
    # bookworm, its updates and its security archive; no recommends, no apt caches in the image
    rm -f "$WORK/rootfs/etc/apt/sources.list"
    sed "s#http://deb.debian.org/debian\$#$MIRROR#" "$ROOT/docker/offline/base.sources" \
        > "$WORK/rootfs/etc/apt/sources.list.d/debian.sources"
    printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' > "$WORK/rootfs/etc/apt/apt.conf.d/90no-recommends"
    rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
    tar -C "$WORK/rootfs" --numeric-owner -c . \
        | docker import -c 'CMD ["bash"]' -c 'ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8' - "$BASE"
    rm -rf "$WORK/rootfs"
fi

mkdir -p "$WORK"
# A build context of only what the images copy (the repository's .venv and var/ stay out).
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
tar -C "$ROOT" --exclude=__pycache__ -c pyproject.toml constraints.txt README.md etl warehouse \
    expectations dags docker/offline | tar -C "$context" -x
# This machine's extra CA certificates (a TLS-inspecting egress proxy's), so that pip and Maven
# Central verify inside the build as they do here; none on most machines.
mkdir -p "$context/docker/offline/ca"
cp /usr/local/share/ca-certificates/*.crt "$context/docker/offline/ca/" 2>/dev/null || true
touch "$context/docker/offline/ca/.none"

build() {  # image dockerfile
    say "building $1 ($2; unchanged layers from the cache)"
    local old
    old=$(docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true)
    # The classic builder (no buildx here); --force-rm leaves no container behind a failed step.
    DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build --force-rm ${FORCE:+--no-cache} -q \
        --build-arg BASE="$BASE" -f "$context/$2" -t "$1" "$context" > "$WORK/build.log" 2>&1 \
        || { tail -40 "$WORK/build.log" >&2; exit 1; }
    # the image this one replaces, now untagged (kept while a container still uses it)
    if [[ -n "$old" && "$old" != "$(docker image inspect -f '{{.Id}}' "$1")" ]]; then
        docker rmi "$old" >/dev/null 2>&1 || true
    fi
    say "$1: $(docker image inspect -f '{{.Id}}' "$1" | cut -c8-19), $(docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.2f GB", $1/1e9}')"
}
build "$POSTGRES" docker/offline/postgres.Dockerfile
build "$ETL" docker/offline/etl.Dockerfile
say "images ready: $BASE $POSTGRES $ETL"
