"""Every Spark setting the jobs need, from the configuration: pure Python, so the Airflow DAGs hand
the very same settings to ``spark-submit`` without importing pyspark at parse time."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from importlib import metadata
from pathlib import Path

from etl.core import properties
from etl.core.config import ConfigError, EtlConfig

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def delta_package(cfg: EtlConfig | None = None) -> str:
    """Maven coordinates of the Delta jar matching the installed pyspark and delta-spark."""
    if cfg is not None and cfg.delta_package:
        return cfg.delta_package
    spark_version = metadata.version("pyspark")
    delta_version = metadata.version("delta-spark")
    major_minor = ".".join(spark_version.split(".")[:2])
    return f"io.delta:delta-spark_{major_minor}_2.13:{delta_version}"


def kafka_package(cfg: EtlConfig | None = None) -> str:
    """Maven coordinates of Spark's Kafka source matching the installed pyspark."""
    if cfg is not None and cfg.kafka_package:
        return cfg.kafka_package
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{metadata.version('pyspark')}"


# The AWS SDK (v2) that each Hadoop release's S3A connector is built against (hadoop-project's
# aws-java-sdk-v2.version): its S3 client and transfer manager instead of the SDK's 686 MB bundle.
AWS_SDK_OF_HADOOP = {"3.4.1": "2.24.6", "3.4.2": "2.29.52", "3.5.0": "2.35.4"}
AWS_SDK_MODULES = ("s3", "s3-transfer-manager", "sts")


