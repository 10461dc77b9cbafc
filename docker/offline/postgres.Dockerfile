# The offline path's metadata database (docker/compose.offline.yaml): Debian bookworm's PostgreSQL 15
# on the locally built Debian base, with the part of the official postgres image's entrypoint the
# compose file uses (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, data in /var/lib/postgresql/data).
# Built by scripts/compose_images.sh; users with a registry keep the official postgres:16.
ARG BASE=active-dw-etl-offline/debian:bookworm
FROM ${BASE}
# No cluster at install time: the entrypoint initialises the volume's on first start.
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-common \
 && sed -i 's/^#\?\s*create_main_cluster.*/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql \
 && chmod 700 /var/lib/postgresql/data
COPY docker/offline/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
CMD ["postgres"]
