"""A real S3-API server on the loopback address, for the tests and the benchmarks: S3Proxy (Maven
Central's ``org.gaul:s3proxy``) over its local-file-system backend, which serves the S3 REST API
(signatures, multipart uploads, ListObjectsV2) from a directory, so that the warehouse runs at
``s3a://<bucket>/...`` through Hadoop's S3A connector exactly as against AWS S3 or MinIO: nothing
to install by hand.

The jars are resolved once with pyspark's Ivy into ``<cache>/s3proxy-<version>/``; the server runs
in its own JVM and process group, its log and its buckets under its data directory.

    python -m etl.devtools.s3_server start --dir var/s3 --bucket warehouse   # prints the endpoint
    python -m etl.devtools.s3_server stop --dir var/s3
    python -m etl.devtools.s3_server fetch     # the jars only (set-up does this)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from etl.core.spark_conf import DEFAULT_TOOLS_CACHE
from etl.devtools.servers import ServerProcess, free_port, launch, refuse_if_running, resolve_jars, stop_recorded

S3PROXY_VERSION = "2.6.0"
ACCESS_KEY = "local-access-key"  # the local server's own; a real store's come from its credentials chain
SECRET_KEY = "local-secret-key"


def s3proxy_jars(version: str = S3PROXY_VERSION, cache: Path = DEFAULT_TOOLS_CACHE) -> Path:
    return resolve_jars("org.gaul", "s3proxy", version, cache / f"s3proxy-{version}", cache, f"S3Proxy {version}")


class S3Server(ServerProcess):
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spark_settings(self) -> dict[str, str]:
        """The S3A settings that point Spark at this server (docs/deployment.md has a real store's)."""
        return s3a_settings(self.endpoint, ACCESS_KEY, SECRET_KEY)

    def configure(self, spark) -> None:
        """Point a running session's S3A connector at this server (a session built before the
        server started: the ``spark.hadoop.`` settings, set on its Hadoop configuration)."""
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in self.spark_settings().items():
            hadoop.set(key[len("spark.hadoop."):], value)

    def write_properties(self, path: Path) -> Path:
        """The same settings as a Java properties file, for a driver of its own (setting
        ``spark_properties_file``)."""
        path.write_text("".join(f"{k}={v}\n" for k, v in self.spark_settings().items()))
        return path


def s3a_settings(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1") -> dict[str, str]:
    """Spark settings of an S3-compatible store at ``endpoint`` with static keys: path-style
    addressing, plain HTTP when the endpoint says so."""
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https://")).lower(),
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
    }


LOGBACK = """<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="out"/></root>
</configuration>
"""


def _properties(data_dir: Path, port: int) -> str:
    return "\n".join([
        f"s3proxy.endpoint=http://127.0.0.1:{port}",
        "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={ACCESS_KEY}",
        f"s3proxy.credential={SECRET_KEY}",
        # The AWS SDK's checksum headers (x-amz-checksum-*, x-amz-trailer), which this version
        # does not know, are ignored instead of refused (501 NotImplemented).
        "s3proxy.ignore-unknown-headers=true",
        "jclouds.provider=filesystem-nio2",
        "jclouds.identity=local",  # required by S3Proxy, unused by a directory backend
        "jclouds.credential=local",
        f"jclouds.filesystem.basedir={data_dir / 'buckets'}",
        "",
    ])


def start(data_dir: Path, buckets: tuple[str, ...] = ("warehouse",), port: int = 0, version: str = S3PROXY_VERSION,
          cache: Path = DEFAULT_TOOLS_CACHE, heap: str = "256m", timeout: float = 60.0) -> S3Server:
    """Start a server on ``127.0.0.1:port`` (0: a free port) serving ``buckets`` (created empty
    when new) from ``data_dir/buckets``."""
    data_dir = Path(data_dir).resolve()
    for bucket in buckets:
        (data_dir / "buckets" / bucket).mkdir(parents=True, exist_ok=True)  # a bucket is a folder of the backend
    state = data_dir / "server.json"
    refuse_if_running(state, "an S3 server")
    jars = s3proxy_jars(version, cache)
    port = port or free_port()
    config = data_dir / "s3proxy.properties"
    config.write_text(_properties(data_dir, port))
    logging = data_dir / "logback.xml"  # the jar has none: logback's default logs every request at DEBUG
    logging.write_text(LOGBACK)
    command = ["java", f"-Xmx{heap}", "-XX:TieredStopAtLevel=1", f"-Dlogback.configurationFile={logging}",
               "-cp", str(jars / "*"), "org.gaul.s3proxy.Main", "--properties", str(config)]
    return launch(command, S3Server, port, data_dir, data_dir / "server.log", state, "the S3 server", timeout)


def stop(data_dir: Path) -> bool:
    return stop_recorded(Path(data_dir) / "server.json", S3Server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etl.devtools.s3_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop", "fetch"))
    parser.add_argument("--dir", default="var/s3", help="the server's data directory (default var/s3)")
    parser.add_argument("--bucket", action="append", default=None, help="a bucket to serve (default: warehouse)")
    parser.add_argument("--port", type=int, default=9000, help="port on 127.0.0.1 (default 9000; 0: any free)")
    args = parser.parse_args(argv)
    if args.action == "fetch":
        print(f"S3Proxy {S3PROXY_VERSION}: {s3proxy_jars()}")
    elif args.action == "start":
        server = start(Path(args.dir), tuple(args.bucket or ["warehouse"]), args.port)
        print(server.endpoint)
    else:
        print("stopped" if stop(Path(args.dir)) else "no server recorded there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