def pyspark_hadoop_version() -> str | None:
    """The Hadoop client pyspark ships (``pyspark/jars/hadoop-client-api-<version>.jar``), found
    without importing pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        return None
    jars = sorted((Path(spec.origin).parent / "jars").glob("hadoop-client-api-*.jar"))
    return jars[-1].name[len("hadoop-client-api-"):-len(".jar")] if jars else None


def object_store_packages(cfg: EtlConfig) -> list[str]:
    """The file system of an ``s3a://`` warehouse: the setting's, else hadoop-aws of pyspark's
    Hadoop with the AWS SDK modules it calls; nothing for a POSIX warehouse."""
    if cfg.warehouse_uri.partition("://")[0].lower() != "s3a":
        return []
    if cfg.object_store_packages.strip():
        return [p.strip() for p in cfg.object_store_packages.split(",") if p.strip()]
    return s3a_packages(f"warehouse_root {cfg.warehouse_root!r} is on S3")


def s3a_packages(why: str = "the S3A connector is wanted") -> list[str]:
    """Hadoop's S3A connector for pyspark's Hadoop, and the AWS SDK modules it calls."""
    hadoop = pyspark_hadoop_version()
    sdk = AWS_SDK_OF_HADOOP.get(hadoop or "")
    if sdk is None:
        raise ConfigError(f"{why}, and the S3A connector of pyspark's Hadoop ({hadoop or 'not found'}) is not known "
                          f"here: set 'object_store_packages' to its Maven coordinates "
                          f"(org.apache.hadoop:hadoop-aws:<version> and the AWS SDK it needs)")
    return [f"org.apache.hadoop:hadoop-aws:{hadoop}", *(f"software.amazon.awssdk:{m}:{sdk}" for m in AWS_SDK_MODULES)]


def packages(cfg: EtlConfig) -> str:
    """spark.jars.packages: Delta, Spark's Kafka source when the model reads a topic, the object
    store's file system when the warehouse is on one, and the site's own."""
    out = [delta_package(cfg)]
    if any(e.kafka_inputs for e in cfg.model.entities):
        out.append(kafka_package(cfg))
    out += object_store_packages(cfg)
    out += [p.strip() for p in cfg.spark_packages.split(",") if p.strip()]
    return ",".join(dict.fromkeys(out))


def spark_properties(cfg: EtlConfig) -> dict[str, str]:
    """The settings of ``spark_properties_file`` (a Java properties file), read when a driver
    starts in-process; spark-submit is handed the file itself."""
    if not cfg.spark_properties_file:
        return {}
    path = Path(cfg.spark_properties_file).expanduser()
    if not path.is_file():
        raise ConfigError(f"setting 'spark_properties_file' = {cfg.spark_properties_file!r}: no such file")
    props = properties.read(path)
    bad = sorted(k for k in props if not k.startswith("spark."))
    if bad:
        raise ConfigError(f"setting 'spark_properties_file' = {cfg.spark_properties_file!r}: {', '.join(bad)} "
                          f"is not a Spark setting (each key starts with 'spark.')")
    ours = sorted(k for k in props if k in OWN_SETTINGS)
    if ours:
        raise ConfigError(f"setting 'spark_properties_file' = {cfg.spark_properties_file!r}: {', '.join(ours)} "
                          f"is the job's own (the jars: settings 'spark_packages', 'object_store_packages', "
                          f"'spark_jars'; Delta's catalog is required; constraint propagation on fails to plan "
                          f"a checkpoint held twice: docs/decisions/no-constraint-propagation.md)")
    return props


# What the job sets itself and a properties file may not replace.
OWN_SETTINGS = frozenset({"spark.jars", "spark.jars.packages", "spark.jars.excludes", "spark.sql.extensions",
                          "spark.sql.catalog.spark_catalog", "spark.sql.constraintPropagation.enabled"})


# The Kafka source's own Hadoop client jars would stand beside the ones pyspark ships; the AWS SDK's
# bundle is replaced by the S3 client modules S3A calls (object_store_packages).
PACKAGE_EXCLUDES = ("org.apache.hadoop:hadoop-client-api,org.apache.hadoop:hadoop-client-runtime,"
                    "software.amazon.awssdk:bundle")
DEFAULT_TOOLS_CACHE = Path(os.environ.get("ETL_TOOLS_CACHE", Path.home() / ".cache" / "active-dw-etl"))


def jars_record(cfg: EtlConfig) -> Path:
    """Where the jars of this configuration's packages are recorded once resolved: a folder per
    set of packages (a changed setting resolves anew, never a stale jar)."""
    digest = hashlib.sha256(f"{packages(cfg)}|{PACKAGE_EXCLUDES}".encode()).hexdigest()[:16]
    return jars_root(cfg) / digest


def jars_root(cfg: EtlConfig) -> Path:
    """The folder of the recorded jars and the class-data archives (``spark_jars_dir``)."""
    return Path(cfg.spark_jars_dir).expanduser() if cfg.spark_jars_dir else DEFAULT_TOOLS_CACHE / "spark-jars"


def recorded_jars(cfg: EtlConfig) -> list[str]:
    """The site's ``spark_jars``, else the recorded jars of the packages when all are there; empty:
    resolve the packages (the first driver, which then records them: ``etl.io.spark``)."""
    if cfg.spark_jars.strip():
        return [j.strip() for j in cfg.spark_jars.split(",") if j.strip()]
    manifest = jars_record(cfg) / "jars.json"
    try:
        jars = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(jars, list) or not jars or not all(isinstance(j, str) and Path(j).is_file() for j in jars):
        return []
    return jars


def java_binary() -> Path | None:
    """The ``java`` a driver starts with (JAVA_HOME's, else the first on PATH), links resolved."""
    home = os.environ.get("JAVA_HOME", "")
    found = (home and shutil.which("java", path=os.path.join(home, "bin"))) or shutil.which("java")
    return Path(found).resolve() if found else None


def class_archive(cfg: EtlConfig) -> Path | None:
    """The driver's class-data archive of this Java and this Spark: a file per build of each, so a
    changed JDK, venv or pyspark never maps an archive the JVM would refuse without a word.
    ``None`` when the setting is off or no Java or pyspark is found (a DAG still parses)."""
    if not cfg.spark_class_archive:
        return None
    try:
        java = java_binary()
        spec = importlib.util.find_spec("pyspark")  # located, not imported: the DAGs parse without pyspark
        if java is None or spec is None or not spec.origin:
            return None
        pyspark_dir = Path(spec.origin).parent.resolve()
        jdk = java.parent.parent
        # What the JVM checks before it maps the archive: the JVM and its base archive, and every
        # jar of the class path (pyspark's), by size and time; Delta's version for its own classes.
        builds = [_build_of(p) for p in (jdk / "lib" / "server" / "libjvm.so", jdk / "lib" / "server" / "classes.jsa", java)]
        jars = sorted((pyspark_dir / "jars").glob("*.jar"))
        # The local file system's jar leads the driver's class path when it is there (local_fs_conf):
        # its path, size and time, as the JVM checks them; nothing without it (the key of before).
        lead_jar = local_fs_conf(cfg).get("spark.driver.extraClassPath", "")
        lead = [f"{lead_jar}:{_build_of(Path(lead_jar))}"] if lead_jar else []
        key = "|".join([str(java), *builds, str(pyspark_dir), metadata.version("pyspark"), *lead,
                        metadata.version("delta-spark"), *(f"{j.name}:{_build_of(j)}" for j in jars)])
    except (OSError, ValueError, ImportError, metadata.PackageNotFoundError):
        return None
    return jars_root(cfg) / "class-archives" / f"driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def _build_of(path: Path) -> str:
    """A file's size and modification time; ``-`` when it is not there."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


# Hadoop's local file system, without a process per chmod and per readlink (setting
# spark_local_fs_nio; docs/decisions/local-files-without-a-shell.md).
LOCAL_FS_SOURCE = Path(__file__).resolve().parent.parent / "io" / "jvm" / "NioLocalFileSystem.java"
LOCAL_FS_CLASS = "activedw.hadoop.NioLocalFileSystem"


def local_fs_jar(cfg: EtlConfig) -> Path | None:
    """The jar set-up compiles from ``LOCAL_FS_SOURCE`` for this pyspark's Hadoop: a file per
    source and pyspark, so an edited source or another Hadoop is compiled anew. ``None``: off."""
    if not cfg.spark_local_fs_nio:
        return None
    try:
        key = f"{LOCAL_FS_SOURCE.read_bytes().hex()}|{metadata.version('pyspark')}"
    except (OSError, metadata.PackageNotFoundError):
        return None
    return jars_root(cfg) / "local-fs" / f"nio-local-fs-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jar"


def local_fs_conf(cfg: EtlConfig) -> dict[str, str]:
    """The two Hadoop settings that put the class in place of the local file system, when its jar
    is there; nothing otherwise (Hadoop's own, as before). The jar goes on the class paths, not in
    spark.jars: spark-submit reads the local file system before it loads any jar of spark.jars.
    Executors of a cluster on other machines need the jar at the same path (or the setting off)."""
    jar = local_fs_jar(cfg)
    if jar is None or not jar.is_file():
        return {}
    return {"spark.driver.extraClassPath": str(jar), "spark.executor.extraClassPath": str(jar),
            "spark.hadoop.fs.file.impl": LOCAL_FS_CLASS,
            "spark.hadoop.fs.AbstractFileSystem.file.impl": f"{LOCAL_FS_CLASS}$Fs"}


# A site's own CDS choice in spark_driver_java_options wins over the archive.
CDS_OPTIONS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")


def own_cds_options(cfg: EtlConfig) -> bool:
    return any(o in cfg.spark_driver_java_options for o in CDS_OPTIONS)


def archive_option(cfg: EtlConfig) -> str:
    """``-XX:SharedArchiveFile=...`` when this machine's archive exists, else nothing."""
    if own_cds_options(cfg):
        return ""
    archive = class_archive(cfg)
    return f"-XX:SharedArchiveFile={archive}" if archive is not None and archive.is_file() else ""


# What a batch's commit (its counts, ledger row and both MERGEs) runs with. Adaptive execution makes
# each query stage a Spark job of its own: a MERGE with deletion vectors took 19-21 jobs instead of
# 13-14, over sources of one micro-batch's few thousand rows that gain nothing from re-planning
# (docs/decisions/commit-without-adaptive-execution.md). The MERGE sources carry a broadcast hint
# instead, so the join that finds the touched files stays a broadcast at any table size.
COMMIT_SQL_SETTINGS = {"spark.sql.adaptive.enabled": "false"}


# The driver's JVM shares the command's stdout, where `etl ... --json` prints its summary. The JVM
# prints its own messages there by default ("CodeCache is full", from a long `etl stream`, broke
# the JSON): they go to stderr with Spark's log. The configured options follow, so a user's own
# -Xlog choice still wins.
JVM_OUTPUT_TO_STDERR = "-XX:+DisplayVMOutputToStderr -Xlog:disable -Xlog:all=warning:stderr"


# The drivers' Spark log unless ``verbose``: warnings and errors, without start-up notes and the
# known harmless messages the file names. Spark's own default profile otherwise.
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
SCHEDULER_POOLS = Path(__file__).with_name("scheduler-pools.xml")


def log_option(cfg: EtlConfig) -> str:
    return "" if cfg.verbose else f"-Dlog4j2.configurationFile={QUIET_LOG4J.resolve().as_uri()}"


# Spark SQL without generated code (setting ``spark_codegen = false``): whole-stage codegen off and
# expressions, projections and encoders interpreted instead of compiled by Janino (``factoryMode``
# is a setting Spark calls internal: docs/decisions/driver-codegen-for-tests.md). On: Spark's
# defaults, written out, so that a spark-submit's conf and its driver's session agree.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
GENERATED = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}


def spark_conf(cfg: EtlConfig) -> dict[str, str]:
    """Every Spark setting the jobs need, except the master (a connection's business under Airflow)."""
    jars = recorded_jars(cfg)
    conf = {
        **({"spark.jars": ",".join(jars)} if jars else {"spark.jars.packages": packages(cfg),
                                                        "spark.jars.excludes": PACKAGE_EXCLUDES}),
        **local_fs_conf(cfg),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.driver.memory": cfg.spark_driver_memory,
        "spark.sql.shuffle.partitions": str(cfg.spark_shuffle_partitions),
        "spark.default.parallelism": str(max(2, cfg.spark_shuffle_partitions)),
        # Keep spark-warehouse/ and friends out of the working directory.
        "spark.sql.warehouse.dir": f"{cfg.warehouse_uri}/_spark_sql",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "true" if cfg.spark_ui else "false",
        "spark.ui.showConsoleProgress": "false",
        # Landing partitions (arrival_hour=07) stay strings; "07" is not the number 7.
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        # The Delta log of small tables does not need 50 tasks to replay.
        "spark.databricks.delta.snapshotPartitions": "2",
        # VACUUM lists files with this many tasks (10000 by default): far too many for small tables.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(2, cfg.spark_shuffle_partitions)),
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        "spark.sql.adaptive.enabled": "true",
        # A checkpoint carries the constraints Spark inferred for the plan it holds (SPARK-39834);
        # when a later plan holds checkpoints with the same column ids, Spark renames a copy's
        # constraints through a map keyed by the whole column, nullability included. A union's
        # constraints name its first child's columns while its output is nullable if any child's
        # is: such a column was missed, the copy's constraint named a column it does not have, and
        # a union over it failed to plan ("key not found: natural_key#..."; the partitioned join's
        # flush after a restart: its resident copy and a probed segment, both read from key_map).
        # Without propagation only the filters Spark would infer are lost (isnotnull on keys that
        # are never null); no result changes. docs/decisions/no-constraint-propagation.md
        "spark.sql.constraintPropagation.enabled": "false",
        # The coalesced apply's MERGEs run in a thread of their own beside the next batches'
        # decisions (etl.load.protocol): fair sharing between the threads' pools, so a decision's
        # small jobs are not queued behind a MERGE's stages (one thread: the same order as FIFO).
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": SCHEDULER_POOLS.as_uri(),
        # PySpark 4 records the Python call site of every Column and DataFrame call for its error
        # messages: a walk of the Python stack and ~8 Py4J round trips each, 3.4 ms per F.col()
        # here, most of a batch's driver time (docs/decisions/python-call-sites.md). With
        # --verbose, errors name the Python line again.
        "spark.python.sql.dataFrameDebugging.enabled": "true" if cfg.verbose else "false",
    }
    conf.update(GENERATED if cfg.spark_codegen else INTERPRETED)
    options = (JVM_OUTPUT_TO_STDERR, log_option(cfg), archive_option(cfg), cfg.spark_driver_java_options.strip())
    conf["spark.driver.extraJavaOptions"] = " ".join(o for o in options if o)
    return conf
