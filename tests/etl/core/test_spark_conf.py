from importlib import metadata

import pytest

from etl.core.config import EtlConfig, load_config
from etl.core.spark_conf import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    INTERPRETED,
    JVM_OUTPUT_TO_STDERR,
    QUIET_LOG4J,
    delta_package,
    log_option,
    spark_conf,
)


def test_delta_jar_matches_the_installed_wheels():
    spark_mm = ".".join(metadata.version("pyspark").split(".")[:2])
    assert delta_package() == f"io.delta:delta-spark_{spark_mm}_2.13:{metadata.version('delta-spark')}"
    assert delta_package(EtlConfig(delta_package="g:a:1")) == "g:a:1"


def test_conf_configures_delta_and_keeps_the_warehouse_out_of_the_working_directory(tmp_path):
    conf = spark_conf(EtlConfig(warehouse_root=str(tmp_path), spark_driver_memory="3g"))
    assert conf["spark.sql.extensions"] == DELTA_EXTENSION
    assert conf["spark.sql.catalog.spark_catalog"] == DELTA_CATALOG
    assert conf["spark.sql.warehouse.dir"].startswith(str(tmp_path))
    assert conf["spark.driver.memory"] == "3g"


def test_every_driver_runs_without_constraint_propagation(tmp_path):
    """In-process drivers and spark-submit's alike (docs/decisions/no-constraint-propagation.md)."""
    from etl.entrypoints.airflow_support import submit_conf

    cfg = EtlConfig(warehouse_root=str(tmp_path), spark_jars_dir=str(tmp_path))
    assert spark_conf(cfg)["spark.sql.constraintPropagation.enabled"] == "false"
    assert submit_conf(cfg)["spark.sql.constraintPropagation.enabled"] == "false"


def test_the_driver_s_jvm_output_goes_to_stderr_and_configured_options_follow(tmp_path):
    quiet = log_option(EtlConfig())
    assert spark_conf(EtlConfig(spark_jars_dir=str(tmp_path)))["spark.driver.extraJavaOptions"] == f"{JVM_OUTPUT_TO_STDERR} {quiet}"
    cfg = load_config(env={"ETL_SPARK_DRIVER_JAVA_OPTIONS": " -XX:TieredStopAtLevel=1 ", "ETL_SPARK_CLASS_ARCHIVE": "false"})
    assert spark_conf(cfg)["spark.driver.extraJavaOptions"] == f"{JVM_OUTPUT_TO_STDERR} {quiet} -XX:TieredStopAtLevel=1"


def test_drivers_log_quietly_unless_verbose(tmp_path):
    """Spark's start-up notes and the known harmless heartbeat race stay out of a run's stderr;
    ``verbose`` gives Spark's own default profile back."""
    quiet = spark_conf(EtlConfig(spark_jars_dir=str(tmp_path)))["spark.driver.extraJavaOptions"]
    assert f"-Dlog4j2.configurationFile={QUIET_LOG4J.resolve().as_uri()}" in quiet.split()
    assert "log4j2" not in spark_conf(EtlConfig(spark_jars_dir=str(tmp_path), verbose=True))["spark.driver.extraJavaOptions"]
    props = dict(line.split(" = ", 1) for line in QUIET_LOG4J.read_text().splitlines() if " = " in line and not line.startswith("#"))
    assert props["rootLogger.level"] == "warn" and props["appender.console.target"] == "SYSTEM_ERR"
    assert props["logger.inbox.name"] == "org.apache.spark.rpc.netty.Inbox"
    assert props["logger.inbox.filter.ignored.onMatch"] == "DENY"


