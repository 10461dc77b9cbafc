"""CLI errors that must come before any Spark session or write."""

from etl.entrypoints.cli import EXIT_CONFIG, main


def test_unknown_setting_and_bad_value_exit_2(capsys, tmp_path):
    assert main(["report", "--start", "2026-11-22T01:00", "--end", "2026-11-22T02:00", "--set", "nope=1"]) == EXIT_CONFIG
    assert "nope" in capsys.readouterr().err
    assert main(["init", "--set", "memory_budget=-1"]) == EXIT_CONFIG
    assert "memory_budget" in capsys.readouterr().err


def test_interval_must_be_whole_minutes(capsys):
    assert main(["load", "--start", "2026-11-22T01:00:30", "--end", "2026-11-22T02:00"]) == EXIT_CONFIG
    assert "whole minute" in capsys.readouterr().err


def test_generate_writes_files_and_refuses_to_overwrite(capsys, tmp_path):
    args = ["generate", "--landing-root", str(tmp_path), "--start", "2026-11-22T01:00", "--duration", "60", "--rate", "5"]
    assert main(args) == 0
    assert list(tmp_path.rglob("*.jsonl"))
    assert main(args) == EXIT_CONFIG
    assert "refusing to overwrite" in capsys.readouterr().err


def test_report_of_an_unknown_run_says_not_run(capsys, tmp_path):
    assert main(["report", "--start", "2026-11-22T01:00", "--end", "2026-11-22T02:00", "--set", f"runs_root={tmp_path}"]) == 0
    assert "not run" in capsys.readouterr().out


def test_settings_json_sets_strategy_settings_and_is_checked(capsys):
    from etl.entrypoints.cli import build_parser, config_from_args

    args = build_parser().parse_args(
        ["load", "--start", "2026-11-22T01:00", "--end", "2026-11-22T02:00", "--settings-json", '{"n_invoke": 500, "alpha": 0.5, "k": 4}']
    )
    cfg = config_from_args(args)
    assert (cfg.n_invoke, cfg.alpha, cfg.k) == (500, 0.5, 4)
    for bad, named in (('{"n_invok": 5}', "n_invok"), ('{"memory_budget": -1}', "memory_budget"), ("[1]", "JSON object"), ("{", "not valid JSON")):
        assert main(["load", "--start", "2026-11-22T01:00", "--end", "2026-11-22T02:00", "--settings-json", bad]) == EXIT_CONFIG
        assert named in capsys.readouterr().err


def test_maintain_rejects_an_unknown_step_before_spark(capsys):
    assert main(["maintain", "--steps", "defrag"]) == EXIT_CONFIG
    assert "defrag" in capsys.readouterr().err


def test_strategy_settings_accept_only_the_strategys_own(capsys):
    from etl.entrypoints.cli import build_parser, config_from_args

    span = ["--start", "2026-11-22T01:00", "--end", "2026-11-22T02:00"]
    args = build_parser().parse_args(["load", *span, "--join-strategy", "partitioned-range", "--strategy-settings", '{"n_invoke": 500}'])
    assert config_from_args(args).n_invoke == 500
    for strategy, bad, named in (
        ("native", '{"warehouse_root": "/tmp/elsewhere"}', "warehouse_root is not a setting of native"),
        ("partitioned-range", '{"landing_root": "/"}', "landing_root is not a setting of partitioned-range"),
        ("partitioned-range", '{"sources": "x", "max_rejected_fraction": 1}', "max_rejected_fraction, sources are not"),
        ("partitioned-range", '{"k": 4}', "k is not a setting of partitioned-range"),
        ("meshjoin", '{"k": -4}', "'k'"),
        ("meshjoin", '{"gx_root": "/x"}', "gx_root is not a setting of meshjoin"),
    ):
        assert main(["load", *span, "--join-strategy", strategy, "--strategy-settings", bad]) == EXIT_CONFIG
        assert named in capsys.readouterr().err


def test_exit_codes_of_errors_met_while_running():
    """What `etl` answers when a job meets them (the run's own tests reach them for real)."""
    import errno

    from py4j.protocol import Py4JJavaError  # noqa: F401  (the shape of a JVM error below)

    from etl.entrypoints.cli import EXIT_LOCKED, exit_code_of
    from etl.io.landing import LandingError
    from etl.io.lock import WarehouseLocked
    from etl.io.runs import LandingChanged, OverlappingRunError, RunOwnedByAnotherStrategy
    from etl.jobs import RunAlreadyLoaded

    for exc in (OverlappingRunError("x"), LandingChanged("x"), RunOwnedByAnotherStrategy("x"), LandingError("x"),
                RunAlreadyLoaded("x"), PermissionError(13, "Permission denied", "/w")):
        assert exit_code_of(exc)[0] == EXIT_CONFIG, exc
    assert exit_code_of(WarehouseLocked("x"))[0] == EXIT_LOCKED
    assert exit_code_of(OSError(errno.ENOSPC, "No space left on device"))[0] == EXIT_LOCKED
    wrapped = RuntimeError("An error occurred while calling o123.save.\n: java.io.IOException: No space left on device")
    assert exit_code_of(wrapped)[0] == EXIT_LOCKED
    assert exit_code_of(KeyError("a bug"))[0] is None  # a bug keeps its trace (exit 1)


def test_a_malformed_model_fails_before_anything_is_written(capsys, tmp_path):
    model = tmp_path / "model.toml"
    model.write_text("[entities.product]\nkey = { sku = 'string' }\nattributes = { price = 'money' }\n")
    roots = [f"--set={r}_root={tmp_path / r}" for r in ("warehouse", "landing", "gx", "runs", "reports")]
    for command in (["init"], ["run", "--start", "2026-11-22T01:00", "--end", "2026-11-22T02:00"],
                    ["generate", "--start", "2026-11-22T01:00"]):
        assert main([*command, "--model-file", str(model), *roots]) == EXIT_CONFIG
        err = capsys.readouterr().err
        assert str(model) in err and "entity 'product'" in err and "attributes column 'price'" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.toml"]  # nothing written
