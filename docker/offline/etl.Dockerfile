# The offline path's project image (docker/compose.offline.yaml): what docker/Dockerfile builds on
# the official Airflow image, built instead on a Debian bookworm base made locally with debootstrap
# (scripts/compose_images.sh), for machines that reach Debian's mirror, PyPI and Maven Central but
# no image registry. Debian's Python 3.11 and OpenJDK 17; Airflow, pyspark, delta-spark and this
# project from PyPI under constraints.txt, exactly as docker/Dockerfile installs them; the Delta jars
# from Maven Central at build time. Same user (airflow, uid 50000, gid 0), same paths, same
# environment; /entrypoint runs `airflow <command>` as the official image's does.
#
#   scripts/compose_images.sh        # builds active-dw-etl-offline/debian:bookworm first
ARG BASE=active-dw-etl-offline/debian:bookworm
FROM ${BASE}
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11

# Extra CA certificates of the building machine (scripts/compose_images.sh copies its
# /usr/local/share/ca-certificates/*.crt here; usually none): a TLS-inspecting egress proxy's CA, for
# pip and Maven Central. The ca-certificates and ca-certificates-java packages below take them in.
COPY docker/offline/ca/ /usr/local/share/ca-certificates/
# The JDK, not only the runtime: set-up compiles the local file system's class with its javac
# (docs/decisions/local-files-without-a-shell.md). curl for the api-server's health check,
# dumb-init as the official image's PID 1.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python${PYTHON_VERSION} python${PYTHON_VERSION}-venv \
        openjdk-17-jdk-headless procps curl ca-certificates dumb-init \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 50000 --gid 0 --create-home --home-dir /home/airflow --shell /bin/bash airflow \
 && python${PYTHON_VERSION} -m venv /opt/venv \
 && mkdir -p /opt/airflow /opt/etl/var \
 && chown -R airflow:0 /opt/venv /opt/airflow /opt/etl
ENV PATH=/opt/venv/bin:$PATH \
    AIRFLOW_HOME=/opt/airflow \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    ETL_HOME=/opt/etl \
    ETL_WAREHOUSE_ROOT=/opt/etl/var/warehouse \
    ETL_LANDING_ROOT=/opt/etl/var/landing \
    ETL_GX_ROOT=/opt/etl/var/gx \
    ETL_RUNS_ROOT=/opt/etl/var/runs \
    ETL_REPORTS_ROOT=/opt/etl/var/reports \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/etl/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
COPY docker/offline/airflow-entrypoint.sh /entrypoint

USER airflow
COPY --chown=airflow:0 pyproject.toml constraints.txt README.md /opt/etl/
COPY --chown=airflow:0 etl /opt/etl/etl
COPY --chown=airflow:0 warehouse /opt/etl/warehouse
COPY --chown=airflow:0 expectations /opt/etl/expectations
COPY --chown=airflow:0 dags /opt/etl/dags
RUN PIP_CERT=/etc/ssl/certs/ca-certificates.crt pip install --no-cache-dir -c /opt/etl/constraints.txt "/opt/etl[quality,airflow]" \
 && python -c "import pyspark, delta, airflow; print(pyspark.__version__, airflow.__version__)"
RUN SPARK_LOCAL_IP=127.0.0.1 python -c "from etl.io.spark import _prefetch; _prefetch()"
ENV PYSPARK_PYTHON=python \
    PYSPARK_DRIVER_PYTHON=python
WORKDIR /opt/etl
ENTRYPOINT ["/usr/bin/dumb-init", "--", "/entrypoint"]
CMD []