def test_spark_fetches_the_kafka_source_only_for_a_model_that_reads_a_topic(tmp_path):
    from etl.core.spark_conf import kafka_package
    from tests.helpers import ROOT

    assert "spark-sql-kafka" not in spark_conf(EtlConfig(spark_jars_dir=str(tmp_path)))["spark.jars.packages"]
    kafka = EtlConfig(model_file=str(ROOT / "examples" / "shop" / "kafka.toml"), spark_packages="org.apache.hadoop:hadoop-aws:3.4.2",
                      spark_jars_dir=str(tmp_path))
    packages = spark_conf(kafka)["spark.jars.packages"].split(",")
    assert packages == [delta_package(), kafka_package(), "org.apache.hadoop:hadoop-aws:3.4.2"]
    assert kafka_package() == f"org.apache.spark:spark-sql-kafka-0-10_2.13:{metadata.version('pyspark')}"


def test_jars_recorded_once_resolved_replace_the_resolution_of_every_later_driver(tmp_path):
    """The first driver resolves spark.jars.packages with Ivy and records the jars (etl.io.spark);
    every later one starts with them as spark.jars. A record of other packages, or with a jar gone,
    is not used; a site's own spark_jars always is."""
    import json

    from etl.core.spark_conf import jars_record

    cfg = EtlConfig(spark_jars_dir=str(tmp_path))
    assert "spark.jars" not in spark_conf(cfg) and "spark.jars.packages" in spark_conf(cfg)
    folder = jars_record(cfg)
    folder.mkdir(parents=True)
    jars = [folder / "io.delta_delta-spark_2.13-4.4.0.jar", folder / "io.delta_delta-storage-4.4.0.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    (folder / "jars.json").write_text(json.dumps([str(j) for j in jars]))
    conf = spark_conf(cfg)
    assert conf["spark.jars"] == ",".join(map(str, jars)) and "spark.jars.packages" not in conf
    assert jars_record(cfg.replace(spark_packages="org.apache.hadoop:hadoop-aws:3.4.2")) != folder  # other packages
    assert "spark.jars.packages" in spark_conf(cfg.replace(spark_packages="org.apache.hadoop:hadoop-aws:3.4.2"))
    jars[1].unlink()
    assert "spark.jars.packages" in spark_conf(cfg)  # a jar gone: resolve again
    assert spark_conf(cfg.replace(spark_jars="/opt/jars/a.jar, /opt/jars/b.jar"))["spark.jars"] == "/opt/jars/a.jar,/opt/jars/b.jar"


def fake_jdk(root):
    """A JDK's layout (bin/java, lib/server/libjvm.so): what the archive's key reads."""
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "server").mkdir(parents=True)
    (root / "bin" / "java").write_text("#!/bin/sh\n")
    (root / "bin" / "java").chmod(0o755)
    (root / "lib" / "server" / "libjvm.so").write_bytes(b"a build")
    return root


