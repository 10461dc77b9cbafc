import threading

import pytest

from etl.core.spark_conf import DELTA_EXTENSION
from etl.io.spark import ConflictingSqlSettings, sql_settings


def test_session_has_delta(spark):
    assert spark.conf.get("spark.sql.extensions") == DELTA_EXTENSION
    assert spark.sparkContext.master == "local[2]"
    assert spark.range(3).count() == 3


def test_the_session_records_no_python_call_sites_and_still_names_a_wrong_column(spark):
    """Built from the product's settings (not ``verbose``), the session skips PySpark's per-call
    stack walk (docs/decisions/python-call-sites.md); an analysis error still names the column."""
    from pyspark.errors import AnalysisException
    from pyspark.errors.utils import is_debugging_enabled
    from pyspark.sql import functions as F

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert is_debugging_enabled() is False
    with pytest.raises(AnalysisException, match="no_such_column"):
        spark.range(1).select(F.col("no_such_column")).collect()


def test_sql_settings_hold_for_the_block_and_are_put_back(spark):
    key, unset = "spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions.test.unset"
    before = spark.conf.get(key)
    with pytest.raises(RuntimeError):
        with sql_settings(spark, {key: "true" if before == "false" else "false", unset: "3"}):
            assert spark.conf.get(key) != before and spark.conf.get(unset) == "3"
            raise RuntimeError("the block fails")
    assert spark.conf.get(key) == before
    assert spark.conf.get(unset, None) is None


class _Conf:
    """A session's runtime conf as ``sql_settings`` uses it (the real one: the test above)."""

    def __init__(self, values):
        self.values = dict(values)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def unset(self, key):
        self.values.pop(key, None)


class _Session:
    def __init__(self, **values):
        self.conf = _Conf(values)


def test_a_nested_block_of_another_value_holds_until_it_ends_not_until_the_outer_one_does():
    """The job-count test once nested ``adaptive on`` around a step whose commit turns it off: the
    commit's value stayed in force for every later step of the outer block."""
    session, key = _Session(aqe="false"), "aqe"
    with sql_settings(session, {key: "true"}):
        with sql_settings(session, {key: "false", "other": "1"}):
            assert session.conf.values == {key: "false", "other": "1"}
        assert session.conf.values == {key: "true"}
        with sql_settings(session, {key: "true"}):
            assert session.conf.get(key) == "true"
        assert session.conf.get(key) == "true"
    assert session.conf.values == {key: "false"}


def test_a_setting_refused_on_entry_puts_back_the_ones_set_before_it_and_holds_nothing():
    """A static setting cannot be set at run time: the block fails before its body, and no key is
    left set, nor held against another thread's block."""
    class Refusing(_Conf):
        def set(self, key, value):
            if key == "static":
                raise ValueError("cannot modify a static config")
            super().set(key, value)

    session = _Session(aqe="true")
    session.conf = Refusing(session.conf.values)
    with pytest.raises(ValueError, match="static"):
        with sql_settings(session, {"aqe": "false", "static": "x"}):
            raise AssertionError("the body runs")
    assert session.conf.values == {"aqe": "true"}

    errors = []

    def beside():
        try:
            with sql_settings(session, {"aqe": "true"}):
                pass
        except Exception as e:  # refused, were the failed block's aqe=false still held
            errors.append(e)

    thread = threading.Thread(target=beside)
    thread.start()
    thread.join()
    assert errors == [] and session.conf.values == {"aqe": "true"}


def test_overlapping_blocks_of_two_threads_put_back_the_first_ones_before_when_the_last_ends():
    """The coalesced apply's thread and the decisions' hold the same setting over overlapping
    spans, ended in either order."""
    session, key = _Session(), "aqe"
    opened, release, ended = threading.Event(), threading.Event(), threading.Event()

    def beside():
        with sql_settings(session, {key: "false"}):
            opened.set()
            release.wait(60)
        ended.set()

    thread = threading.Thread(target=beside)
    with sql_settings(session, {key: "false"}):
        thread.start()
        assert opened.wait(60)
    assert session.conf.get(key) == "false"  # the other thread's block is still open
    release.set()
    assert ended.wait(60)
    thread.join()
    assert key not in session.conf.values


def test_another_threads_block_may_not_set_a_value_a_block_holds_differently():
    """One of the two would run with the other's value: refused, and nothing is changed."""

    session, key = _Session(aqe="true"), "aqe"
    errors = []

    def beside():
        try:
            with sql_settings(session, {"other": "1", key: "true"}):
                pass
        except ConflictingSqlSettings as e:
            errors.append(str(e))

    with sql_settings(session, {key: "false"}):
        thread = threading.Thread(target=beside)
        thread.start()
        thread.join()
        assert session.conf.values == {key: "false"}
    assert len(errors) == 1 and "aqe=true" in errors[0] and "aqe=false" in errors[0]
    assert session.conf.values == {key: "true"}


