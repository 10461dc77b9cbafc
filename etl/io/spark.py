"""The Spark session factory: Delta configured, master/memory/warehouse root from the configuration
(the settings themselves are ``etl.core.spark_conf``, shared with the DAGs' spark-submit)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from etl.core.config import EtlConfig, load_config
from etl.core.spark_conf import (
    LOCAL_FS_SOURCE,
    class_archive,
    jars_record,
    java_binary,
    local_fs_jar,
    own_cds_options,
    packages,
    spark_conf,
    spark_properties,
)
from etl.io.files import write_atomic


def check_java() -> str:
    """Fail with a clear message when there is no Java 17+ to run Spark on."""
    java = java_binary()
    if java is None:
        raise RuntimeError("Java was not found: Spark needs Java 17 or newer on PATH (or JAVA_HOME set).")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    return out.splitlines()[0] if out else str(java)


def in_spark_submit() -> bool:
    """True when spark-submit launched this Python (master and jars were set on the command line)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def record_jars(cfg: EtlConfig, session) -> None:
    """Keep the jars Spark just resolved from ``spark.jars.packages`` in a folder the project owns
    (``etl.core.spark_conf.jars_record``), so no later driver resolves them again: each resolution
    cost 1-16 s of Ivy at every start, and printed its 80-line report. Best effort: a driver that
    cannot record them still runs, and the next one resolves."""
    resolved = [j for j in (session.sparkContext.getConf().get("spark.jars", "") or "").split(",") if j.strip()]
    local = [j[len("file:"):] if j.startswith("file:") else j for j in resolved]
    if not local or not all(Path(j).is_file() for j in local):
        return
    target = jars_record(cfg)
    try:
        target.mkdir(parents=True, exist_ok=True)
        kept = []
        for jar in local:
            copy = target / Path(jar).name
            if not copy.exists() or copy.stat().st_size != Path(jar).stat().st_size:
                partial = copy.with_name(copy.name + f".{os.getpid()}.part")
                shutil.copyfile(jar, partial)
                os.replace(partial, copy)
            kept.append(str(copy))
        write_atomic(target / "jars.json", json.dumps(kept, indent=2))
    except OSError as exc:
        print(f"etl: could not record the resolved jars under {target} ({exc}); the next driver resolves them again",
              file=sys.stderr)


def use_utc() -> None:
    """This process (and the Python workers it starts) in UTC. PySpark turns a collected
    timestamp into a naive datetime in the process's local time zone, while every time the
    warehouse stores and compares is UTC (``spark.sql.session.timeZone``): on a driver in
    Europe/Berlin a stored 10:00Z would read back as 10:00 and be taken for 11:00Z (a Kafka piece's
    start, a run's interval)."""
    if os.environ.get("TZ") != "UTC":
        os.environ["TZ"] = "UTC"
        time.tzset()


def build_spark_session(cfg: EtlConfig, app_name: str = "active-dw-etl", master: str | None = None):
    """A SparkSession with Delta. Under spark-submit the submitted master and jars are kept."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    use_utc()
    builder = SparkSession.builder.appName(app_name)
    conf = spark_conf(cfg)
    resolving = "spark.jars.packages" in conf
    if in_spark_submit():
        for key in ("spark.jars.packages", "spark.jars.excludes", "spark.jars"):
            conf.pop(key, None)  # spark-submit has placed them already
        conf.pop("spark.driver.memory")
        conf.pop("spark.driver.extraJavaOptions", None)  # the driver JVM is already running
    else:
        check_java()
        conf = {**spark_properties(cfg), **conf}  # the job's own settings win, as spark-submit's --conf over its --properties-file
        builder = builder.master(master or cfg.spark_master)
        # Ingestion runs Python on the executors (etl.core.records): the interpreter that has this
        # package (PySpark hands PYSPARK_PYTHON to the executors; spark-submit sets it itself).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not cfg.verbose:  # the quiet profile says WARN already; verbose: Spark's own INFO lines too
        session.sparkContext.setLogLevel("WARN")
    if resolving:
        record_jars(cfg, session)
    # Numbering a micro-batch's tuples in arrival order (new surrogate keys, epochs) is a global
    # sort of one bounded batch by design; Spark warns about it on every batch. Planning happens
    # on the driver, so quieting the driver's logger is enough.
    try:
        jvm = session.sparkContext._jvm
        for noisy in (
            "org.apache.spark.sql.execution.window.WindowExec",  # single-partition numbering, by design
            "org.apache.spark.rdd.MapPartitionsRDD",  # "locally checkpointed" notes on every step
            # The MERGE sources' broadcast hint (etl.io.delta_merges) also reaches Delta's outer join,
            # where the source is the kept side and cannot be broadcast: a warning every MERGE.
            "org.apache.spark.sql.catalyst.analysis.HintErrorLogger",
        ):
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(noisy, jvm.org.apache.logging.log4j.Level.ERROR)
    except Exception:  # pragma: no cover - a different logging backend: keep the warning
        pass
    return session


# Runtime SQL settings are the session's, shared by its threads: the coalesced apply runs beside
# the next batches' decisions (etl.load.protocol), each block setting the same values. Per key, the
# blocks open form a stack: the newest one's value is in force, and when the last one ends the
# value from before the first is put back (two overlapping blocks restoring their own "before"
# would leave the other's value behind). A block nested in the same thread may set another value,
# in force until it ends; another thread's block may not, since one of the two would run with the
# other's value (refused: ``ConflictingSqlSettings``).
_SETTINGS_GUARD = threading.Lock()
# (session, key) -> (the value before its first block, its blocks open as [(block, thread, value)])
_OPEN_SETTINGS: dict[tuple[int, str], tuple[str | None, list[tuple[object, int, str]]]] = {}


class ConflictingSqlSettings(RuntimeError):
    """A block set a runtime SQL setting that another thread's open block holds at another value."""