def test_drivers_map_the_class_archive_of_their_java_once_it_is_written(tmp_path, monkeypatch):
    """Set-up writes the archive (etl.io.spark.make_class_archive); every driver and spark-submit
    maps it from then on. Another Java, or the same one rebuilt in place, is another file: the JVM
    would refuse a stale one without a word. A site's own CDS options win; the setting turns it off."""
    import os

    from etl.core.spark_conf import class_archive

    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(tmp_path / "jdk")))
    cfg = EtlConfig(spark_jars_dir=str(tmp_path / "jars"), verbose=True)  # Spark's own log profile: no -D option
    archive = class_archive(cfg)
    assert archive.parent == tmp_path / "jars" / "class-archives" and archive.suffix == ".jsa"
    assert spark_conf(cfg)["spark.driver.extraJavaOptions"] == JVM_OUTPUT_TO_STDERR  # not written yet
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    assert spark_conf(cfg)["spark.driver.extraJavaOptions"] == f"{JVM_OUTPUT_TO_STDERR} -XX:SharedArchiveFile={archive}"
    own = cfg.replace(spark_driver_java_options="-XX:TieredStopAtLevel=1")
    assert spark_conf(own)["spark.driver.extraJavaOptions"].endswith(f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1")
    assert spark_conf(cfg.replace(spark_driver_java_options="-Xshare:off"))["spark.driver.extraJavaOptions"] == (
        f"{JVM_OUTPUT_TO_STDERR} -Xshare:off")
    off = load_config(env={"ETL_SPARK_CLASS_ARCHIVE": "false", "ETL_VERBOSE": "true", "ETL_SPARK_JARS_DIR": str(tmp_path / "jars")})
    assert class_archive(off) is None and "SharedArchiveFile" not in spark_conf(off)["spark.driver.extraJavaOptions"]

    libjvm = tmp_path / "jdk" / "lib" / "server" / "libjvm.so"  # the same JDK, updated in place
    os.utime(libjvm, ns=(libjvm.stat().st_atime_ns, libjvm.stat().st_mtime_ns + 10**9))
    assert class_archive(cfg) != archive
    assert "SharedArchiveFile" not in spark_conf(cfg)["spark.driver.extraJavaOptions"]
    rebuilt = class_archive(cfg)
    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(tmp_path / "another-jdk")))  # another Java
    assert class_archive(cfg) not in (archive, rebuilt)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert class_archive(cfg) is None and spark_conf(cfg)["spark.driver.extraJavaOptions"] == JVM_OUTPUT_TO_STDERR


@pytest.mark.parametrize("exit_status, writes, installed", [(0, True, True), (3, True, False), (0, False, False)])
def test_an_archive_is_put_in_place_only_when_its_driver_exited_cleanly(tmp_path, monkeypatch, capsys,
                                                                         exit_status, writes, installed):
    """The archive's driver is a child process whose JVM writes the archive as it exits: a driver
    that failed (killed, out of memory, a failed job) leaves no archive, not even part of one, and
    drivers go on starting without. The child here is a script in the driver's place that writes
    where -XX:ArchiveClassesAtExit says and exits as told."""
    from etl.core.spark_conf import archive_option, class_archive
    from etl.io import spark as spark_module

    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(tmp_path / "jdk")))
    child = tmp_path / "driver"
    write = 'echo archive > "${ETL_SPARK_DRIVER_JAVA_OPTIONS##*ArchiveClassesAtExit=}"' if writes else ":"
    child.write_text(f"#!/bin/sh\n{write}\necho the driver said this >&2\nexit {exit_status}\n")
    child.chmod(0o755)
    monkeypatch.setattr(spark_module.sys, "executable", str(child))
    cfg = EtlConfig(spark_jars_dir=str(tmp_path / "jars"))
    made = spark_module.make_class_archive(cfg, timeout=60)
    assert [p.name for p in (tmp_path / "jars" / "class-archives").iterdir()] == ([class_archive(cfg).name] if installed else [])
    if installed:
        assert made == class_archive(cfg) and archive_option(cfg) == f"-XX:SharedArchiveFile={made}"
    else:
        assert made is None and archive_option(cfg) == ""
        assert "no class-data archive for the driver" in capsys.readouterr().err


def test_no_archive_is_written_for_a_site_with_its_own_cds_options(tmp_path, monkeypatch):
    """A site's own -Xshare or -XX:SharedArchiveFile wins: drivers map no archive of ours, so
    set-up spends no minute and no 190 MB on one, even when one exists already."""
    from etl.core.spark_conf import class_archive
    from etl.io.spark import make_class_archive

    monkeypatch.setenv("JAVA_HOME", str(fake_jdk(tmp_path / "jdk")))
    cfg = EtlConfig(spark_jars_dir=str(tmp_path / "jars"), spark_driver_java_options="-Xshare:off")
    assert make_class_archive(cfg) is None and not (tmp_path / "jars").exists()
    class_archive(cfg).parent.mkdir(parents=True)
    class_archive(cfg).write_bytes(b"archive")
    assert make_class_archive(cfg) is None


