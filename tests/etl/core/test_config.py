import os
import re

import pytest

from etl.core.config import ConfigError, EtlConfig, load_config
from etl.core.registry import NAMES as JOIN_STRATEGIES


def test_defaults_use_the_thesis_table_6_2_values():
    cfg = load_config(env={})
    assert (cfg.r_wb, cfg.alpha, cfg.rho) == (0.4, 0.3, 0.25)
    # n_invoke and the wait buffer derived from memory_budget as the thesis's own sizes give its
    # 3,000 (tests/etl/core/test_sizing.py)
    assert (cfg.n_invoke, cfg.wait_buffer_tuples, cfg.memory_budget) == (0, 0, 40 << 20)
    assert cfg.join_strategy == "native" and cfg.spark_master == "local[*]"


def test_file_then_environment_then_overrides(tmp_path):
    f = tmp_path / "etl.toml"
    f.write_text('[etl]\nn_invoke = 10\nalpha = 0.5\nsources = ["crm", "web"]\njoin_strategy = "meshjoin"\n')
    cfg = load_config(f, env={"ETL_ALPHA": "0.7", "ETL_SPARK_UI": "yes"}, overrides={"join_strategy": "native"})
    assert cfg.n_invoke == 10  # file
    assert cfg.alpha == 0.7  # environment beats file
    assert cfg.spark_ui is True
    assert cfg.join_strategy == "native"  # override beats both
    assert cfg.sources == ("crm", "web")


def test_deleted_references_are_a_warning_unless_the_site_makes_them_strict(tmp_path):
    """``strict_deleted_references`` (issue 45 item 8): off by default, from a file or ETL_*."""
    assert load_config(env={}).strict_deleted_references is False
    assert load_config(env={"ETL_STRICT_DELETED_REFERENCES": "true"}).strict_deleted_references is True
    f = tmp_path / "etl.toml"
    f.write_text("[etl]\nstrict_deleted_references = true\n")
    assert load_config(f, env={"ETL_STRICT_DELETED_REFERENCES": "no"}).strict_deleted_references is False
    with pytest.raises(ConfigError, match="strict_deleted_references"):
        load_config(env={"ETL_STRICT_DELETED_REFERENCES": "sometimes"})


def test_config_file_from_environment(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("theta = 100\n")
    assert load_config(env={"ETL_CONFIG": str(f)}).theta == 100


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ETL_JOIN_STRATEGY": "hashjoin"}, "join_strategy"),
        ({"ETL_MEMORY_BUDGET": "-5"}, "memory_budget"),
        ({"ETL_ALPHA": "1.5"}, "alpha"),
        ({"ETL_N_INVOKE": "many"}, "n_invoke"),
        ({"ETL_R_WB": "0"}, "r_wb"),
        ({"ETL_WAREHOUSE_ROOT": " "}, "warehouse_root"),
        ({"ETL_DELETION_VECTORS": "sometimes"}, "deletion_vectors"),
        ({"ETL_DELETION_VECTORS_FROM_BYTES": "0"}, "deletion_vectors_from_bytes"),
        ({"ETL_PIECE_SECONDS": "7"}, r"piece_seconds' = 7: must divide a minute: one of 1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60"),
        ({"ETL_PIECE_SECONDS": "0"}, "piece_seconds"),
    ],
)
def test_bad_settings_fail_naming_the_setting(env, message):
    with pytest.raises(ConfigError, match=message):
        load_config(env=env)


def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        EtlConfig(join_strategy="nope")
    assert all(name in str(err.value) for name in JOIN_STRATEGIES)