@contextmanager
def sql_settings(spark, settings: dict[str, str]):
    """Run a block with these runtime SQL settings, then put back what was in force before it."""
    session, thread, block = id(spark), threading.get_ident(), object()
    opened: list[str] = []
    try:
        with _SETTINGS_GUARD:
            for key, value in settings.items():
                for _, other, held in _OPEN_SETTINGS.get((session, key), (None, ()))[1]:
                    if other != thread and held != value:
                        raise ConflictingSqlSettings(
                            f"{key}={value} asked while another thread's block holds {key}={held}: "
                            "the session's settings are shared by its threads")
            for key, value in settings.items():
                open_ = _OPEN_SETTINGS.get((session, key)) or (spark.conf.get(key, None), [])
                spark.conf.set(key, value)  # may refuse (a static setting): the keys opened before are put back
                open_[1].append((block, thread, value))
                _OPEN_SETTINGS[(session, key)] = open_
                opened.append(key)
        yield
    finally:
        with _SETTINGS_GUARD:
            for key in opened:
                _close(spark, (session, key), block)


def _close(spark, held: tuple[int, str], block) -> None:
    """``block`` ended on the key: the newest block still open sets its value, or the last one
    ended puts back the value from before the first."""
    before, blocks = _OPEN_SETTINGS[held]
    blocks[:] = [b for b in blocks if b[0] is not block]
    if blocks:
        spark.conf.set(held[1], blocks[-1][2])
        return
    del _OPEN_SETTINGS[held]
    if before is None:
        spark.conf.unset(held[1])
    else:
        spark.conf.set(held[1], before)