def test_a_checkpoint_held_twice_in_a_union_plans_without_carried_constraints(spark):
    """A checkpoint carries its plan's constraints; held twice in one plan, the copy's are renamed
    by whole column, nullability included. A union's constraints name its first child's (here
    non-null) columns while its output is nullable: the renamed copy's constraint names a column
    it does not have and a union over it fails to plan (the partitioned join's flush after a
    restart, tests/etl/test_stream.py). The session propagates none
    (docs/decisions/no-constraint-propagation.md)."""
    from chispa import assert_df_equality
    from py4j.protocol import Py4JJavaError
    from pyspark.sql import functions as F

    def held_twice():
        ids = spark.range(4)
        non_null = ids.select(F.coalesce(F.col("id").cast("string"), F.lit("")).alias("natural_key"))
        nullable = ids.select(F.when(F.col("id") != 2, F.col("id").cast("string")).alias("natural_key"))
        both = non_null.unionByName(nullable).withColumn("segment_id", F.length("natural_key"))
        held = both.localCheckpoint(eager=True)
        return both, held, held.unionByName(held).localCheckpoint(eager=True)

    with sql_settings(spark, {"spark.sql.constraintPropagation.enabled": "true"}):
        with pytest.raises(Py4JJavaError, match="key not found: natural_key"):
            held_twice()
    assert spark.conf.get("spark.sql.constraintPropagation.enabled") == "false"
    both, held, twice = held_twice()
    assert held._jdf.queryExecution().analyzed().constraints().isEmpty()
    assert_df_equality(twice, both.unionByName(both), ignore_row_order=True, ignore_nullable=True)


