"""CLI errors that must come before any Spark session or write."""

import os

import pytest

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


SPAN = ["--start", "2026-11-22T01:00", "--end", "2026-11-22T02:00"]
# Every command that reads the model: each must refuse it before it creates a directory or table.
COMMANDS = [["generate", "--start", "2026-11-22T01:00"], ["init"], ["run", *SPAN], ["ingest", *SPAN], ["load", *SPAN],
            ["validate", *SPAN], ["report", *SPAN], ["late-lines", *SPAN], ["discard", *SPAN], ["quality-report", *SPAN],
            ["stream"], ["unlock"], ["maintain"]]
GOOD_MODEL = "[entities.product]\nkey = { sku = 'string' }\nattributes = { price = 'decimal(10,2)' }\n"
REFUSED = {  # model file, flags, environment, what the message says
    "a malformed model": ("[entities.product]\nkey = { sku = 'string' }\nattributes = { price = 'money' }\n", [], {},
                          ["entity 'product'", "attributes column 'price'"]),
    "columns equal up to case": ("[entities.product]\nkey = { sku = 'string' }\nattributes = { name = 'string', Name = 'string' }\n",
                                 [], {}, ["entity 'product'", "columns 'name' and 'Name' are one column to Spark"]),
    "a reserved name up to case": ("[entities.product]\nkey = { sku = 'string' }\nattributes = { IS_DELETED = 'boolean' }\n",
                                   [], {}, ["entity 'product'", "attributes column 'IS_DELETED'"]),
    "a directory of the pipeline's": (GOOD_MODEL + "directory = 'key_map'\n", [], {},
                                      ["entity 'product'", "directory 'key_map' is a name the pipeline uses"]),
    "a source outside the landing zone in the model": (GOOD_MODEL + "sources = ['../../../x']\n", [], {},
                                                       ["entity 'product'", "sources: '../../../x' holds a path separator"]),
    "a source outside the landing zone set by --set": (GOOD_MODEL, ["--set", "sources=crm,../../../x"], {},
                                                       ["setting 'sources': '../../../x' holds a path separator"]),
    "a source outside the landing zone in ETL_SOURCES": (GOOD_MODEL, [], {"ETL_SOURCES": "../../../x"},
                                                         ["environment variable ETL_SOURCES", "'../../../x' holds a path separator"]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_model_or_source_fails_every_command_before_anything_is_written(case, capsys, tmp_path, monkeypatch):
    text, flags, env, said = REFUSED[case]
    model = tmp_path / "model.toml"
    model.write_text(text)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The roots one level down: a name that escaped its root would still be seen in tmp_path.
    roots = [f"--set={r}_root={tmp_path / 'roots' / r}" for r in ("warehouse", "landing", "gx", "runs", "reports")]
    for command in COMMANDS:
        assert main([*command, "--model-file", str(model), *roots, *flags]) == EXIT_CONFIG, command
        err = capsys.readouterr().err
        assert "Traceback" not in err and all(s in err for s in said), (command, err)
        if "model file" in said[0] or "entity" in said[0]:
            assert str(model) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.toml"]  # nothing written


def test_generate_refuses_a_source_outside_the_landing_zone_before_writing(capsys, tmp_path):
    landing = tmp_path / "roots" / "landing"
    for sources in ("../../../x", "crm,..", "crm, ./x"):
        assert main(["generate", "--landing-root", str(landing), "--start", "2026-11-22T01:00", "--duration", "60",
                     "--sources", sources]) == EXIT_CONFIG
        err = capsys.readouterr().err
        assert err.startswith("etl: error: --sources: '") and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written, inside the landing zone or beside it


def test_a_model_file_that_cannot_be_read_fails_with_exit_2_naming_it(capsys, tmp_path):
    loop, fifo, latin1, deep = (tmp_path / n for n in ("loop.toml", "fifo.toml", "latin1.toml", "deep.toml"))
    loop.symlink_to(loop)
    os.mkfifo(fifo)
    latin1.write_bytes(b"[entities.caf\xe9]\nkey = { k = 'string' }\n")
    deep.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    for path, said in ((loop, "cannot be found"), (fifo, "is a FIFO, not a file"), (tmp_path, "is a directory, not a file"),
                       (latin1, "is not UTF-8 text"), (deep, "nests arrays or tables too deeply")):
        assert main(["init", "--model-file", str(path), f"--set=warehouse_root={tmp_path / 'w'}"]) == EXIT_CONFIG
        err = capsys.readouterr().err
        assert f"model file {str(path)!r}" in err and said in err and "Traceback" not in err, err
    assert not (tmp_path / "w").exists()


def test_the_command_s_lines_are_stamped_and_other_libraries_info_notes_are_off_unless_verbose(capsys):
    """An always-on loader's log is read by time; Great Expectations' ~250 INFO lines a run buried
    the command's four (issue 45)."""
    import logging
    import re

    from etl.entrypoints.cli import _progress, configure_logging

    _progress("batch 1/2 committed")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[etl\] batch 1/2 committed\n", capsys.readouterr().err)

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers.clear()
    try:
        configure_logging(verbose=False)
        logging.getLogger("great_expectations.data_context").info("Saving 1 Fluent Datasources")
        logging.getLogger("great_expectations.data_context").warning("a real warning")
        logging.getLogger("etl.quality.report").info("quality report written")
        err = capsys.readouterr().err
        assert "Saving 1 Fluent" not in err and "a real warning" in err and "quality report written" in err
        root.handlers.clear()
        configure_logging(verbose=True)
        logging.getLogger("great_expectations.data_context").info("Saving 1 Fluent Datasources")
        assert "Saving 1 Fluent" in capsys.readouterr().err
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def test_a_stream_overlapping_the_runs_on_record_is_refused_before_spark_starts(capsys, tmp_path, monkeypatch):
    """`etl stream` after `make demo` (runs of 5 minutes) on the default @hourly schedule: refused
    in a second with what to do, not after 3.5 minutes of Spark's start-up (issue 45)."""
    import shutil
    import signal

    import etl.io.spark

    monkeypatch.setattr(signal, "signal", lambda *_a: None)  # `etl stream` ignores SIGTERM: not this test process

    def no_spark(*_a, **_k):
        raise AssertionError("Spark was started before the overlap was found")

    monkeypatch.setattr(etl.io.spark, "build_spark_session", no_spark)
    for key in ("20261122T1420-20261122T1425", "20261122T1425-20261122T1430"):  # what the demo's `etl run`s leave
        (tmp_path / "runs" / key).mkdir(parents=True)
        (tmp_path / "runs" / key / "load.json").write_text("{}")
    (tmp_path / "runs" / "20261122T1430-20261122T1435").mkdir()  # ingested only: the tables' check tells what to do
    (tmp_path / "runs" / "20261122T1430-20261122T1435" / "ingest.json").write_text("{}")
    (tmp_path / "wh" / "batch_ledger" / "_delta_log").mkdir(parents=True)  # the warehouse they were loaded into
    roots = ["--set", f"runs_root={tmp_path / 'runs'}", "--warehouse-root", str(tmp_path / "wh"), "--set", "schedule=@hourly"]
    assert main(["stream", *roots]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "overlaps 2 run(s) loaded before (20261122T1420-20261122T1425, 20261122T1425-20261122T1430; 5 minutes" in err
    assert "etl stream --start 2026-11-22T15:00" in err and "--set schedule='*/5 * * * *'" in err
    # The schedule that loaded them: the stream goes on after them (Spark is asked for then).
    with pytest.raises(AssertionError, match="Spark was started"):
        main(["stream", *roots[:-2], "--set", "schedule=*/5 * * * *"])
    # A warehouse made anew since: nothing of those runs is loaded there.
    shutil.rmtree(tmp_path / "wh")
    with pytest.raises(AssertionError, match="Spark was started"):
        main(["stream", *roots])


def test_simulate_live_is_checked_and_runs_the_loaders_model(capsys):
    import json

    base = ["simulate", "run", "--rate", "100", "--relation-mb", "8", "--memory-mb", "4", "--minutes", "2"]
    assert main([*base, "--strategy", "meshjoin", "--live"]) == EXIT_CONFIG
    assert "only partitioned-range and partitioned-hash" in capsys.readouterr().err
    assert main([*base, "--strategy", "native", "--run-minutes", "1"]) == EXIT_CONFIG  # a setting of --live only
    assert "--live" in capsys.readouterr().err
    assert main([*base, "--strategy", "partitioned-range", "--live", "--micro-batch-seconds", "0"]) == EXIT_CONFIG
    assert "--micro-batch-seconds > 0" in capsys.readouterr().err
    assert main([*base, "--strategy", "partitioned-range", "--wait-buffer-tuples", "65536"]) == EXIT_CONFIG
    err = capsys.readouterr().err  # 4 MB of wait buffer leaves no room in 4 MB: the message says so
    assert "memory_budget (4.00 MB must exceed the wait buffer's 4.00 MB" in err, err
    assert main([*base, "--strategy", "partitioned-range", "--wait-buffer-tuples", "0"]) == EXIT_CONFIG  # not "the default"
    assert "--wait-buffer-tuples: expected a number of updates > 0" in capsys.readouterr().err
    assert main([*base, "--strategy", "partitioned-range", "--live", "--run-minutes", "1", "--wait-buffer-tuples", "2000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["processed"] == out["arrived"] == 12_000 and out["final_backlog"] == 0  # every update, flushed
    assert 0 < out["busy_share"] < 1


def test_simulate_live_takes_costs_fitted_on_the_users_own_run(capsys, tmp_path):
    import json

    base = ["simulate", "run", "--strategy", "partitioned-range", "--live", "--rate", "100", "--relation-mb", "8",
            "--memory-mb", "4", "--minutes", "2", "--run-minutes", "1", "--wait-buffer-tuples", "2000"]
    fitted = tmp_path / "costs.json"
    runs = {}
    for fixed in (1.0, 6.0):  # benchmarks.live_costs' shape: the costs, and what they were fitted on
        fitted.write_text(json.dumps({"costs": {"step_fixed_s": fixed, "per_update_s": 0.0}, "fitted_on": {}}))
        assert main([*base, "--live-costs", str(fitted)]) == 0
        runs[fixed] = json.loads(capsys.readouterr().out)
    assert runs[6.0]["avg_delay_s"] > runs[1.0]["avg_delay_s"] + 5.0  # the file's costs are the ones simulated
    for bad in ('{"costs": {"step_fixed": 1}}', '{"costs": {"step_fixed_s": -1}}', "not json"):
        fitted.write_text(bad)
        assert main([*base, "--live-costs", str(fitted)]) == EXIT_CONFIG
        assert "--live-costs" in capsys.readouterr().err
    fitted.write_text('{"costs": {"step_fixed_s": 1.0}}')
    without_live = [a for a in base if a != "--live"][:-4]  # nor --run-minutes
    assert main([*without_live, "--live-costs", str(fitted)]) == EXIT_CONFIG
    assert "settings of --live" in capsys.readouterr().err