def make_class_archive(cfg: EtlConfig, again: bool = False, timeout: float = 900) -> Path | None:
    """Write this machine's driver class-data archive (``etl.core.spark_conf.class_archive``) once.

    A driver started with ``-XX:ArchiveClassesAtExit`` runs what every job runs, stops, and its JVM
    writes the classes it loaded as it exits. The file is put in place only when that JVM exited
    cleanly, so no driver maps a half-written one. Best effort: without it drivers start as before."""
    archive = class_archive(cfg)
    if archive is None or own_cds_options(cfg):
        return None  # off, no Java, or the site's own CDS options: drivers map no archive of ours
    if archive.is_file() and not again:
        return archive
    partial = archive.with_name(f"{archive.name}.{uuid.uuid4().hex}.part")
    options = f"{cfg.spark_driver_java_options.strip()} -XX:ArchiveClassesAtExit={partial}".strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY_")}  # a driver of its own
    env.update(ETL_SPARK_CLASS_ARCHIVE="false", ETL_SPARK_DRIVER_JAVA_OPTIONS=options,
               ETL_SPARK_JARS_DIR=cfg.spark_jars_dir, ETL_SPARK_JARS=cfg.spark_jars,
               ETL_SPARK_LOCAL_FS_NIO=str(cfg.spark_local_fs_nio).lower())  # the class path it archives
    cause = ""
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        for stale in archive.parent.glob("*.part"):  # left by a set-up killed while its JVM wrote
            if time.time() - stale.stat().st_mtime > 3600:
                stale.unlink(missing_ok=True)
        child = subprocess.Popen([sys.executable, "-m", "etl.io.spark", "--archive-driver"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # its JVM too, before it writes anything
            child.communicate()
            raise
        if child.returncode == 0 and partial.is_file() and partial.stat().st_size > 0:
            os.replace(partial, archive)
            return archive
        cause = output.strip()[-2000:] or f"exit status {child.returncode}, no archive written"
    except (OSError, subprocess.TimeoutExpired) as exc:
        cause = str(exc)
    finally:
        partial.unlink(missing_ok=True)
    print(f"etl: no class-data archive for the driver ({cause}); drivers start without one", file=sys.stderr)
    return None


def make_local_fs_jar(cfg: EtlConfig, timeout: float = 300) -> Path | None:
    """Compile ``etl.core.spark_conf.LOCAL_FS_SOURCE`` against this pyspark's Hadoop into
    ``local_fs_jar(cfg)`` once, with the JDK's ``javac``. Best effort, as the class archive: without
    a ``javac`` (a JRE only) or when it fails, drivers keep Hadoop's own local file system."""
    jar = local_fs_jar(cfg)
    if jar is None or jar.is_file():
        return jar
    java = java_binary()
    javac = shutil.which("javac", path=str(java.parent)) if java is not None else None
    javac = javac or shutil.which("javac")
    spec = importlib.util.find_spec("pyspark")
    if javac is None or spec is None or not spec.origin:
        print("etl: no javac (a JDK's compiler) here: drivers keep Hadoop's local file system, which runs "
              "chmod and readlink as processes (docs/decisions/local-files-without-a-shell.md)", file=sys.stderr)
        return None
    hadoop_jars = os.path.join(os.path.dirname(spec.origin), "jars", "*")
    try:
        jar.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
            done = subprocess.run([javac, "--release", "17", "-nowarn", "-cp", hadoop_jars, "-d", tmp, str(LOCAL_FS_SOURCE)],
                                  capture_output=True, text=True, timeout=timeout)
            if done.returncode != 0:
                raise OSError((done.stdout + done.stderr).strip()[-2000:] or f"javac exit status {done.returncode}")
            partial = Path(tmp) / "classes.jar"
            with zipfile.ZipFile(partial, "w") as out:
                for cls in sorted(Path(tmp).rglob("*.class")):
                    out.write(cls, cls.relative_to(tmp).as_posix())
            os.replace(partial, jar)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"etl: could not compile {LOCAL_FS_SOURCE.name} ({exc}); drivers keep Hadoop's local file system",
              file=sys.stderr)
        return None
    return jar


def _archive_driver() -> None:
    """The driver whose JVM writes the archive: the calls every job makes, then a clean JVM exit
    (the archive is written as it exits; its exit status is this process's)."""
    from delta.tables import DeltaTable

    cfg = load_config()
    # With generated code whatever the caller's setting (the tests interpret): production drivers
    # map the same archive and load Janino's and the generated code's classes.
    spark = build_spark_session(cfg.replace(spark_master="local[2]", spark_codegen=True), app_name="etl-class-archive")
    gateway_process = spark.sparkContext._gateway.proc
    if gateway_process is None:
        sys.exit("etl: the archive's driver must start its own JVM (not under spark-submit)")
    with tempfile.TemporaryDirectory() as tmp:
        lines = Path(tmp) / "lines.jsonl"
        lines.write_text('{"k": "1", "v": 2.5}\n{"k": "2", "v": null}\n')
        df = spark.read.schema("k string, v double").json(str(lines))
        df.groupBy("k").count().orderBy("k").collect()
        table = str(Path(tmp) / "table")
        df.write.format("delta").save(table)
        DeltaTable.forPath(spark, table).alias("t").merge(df.alias("s"), "t.k = s.k") \
            .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
        spark.read.format("delta").load(table).where("v > 1").collect()
    spark.stop()
    gateway_process.stdin.close()  # the gateway exits at the end of its input, writing the archive
    sys.exit(gateway_process.wait(timeout=600))


def _prefetch(again: bool = False) -> None:
    """Start and stop a session once so Spark downloads the Delta jars (recorded for every later
    driver), then write the driver's class-data archive."""
    print(f"java: {check_java()}")
    cfg = load_config()
    print(f"fetching {packages(cfg)} (cached after the first time)...", flush=True)
    spark = build_spark_session(cfg.replace(spark_master="local[1]"), app_name="etl-prefetch")
    spark.range(1).count()
    spark.stop()
    jar = make_local_fs_jar(cfg)
    if jar is not None:
        print(f"local file system without a process per call: {jar}")
    started = time.monotonic()
    archive = make_class_archive(cfg, again=again)
    if archive is not None:
        print(f"driver class-data archive: {archive} ({time.monotonic() - started:.0f} s)")
    print("Spark with Delta is ready.")


if __name__ == "__main__":
    if sys.argv[1:] == ["--archive-driver"]:
        _archive_driver()
    else:
        _prefetch(again="--class-archive-again" in sys.argv[1:])