def test_unknown_key_in_file_and_missing_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("n_invokee = 3\n")
    with pytest.raises(ConfigError, match="n_invokee"):
        load_config(f, env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", env={})


def test_an_object_store_warehouse_needs_a_posix_meta_root(tmp_path):
    with pytest.raises(ConfigError, match="meta_root"):
        EtlConfig(warehouse_root="s3a://bucket/warehouse")
    cfg = EtlConfig(warehouse_root="s3a://bucket/warehouse/", meta_root=str(tmp_path / "meta"))
    assert cfg.warehouse_on_object_store
    assert cfg.table_path("key_map") == "s3a://bucket/warehouse/key_map"
    assert cfg.meta_path == tmp_path / "meta"
    with pytest.raises(ConfigError, match="warehouse_root"):
        cfg.warehouse_path  # noqa: B018 (no local path to give)


@pytest.mark.parametrize("name", ["landing_root", "gx_root", "runs_root", "reports_root", "meta_root"])
def test_only_the_warehouse_may_be_on_object_storage(name):
    with pytest.raises(ConfigError, match=name):
        EtlConfig(**{name: "s3a://bucket/x"})


def test_file_uris_are_local_paths_and_meta_defaults_under_the_warehouse(tmp_path):
    cfg = EtlConfig(warehouse_root=f"file://{tmp_path}/wh")
    assert not cfg.warehouse_on_object_store
    assert cfg.warehouse_path == tmp_path / "wh"
    assert cfg.table_path("key_map") == f"{tmp_path}/wh/key_map"
    assert cfg.meta_path == tmp_path / "wh" / "_meta"


def test_deletion_vectors_default_to_auto_and_the_old_booleans_still_mean_on_and_off(tmp_path):
    """The setting was a boolean: a file, a variable or a Python caller that says true or false
    keeps meaning what it meant."""
    assert load_config(env={}).deletion_vectors == "auto"
    f = tmp_path / "etl.toml"
    f.write_text("deletion_vectors = false\n")
    assert load_config(f, env={}).deletion_vectors == "off"
    assert load_config(env={"ETL_DELETION_VECTORS": "true"}).deletion_vectors == "on"
    assert load_config(env={"ETL_DELETION_VECTORS": "Auto"}).deletion_vectors == "auto"
    assert EtlConfig(deletion_vectors=True).deletion_vectors == "on"
    assert EtlConfig().replace(deletion_vectors=False).deletion_vectors == "off"


@pytest.mark.parametrize("hostile", ["../../../x", "crm,../x", "..", "crm/eu"])
def test_a_source_name_outside_one_landing_folder_is_refused_naming_where_it_was_set(tmp_path, hostile):
    """Each source becomes a folder of the landing zone (source_id=<name>): the file, the
    variable and the override that set a bad one are named."""
    bad = next(s for s in hostile.split(",") if s != "crm")
    f = tmp_path / "etl.toml"
    f.write_text(f"sources = {hostile.split(',')!r}\n".replace("'", '"'))
    with pytest.raises(ConfigError, match=re.escape(f"config file '{f}': setting 'sources': '{bad}'")):
        load_config(f, env={})
    with pytest.raises(ConfigError, match=re.escape(f"environment variable ETL_SOURCES: setting 'sources': '{bad}'")):
        load_config(env={"ETL_SOURCES": hostile})
    with pytest.raises(ConfigError, match=re.escape(f"override: setting 'sources': '{bad}'")):
        load_config(env={}, overrides={"sources": hostile})
    with pytest.raises(ConfigError, match=re.escape(f"setting 'sources': '{bad}'")):
        EtlConfig(sources=tuple(hostile.split(",")))


def test_a_source_name_with_a_nul_or_a_line_break_in_the_config_file_is_refused_by_repr(tmp_path):
    f = tmp_path / "etl.toml"
    f.write_text('[etl]\nsources = ["crm", "we\\u0000b"]\n')
    with pytest.raises(ConfigError, match=r"setting 'sources': 'we\\x00b' holds a control character"):
        load_config(f, env={})
    f.write_text('[etl]\nsources = ["crm\\r\\n"]\n')
    with pytest.raises(ConfigError, match=r"'crm\\r\\n' holds a control character"):
        load_config(f, env={})


def test_a_config_file_that_is_no_readable_toml_is_refused_naming_it(tmp_path):
    folder = tmp_path / "etl.toml"
    folder.mkdir()
    with pytest.raises(ConfigError, match="config file .* is a directory, not a file"):
        load_config(folder, env={})
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)  # refused before it is opened: no writer, so opening would block
    with pytest.raises(ConfigError, match="config file .*fifo.toml' is a FIFO, not a file"):
        load_config(fifo, env={})
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b"# caf\xe9\ntheta = 100\n")
    with pytest.raises(ConfigError, match=r"config file .*latin1.toml' is not UTF-8 text \(byte 0xe9 at offset 5\)"):
        load_config(latin1, env={})
    deep = tmp_path / "deep.toml"
    deep.write_text("extra = { a = " + "[" * 5000 + "]" * 5000 + " }\n")
    with pytest.raises(ConfigError, match="config file .*deep.toml' nests arrays or tables too deeply"):
        load_config(deep, env={})