def test_python_call_sites_are_recorded_only_when_verbose():
    """PySpark 4 records the Python line of every Column call for its error messages, ~8 Py4J
    round trips each (docs/decisions/python-call-sites.md): off unless ``verbose``."""
    key = "spark.python.sql.dataFrameDebugging.enabled"
    assert spark_conf(EtlConfig())[key] == "false"
    assert spark_conf(EtlConfig(verbose=True))[key] == "true"


def test_spark_sql_interprets_instead_of_generating_code_only_when_told():
    """``spark_codegen = false`` (the tests' processes: docs/decisions/driver-codegen-for-tests.md)
    turns both code generators off; on, Spark's own defaults are written out, so that a driver's
    setting and its spark-submit's conf cannot disagree by omission."""
    on = spark_conf(EtlConfig())
    assert {k: on[k] for k in INTERPRETED} == {"spark.sql.codegen.wholeStage": "true",  # Spark's defaults, written
                                                "spark.sql.codegen.factoryMode": "FALLBACK"}
    off = spark_conf(load_config(env={"ETL_SPARK_CODEGEN": "false"}))
    assert {k: off[k] for k in INTERPRETED} == {"spark.sql.codegen.wholeStage": "false",
                                                 "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def test_drivers_use_the_local_file_system_without_processes_once_its_jar_is_compiled(tmp_path):
    """Set-up compiles the class (etl.io.spark.make_local_fs_jar); from then on every driver, its
    executors and spark-submit put it in place of Hadoop's local file system, on the class path
    (spark-submit reads local paths before it loads spark.jars). Off, or not compiled: Hadoop's own."""
    from etl.core.spark_conf import LOCAL_FS_CLASS, local_fs_jar

    cfg = EtlConfig(spark_jars_dir=str(tmp_path / "jars"))
    jar = local_fs_jar(cfg)
    assert jar.parent == tmp_path / "jars" / "local-fs" and jar.suffix == ".jar"
    assert not any("fs.file.impl" in k or "extraClassPath" in k for k in spark_conf(cfg))  # not compiled yet
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"jar")
    conf = spark_conf(cfg)
    assert conf["spark.hadoop.fs.file.impl"] == LOCAL_FS_CLASS
    assert conf["spark.hadoop.fs.AbstractFileSystem.file.impl"] == f"{LOCAL_FS_CLASS}$Fs"
    assert conf["spark.driver.extraClassPath"] == conf["spark.executor.extraClassPath"] == str(jar)
    assert str(jar) not in conf.get("spark.jars", "")
    off = load_config(env={"ETL_SPARK_LOCAL_FS_NIO": "false", "ETL_SPARK_JARS_DIR": str(tmp_path / "jars")})
    assert local_fs_jar(off) is None
    assert not any("fs.file.impl" in k or "extraClassPath" in k for k in spark_conf(off))


def test_an_edited_local_file_system_source_is_compiled_anew(tmp_path, monkeypatch):
    from etl.core import spark_conf as conf_module

    cfg = EtlConfig(spark_jars_dir=str(tmp_path / "jars"))
    before = conf_module.local_fs_jar(cfg)
    edited = tmp_path / "NioLocalFileSystem.java"
    edited.write_text(conf_module.LOCAL_FS_SOURCE.read_text() + "\n// edited\n")
    monkeypatch.setattr(conf_module, "LOCAL_FS_SOURCE", edited)
    assert conf_module.local_fs_jar(cfg) not in (before, None)


def test_without_a_javac_drivers_keep_hadoop_s_local_file_system_and_set_up_says_why(tmp_path, monkeypatch, capsys):
    from etl.io import spark as spark_module

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    cfg = EtlConfig(spark_jars_dir=str(tmp_path / "jars"))
    assert spark_module.make_local_fs_jar(cfg) is None
    assert "no javac" in capsys.readouterr().err
    assert "spark.hadoop.fs.file.impl" not in spark_conf(cfg)