def test_a_driver_in_another_time_zone_reads_collected_times_as_utc():
    """PySpark hands a collected timestamp back in the process's local zone; the ETL's driver runs
    in UTC wherever it is started (a driver in Europe/Berlin once took a stored 10:00Z for 11:00Z
    when it planned Kafka ranges)."""
    import subprocess
    import sys

    probe = ("from datetime import datetime\nfrom etl.io.spark import use_utc\n"
             "before = datetime.fromtimestamp(0).hour\nuse_utc()\nprint(before, datetime.fromtimestamp(0).hour)")
    out = subprocess.run([sys.executable, "-c", probe], env={**__import__("os").environ, "TZ": "Europe/Berlin"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "0"]


def test_the_session_factory_puts_the_driver_in_utc(spark):
    """build_spark_session itself switches the process to UTC (the test session is built by it)."""
    import os
    import time

    assert os.environ["TZ"] == "UTC" and time.localtime(0).tm_hour == 0


def test_the_session_s_driver_starts_from_the_class_archive_set_up_wrote(spark):
    """The drivers' class-data archive (written by `make setup`, or by the session fixture when a
    JDK or venv changed since) is mapped by a driver the session factory builds: Spark's and
    Delta's classes come out of it instead of their jars (docs/decisions/class-data-archive.md).
    A stale archive, refused by the JVM without a word, fails here."""
    from pathlib import Path

    from etl.core.config import EtlConfig
    from etl.core.spark_conf import class_archive

    assert class_archive(EtlConfig()).is_file(), "no class-data archive: `python -m etl.io.spark` writes it"
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert f"-XX:SharedArchiveFile={class_archive(EtlConfig())}" in options
    log = Path(options.split("-Xlog:class+load=info:file=")[1].split()[0]).read_text()
    for name in ("org.apache.spark.SparkContext", "io.delta.sql.DeltaSparkSessionExtension"):
        assert f"{name} source: shared objects file (top)" in log, name


def test_the_driver_logs_with_the_quiet_profile_whose_filters_log4j_accepted(spark):
    """The file log4j2 loaded (not our reading of it): WARN and above, and the heartbeat race's two
    messages filtered (docs/operations.md, "Logs")."""
    from etl.core.spark_conf import QUIET_LOG4J

    jvm = spark.sparkContext._jvm
    config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    assert config.getConfigurationSource().getLocation() == str(QUIET_LOG4J.resolve())
    assert str(config.getRootLogger().getLevel()) == "WARN"
    for logger, message in (("org.apache.spark.rpc.netty.Inbox", "Ignoring error"),
                            ("org.apache.spark.executor.Executor", "Issue communicating with driver in heartbeater")):
        found = config.getLoggerConfig(logger)
        regex = found.getFilter()
        assert found.getName() == logger and regex.getClass().getSimpleName() == "RegexFilter"
        assert str(regex) == f"useRaw=false, pattern={message}.*"
        assert (str(regex.getOnMatch()), str(regex.getOnMismatch())) == ("DENY", "NEUTRAL")


def _processes_started() -> int:
    """Processes started on this machine so far (Linux's counter)."""
    with open("/proc/stat") as f:
        return int(next(line for line in f if line.startswith("processes")).split()[1])


def test_a_delta_commit_on_local_files_starts_no_chmod_or_readlink_process(spark, tmp_path):
    """Hadoop without its native library runs `chmod` and `readlink` as processes: about 48 per
    append of a small Delta table here, ~18 ms each. With the class set-up compiled in place of the
    local file system, an append starts next to none (what else runs on the machine may add a few)
    (docs/decisions/local-files-without-a-shell.md)."""
    from etl.core.config import EtlConfig
    from etl.core.spark_conf import LOCAL_FS_CLASS, local_fs_jar

    import shutil

    if not local_fs_jar(EtlConfig()).is_file() and shutil.which("javac") is None:
        pytest.skip("no javac here (a JRE only): drivers keep Hadoop's local file system, as documented")
    assert local_fs_jar(EtlConfig()).is_file(), "not compiled: `python -m etl.io.spark` compiles it"
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    assert hadoop.get("fs.file.impl") == LOCAL_FS_CLASS
    table = str(tmp_path / "t")
    rows = spark.range(3).toDF("id")
    rows.write.format("delta").save(table)
    started = []
    for _ in range(3):
        before = _processes_started()
        rows.write.format("delta").mode("append").save(table)
        started.append(_processes_started() - before)
    assert min(started) < 10, started
    assert spark.read.format("delta").load(table).count() == 12


def test_the_local_file_system_answers_as_hadoop_s_own(spark, tmp_path):
    """The two calls it does in the JVM give what Hadoop's shell commands give: a created file's
    permission (umask applied), a link reported as a link, a missing path as missing; and a rename
    onto a log file that exists is refused, which is what keeps two Delta writers from both
    committing one version."""
    import stat

    from py4j.protocol import Py4JJavaError

    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path
    fs = path(f"file://{tmp_path}").getFileSystem(hadoop)
    raw = fs.getRawFileSystem()
    assert raw.getClass().getName().endswith("NioLocalFileSystem$Raw")

    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI(f"file://{tmp_path}"), hadoop)
    assert context.getDefaultFileSystem().getClass().getName().endswith("NioLocalFileSystem$Fs")

    # A created file gets Hadoop's default permission less Hadoop's umask (not the process's);
    # set permissions land as asked, execute bits included.
    created = tmp_path / "made"
    fs.create(path(f"file://{created}"), True).close()
    hadoop_umask = jvm.org.apache.hadoop.fs.permission.FsPermission.getUMask(hadoop).toShort()
    assert stat.S_IMODE(created.stat().st_mode) == 0o666 & ~hadoop_umask
    for mode in (0o640, 0o751, 0o124, 0o007):
        raw.setPermission(path(f"file://{created}"), jvm.org.apache.hadoop.fs.permission.FsPermission(mode))
        assert stat.S_IMODE(created.stat().st_mode) == mode, oct(mode)
    raw.setPermission(path(f"file://{created}"), jvm.org.apache.hadoop.fs.permission.FsPermission(0o644))

    # Whether a path is a link, as Hadoop's own RawLocalFileSystem answers (which, given a file:
    # path, reads no link either): a file, a directory, a link, a dangling link, nothing.
    hadoop_s = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    hadoop_s.initialize(jvm.java.net.URI("file:///"), hadoop)
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(created)
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")

    def link_status(fs, name):
        try:
            st = fs.getFileLinkStatus(path(f"file://{tmp_path / name}"))
        except Py4JJavaError as exc:
            return exc.java_exception.getClass().getName()
        return st.getPath().toString(), st.isSymlink(), st.isDirectory(), st.getLen()

    for name in ("made", "dir", "link", "dangling", "missing"):
        assert link_status(raw, name) == link_status(hadoop_s, name), name
    assert link_status(raw, "missing") == "java.io.FileNotFoundException"

    # The rename a Delta commit ends with (HDFSLogStore: FileContext.rename without overwrite) is
    # refused onto a commit file that exists: what keeps two writers from both taking a version.
    commit = tmp_path / "00000000000000000000.json"
    commit.write_text("{}\n")
    (tmp_path / ".tmp.json").write_text("{}\n")
    rename = jvm.org.apache.hadoop.fs.Options.Rename
    none = [r for r in rename.values() if r.name() == "NONE"][0]
    options = spark.sparkContext._gateway.new_array(rename, 1)
    options[0] = none
    with pytest.raises(Py4JJavaError, match="FileAlreadyExistsException"):
        context.rename(path(f"file://{tmp_path / '.tmp.json'}"), path(f"file://{commit}"), options)
    assert commit.read_text() == "{}\n" and (tmp_path / ".tmp.json").exists()