def test_an_s3a_warehouse_fetches_the_s3a_connector_of_pyspark_s_hadoop_and_only_then(tmp_path):
    from etl.core.spark_conf import AWS_SDK_OF_HADOOP, pyspark_hadoop_version

    hadoop = pyspark_hadoop_version()
    assert hadoop == "3.5.0"  # pyspark 4.2.0's client jars: a new pin must name its S3A connector's SDK
    local = EtlConfig(spark_jars_dir=str(tmp_path))
    assert "hadoop-aws" not in spark_conf(local)["spark.jars.packages"]
    on_s3 = EtlConfig(warehouse_root="s3a://bucket/wh", meta_root=str(tmp_path), spark_jars_dir=str(tmp_path))
    sdk = AWS_SDK_OF_HADOOP[hadoop]
    assert spark_conf(on_s3)["spark.jars.packages"].split(",") == [
        delta_package(), f"org.apache.hadoop:hadoop-aws:{hadoop}", f"software.amazon.awssdk:s3:{sdk}",
        f"software.amazon.awssdk:s3-transfer-manager:{sdk}", f"software.amazon.awssdk:sts:{sdk}"]
    assert "software.amazon.awssdk:bundle" in spark_conf(on_s3)["spark.jars.excludes"]
    own = on_s3.replace(object_store_packages="org.apache.hadoop:hadoop-aws:3.5.0, io.delta:delta-storage-s3-dynamodb:4.4.0")
    assert spark_conf(own)["spark.jars.packages"].split(",")[1:] == [
        "org.apache.hadoop:hadoop-aws:3.5.0", "io.delta:delta-storage-s3-dynamodb:4.4.0"]


def test_an_unknown_hadoop_asks_for_the_object_store_packages(tmp_path, monkeypatch):
    from etl.core import spark_conf as module
    from etl.core.config import ConfigError

    monkeypatch.setattr(module, "pyspark_hadoop_version", lambda: "9.9.9")
    on_s3 = EtlConfig(warehouse_root="s3a://bucket/wh", meta_root=str(tmp_path), spark_jars_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=r"pyspark's Hadoop \(9.9.9\).*object_store_packages"):
        spark_conf(on_s3)
    assert "hadoop-aws:9.9.9" in spark_conf(on_s3.replace(object_store_packages="org.apache.hadoop:hadoop-aws:9.9.9"))[
        "spark.jars.packages"]


def test_a_spark_properties_file_adds_spark_settings_and_refuses_others_and_the_job_s_own(tmp_path):
    from etl.core.config import ConfigError
    from etl.core.spark_conf import spark_properties

    path = tmp_path / "s3a.properties"
    path.write_text("# the store\nspark.hadoop.fs.s3a.endpoint = http://minio:9000\n"
                    "spark.hadoop.fs.s3a.secret.key=s3cr3t\\=x\n")
    cfg = EtlConfig(spark_properties_file=str(path))
    assert spark_properties(cfg) == {"spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
                                     "spark.hadoop.fs.s3a.secret.key": "s3cr3t=x"}
    assert spark_properties(EtlConfig()) == {}
    with pytest.raises(ConfigError, match="no such file"):
        spark_properties(EtlConfig(spark_properties_file=str(tmp_path / "missing")))
    path.write_text("fs.s3a.endpoint=http://minio:9000\n")
    with pytest.raises(ConfigError, match="fs.s3a.endpoint is not a Spark setting"):
        spark_properties(cfg)
    path.write_text("spark.jars.packages=org.example:evil:1\n")
    with pytest.raises(ConfigError, match="spark.jars.packages is the job's own"):
        spark_properties(cfg)
    path.write_text("spark.sql.constraintPropagation.enabled=true\n")
    with pytest.raises(ConfigError, match="constraintPropagation.enabled is the job's own.*no-constraint-propagation"):
        spark_properties(cfg)
