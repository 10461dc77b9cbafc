"""``etl``: generate a stream, and ingest, load, validate and report a run, from the shell or spark-submit.

    etl generate --start 2026-11-22T10:00 --duration 300 --rate 40
    etl run --start 2026-11-22T10:00 --end 2026-11-22T10:05 [--join-strategy native]
    etl ingest|load|validate|report --start ... --end ...
    etl stream [--start ...] [--until ...]          (the always-on loader; SIGTERM stops it)
    etl late-lines|discard --start ... --end ...   (landing files changed after a load; a mistaken ingest)
    etl unlock [--force]                            (a load lock whose holder is gone)
    etl simulate figures|recommend|run ...   (no Spark: the thesis's simulator)

Settings come from ``--config FILE`` (or ``$ETL_CONFIG``), ``ETL_*`` variables and the flags
below, in that order of precedence (flags win). Exit codes: 0 ok; 2 bad configuration or input,
refused before anything was written (an overlapping interval, a run owned by another strategy,
landing files changed after their run loaded, an unreadable landing zone); 3 quality gate
failed; 4 rejection ceiling exceeded; 5 retry later: another load holds the warehouse, or the
disk is full (nothing is lost: the rerun resumes); 1 anything else (a bug: please report it).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from etl.core import registry
from etl.core.config import ConfigError, EtlConfig, load_config, strategy_settings

EXIT_CONFIG, EXIT_VALIDATION, EXIT_REJECTIONS, EXIT_LOCKED = 2, 3, 4, 5


TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # UTC, as every time the warehouse stores


def _progress(message: str) -> None:
    """A line of the command's own on stderr, stamped: an always-on loader's log is read by time."""
    print(f"{time.strftime(TIME_FORMAT, time.gmtime())} [etl] {message}", file=sys.stderr, flush=True)


def configure_logging(verbose: bool) -> None:
    """The package's own log always; other libraries' INFO notes (Great Expectations writes some
    250 a run, py4j some) only when ``verbose``: warnings and errors of all are kept. A host that
    set up logging already (pytest) keeps its handlers."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", TIME_FORMAT)
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("etl").setLevel(logging.INFO)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML configuration file (default: $ETL_CONFIG)")
    parser.add_argument("--model-file", help="the warehouse model, TOML (setting model_file; default: the customer model)")
    parser.add_argument("--entity", help="the model's entity to work on (setting entity; default: its first)")
    parser.add_argument("--join-strategy", choices=registry.NAMES, help="join strategy (setting join_strategy)")
    parser.add_argument("--spark-master", help="Spark master URL (setting spark_master; ignored under spark-submit)")
    parser.add_argument("--warehouse-root", help="where the Delta tables live (setting warehouse_root)")
    parser.add_argument("--landing-root", help="where updates land (setting landing_root)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="any other setting")
    parser.add_argument("-v", "--verbose", action="store_true", default=None,
                        help="every library's log on stderr, Spark's and Great Expectations' INFO notes too (setting verbose)")
    parser.add_argument(
        "--settings-json",
        default="",
        metavar="JSON",
        help='settings as one JSON object, e.g. \'{"n_invoke": 500}\' (the DAG passes its run parameters this way)',
    )


def _interval_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--start", required=True, help="interval start, ISO 8601, whole minute, UTC if no zone")
    parser.add_argument("--end", required=True, help="interval end (exclusive)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="etl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write a synthetic update stream (b-model x PQRS) as landing files")
    _common(gen)
    gen.add_argument("--start", required=True, help="first arrival time, ISO 8601 (UTC if no zone)")
    gen.add_argument("--duration", type=float, default=300.0, help="seconds of stream (default 300)")
    gen.add_argument("--rate", type=float, default=40.0, help="average updates per second (default 40)")
    gen.add_argument("--sources", default="", help="comma-separated source ids (default: the setting sources, else crm,web)")
    gen.add_argument("--key-domain", type=int, default=10_000, help="existing natural keys 0..N-1 (default 10000)")
    gen.add_argument("--new-key-share", type=float, default=0.05)
    gen.add_argument("--duplicate-share", type=float, default=0.02, help="re-delivered updates")
    gen.add_argument("--unchanged-share", type=float, default=0.05, help="updates repeating current content")
    gen.add_argument("--malformed-share", type=float, default=0.01)
    gen.add_argument("--b", type=float, default=0.6, help="b-model bias, 0.5 (smooth) to <1 (bursty)")
    gen.add_argument("--pqrs", default="0.4,0.25,0.2,0.15", help="PQRS quadrant probabilities p,q,r,s")
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument("--overwrite", action="store_true", help="replace landing files that already exist")

    init = sub.add_parser("init", help="create the warehouse tables (idempotent)")
    _common(init)

    for name, text in (
        ("ingest", "validate a run's landed files into ingested_updates and rejected_updates"),
        ("late-lines", "list landing files of a loaded run that changed since; --move-to moves late lines on"),
        ("discard", "drop the ingest of a run that has not started loading"),
        ("load", "join and load a run's ingested updates through the join strategy"),
        ("validate", "run the expectation suites (quality gate) and build Data Docs"),
        ("report", "print what happened in a run"),
        ("run", "ingest, load, validate and report in one Spark session"),
        ("quality-report", "every suite over the warehouse, Data Docs, windowed metrics per source with plots"),
    ):
        p = sub.add_parser(name, help=text)
        _common(p)
        _interval_args(p)
        p.add_argument("--json", action="store_true", help="print the summary as JSON")
        if name in ("load", "run"):
            p.add_argument(
                "--strategy-settings", default="", metavar="JSON",
                help='the join strategy\'s own settings for this run, e.g. \'{"n_invoke": 500}\' (the DAG passes its '
                     'strategy_settings parameter this way; anything else is refused)',
            )
        if name == "late-lines":
            p.add_argument("--move-to", metavar="MINUTE",
                           help="move appended/added lines into this minute's landing files (a minute no run has ingested)")

    stream = sub.add_parser(
        "stream", help="the always-on loader: load each arrival window once its landing minutes close (one Spark "
                       "session; SIGTERM stops it after the piece being loaded, a restart resumes)")
    _common(stream)
    stream.add_argument("--start", help="a time in the first run to load, ISO 8601 (default: the run left open, "
                                        "else the one after the last run loaded, else the current one)")
    stream.add_argument("--until", help="stop once every run starting before this time is loaded (default: run until stopped)")

    show = sub.add_parser("show", help="print a table or view of the entity (no name: list them with their rows)")
    _common(show)
    show.add_argument("name", nargs="?", help="key_map, the entity's table (customer_current, orders_fact: with its "
                                              "dimensions' natural keys), outcome_log, rejected_updates, ...")
    show.add_argument("--run", default="", metavar="RUN_KEY", help="only this run's rows (20261122T0305-20261122T0310)")
    show.add_argument("--where", default="", metavar="CONDITION",
                      help="a Spark SQL condition, e.g. \"city = 'Oslo'\" (any expression: it runs in your own session)")
    show.add_argument("--limit", type=int, default=20, help="rows to print (default 20)")
    show.add_argument("--columns", default="", help="comma-separated columns to print (default: all)")
    show.add_argument("--json", action="store_true", help="JSON lines, whole values")
    show.add_argument("--fresh", action="store_true",
                      help="the entity's table or key_map with the logged, not yet applied batches merged over it "
                           "(apply_interval_seconds; docs/reading-fresh-rows.md)")

    unlock = sub.add_parser("unlock", help="remove the load lock when its holder is gone (--force: whatever holds it)")
    _common(unlock)
    unlock.add_argument("--force", action="store_true", help="remove it even if its holder may be running (another host)")

    maintain = sub.add_parser("maintain", help="OPTIMIZE, VACUUM and rebalance key_map segments (takes the load lock)")
    _common(maintain)
    maintain.add_argument(
        "--steps", default="rebalance,optimize,vacuum", help="comma-separated subset of rebalance,optimize,vacuum; or relayout: lay key_map out for --join-strategy (range or hash)"
    )
    sim = sub.add_parser("simulate", help="the thesis's simulator: reproduce its figures, or recommend a strategy")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    figs = sim_sub.add_parser("figures", help="Figures 6.5-6.13 as PNG + JSON (minutes; --quick: fewer points)")
    figs.add_argument("--out", default="docs/results/simulator", help="output directory")
    figs.add_argument("--quick", action="store_true", help="every other point of each sweep, 10 simulated minutes")
    for name, text in (
        ("recommend", "simulate every strategy on your workload and recommend one, with settings"),
        ("run", "simulate one strategy and print its metrics as JSON"),
    ):
        p = sim_sub.add_parser(name, help=text)
        if name == "run":
            p.add_argument("--strategy", choices=registry.NAMES, required=True)
        p.add_argument("--rate", type=float, default=1000.0, help="average updates per second (thesis: 1000)")
        p.add_argument("--relation-mb", type=float, default=200.0, help="size of key_map, MB (thesis: 200)")
        p.add_argument("--memory-mb", type=float, default=40.0, help="memory of the join, MB (thesis: 40)")
        p.add_argument("--b", type=float, default=0.6, help="b-model burstiness, 0.5 smooth .. <1 bursty (thesis: 0.6)")
        p.add_argument("--pqrs", default="", help="key skew as PQRS p,q,r,s (default: the simulator's)")
        p.add_argument("--n-invoke", type=int, default=3000, help="probe threshold (thesis: 3000)")
        p.add_argument("--max-wait-s", type=float, default=0.0,
                       help="wait bound of the partitioned join, seconds (default 0: none, as in the thesis)")
        p.add_argument("--minutes", type=float, default=20.0, help="simulated minutes (default 20)")
        p.add_argument("--seed", type=int, default=7)
        p.add_argument("--wait-buffer-tuples", type=int, default=None,
                       help="the partitioned join's wait buffer, in updates (default: Table 6.2's 4 MB of 64-byte tuples)")
        p.add_argument("--live", action="store_true",
                       help="the partitioned joins as etl stream runs them on Spark (its measured per-step costs, "
                            "windows, runs ending with a flush), every update counted: docs/simulator.md")
        p.add_argument("--micro-batch-seconds", type=float, default=None, help="--live: the stream's window (default 10)")
        p.add_argument("--live-costs", default=None, metavar="FILE",
                       help="--live: the loader's costs fitted on your own run (benchmarks.live_costs' JSON; "
                            "default: the recorded full-size run's)")
        p.add_argument("--run-minutes", type=float, default=None,
                       help="--live: the schedule's interval, each run ending with a flush (default 10; 0: one run)")
    return parser


def _simulate(args: argparse.Namespace) -> int:
    from etl.simulator import experiments
    from etl.simulator.engine import LIVE_STRATEGIES
    from etl.simulator.model import MB, LiveCosts, SimParams

    if args.sim_command == "figures":
        base = SimParams(duration_s=600.0, warmup_s=60.0) if args.quick else SimParams()
        command = "etl simulate figures --out " + args.out + (" --quick" if args.quick else "")
        results = experiments.run_experiments(base, quick=args.quick, progress=_progress)
        out = Path(args.out)
        json_path = experiments.write_results(results, out, command)
        for path in experiments.write_figures(results, out):
            _progress(f"wrote {path}")
        _progress(f"wrote {json_path} ({results['wall_seconds']:.0f} s of simulation)")
        return 0
    try:
        fields = dict(
            rate=args.rate,
            relation_bytes=int(args.relation_mb * MB),
            memory_budget=int(args.memory_mb * MB),
            b=args.b,
            n_invoke=args.n_invoke,
            max_wait_s=args.max_wait_s,
            duration_s=args.minutes * 60,
            warmup_s=min(360.0, args.minutes * 60 / 8),
            seed=args.seed,
        )
        if args.wait_buffer_tuples is not None:
            if args.wait_buffer_tuples <= 0:  # the partitioned join holds every tuple it cannot join yet there
                raise ValueError("--wait-buffer-tuples: expected a number of updates > 0 (leave it out for Table 6.2's)")
            fields["wait_buffer_bytes"] = args.wait_buffer_tuples * SimParams.s_bytes
        if not args.live and (args.micro_batch_seconds is not None or args.run_minutes is not None or args.live_costs):
            raise ValueError("--micro-batch-seconds, --run-minutes and --live-costs are settings of --live")
        if args.live:
            window = 10.0 if args.micro_batch_seconds is None else args.micro_batch_seconds
            run_minutes = 10.0 if args.run_minutes is None else args.run_minutes
            if getattr(args, "strategy", "partitioned-range") not in LIVE_STRATEGIES:
                raise ValueError(f"--live: only {' and '.join(LIVE_STRATEGIES)} are modelled on Spark")
            if window <= 0 or run_minutes < 0:
                raise ValueError("--live: expected --micro-batch-seconds > 0 and --run-minutes >= 0")
            fields.update(live=LiveCosts.from_file(args.live_costs) if args.live_costs else LiveCosts(), tick_s=window, run_s=run_minutes * 60, warmup_s=0.0)
        if args.pqrs:
            pqrs = tuple(float(x) for x in args.pqrs.split(","))
            if len(pqrs) != 4 or abs(sum(pqrs) - 1) > 1e-9 or min(pqrs) < 0:
                raise ValueError("--pqrs: expected four non-negative numbers p,q,r,s summing to 1")
            fields["pqrs"] = pqrs
        params = SimParams(**fields)
    except ValueError as exc:
        print(f"etl: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.sim_command == "recommend":
        _print(experiments.recommend(params, progress=_progress), True)
    else:
        from etl.simulator.engine import simulate

        result = simulate(args.strategy, params).as_dict()
        result.pop("buffered")
        _print(result, True)
    return 0


def config_from_args(args: argparse.Namespace) -> EtlConfig:
    overrides = {
        "model_file": args.model_file,
        "entity": args.entity,
        "join_strategy": args.join_strategy,
        "spark_master": args.spark_master,
        "warehouse_root": args.warehouse_root,
        "landing_root": args.landing_root,
        "verbose": args.verbose,
    }
    if args.settings_json.strip():
        overrides.update(_json_object(args.settings_json, "--settings-json"))
    for item in args.set:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        overrides[k.strip()] = v.strip()
    cfg = load_config(args.config, overrides=overrides)
    if cfg.table_store != "delta":
        raise ConfigError(f"setting 'table_store' = {cfg.table_store!r}: a command's tables would live only as long as its "
                          "process (it is for tests of the load protocol); the command line writes the Delta warehouse")
    if getattr(args, "strategy_settings", "").strip():
        given = _json_object(args.strategy_settings, "--strategy-settings")
        cfg = cfg.replace(**strategy_settings(cfg.join_strategy, given))
    return cfg


def _json_object(text: str, flag: str) -> dict:
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: not valid JSON ({exc})") from None
    if not isinstance(given, dict):
        raise ConfigError(f"{flag}: expected a JSON object of setting names to values")
    return given


def _print(summary: dict, as_json: bool, text: str | None = None) -> None:
    print(json.dumps(summary, indent=2, sort_keys=True, default=str) if as_json or text is None else text)


def main(argv: list[str] | None = None) -> int:
    configure_logging(verbose=False)
    args = build_parser().parse_args(argv)
    if args.command == "simulate":
        return _simulate(args)
    try:
        cfg = config_from_args(args)
        configure_logging(cfg.verbose)
        if args.command == "generate":
            return _generate(args, cfg)
        from etl.core.interval import Interval, parse_minute

        interval = Interval.parse(args.start, args.end) if args.command not in ("init", "maintain", "unlock", "stream", "show") else None
        if args.command == "stream":
            from etl.core.interval import parse_ts

            args.start_ts = parse_ts(args.start) if args.start else None
            args.until_ts = parse_ts(args.until) if args.until else None
        move_to = parse_minute(args.move_to) if getattr(args, "move_to", None) else None
        if args.command == "maintain":
            from etl.maintenance import check_steps

            args.steps_checked = check_steps([x.strip() for x in args.steps.split(",") if x.strip()])
    except (ConfigError, ValueError) as exc:
        print(f"etl: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    from etl import jobs

    if args.command == "report":
        rep = jobs.report(cfg, interval)
        _print(rep, args.json, jobs.format_report(rep, cfg))
        return 0
    if args.command == "unlock":
        from etl.io.lock import WarehouseLocked, unlock

        try:
            print(unlock(cfg.meta_path, force=args.force, stale_after=cfg.lock_stale_seconds))
        except WarehouseLocked as exc:
            print(f"etl: error: {exc}", file=sys.stderr)
            return EXIT_LOCKED
        return 0

    spark = None
    try:
        from etl.io.spark import build_spark_session

        if args.command == "stream":
            import signal

            # The driver's JVM inherits an ignored SIGTERM and keeps it ignored, so a SIGTERM sent to
            # the whole process group (docker stop through dumb-init, systemd) stops the stream after
            # its piece instead of killing Spark under it. One sent while Spark starts is not seen.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            from etl.stream import check_stream_start

            check_stream_start(cfg, args.start_ts)  # a refusal in a second, not after Spark's start-up
        if args.command == "show" and args.name:
            from etl.show import check_fresh, check_name

            (check_fresh if args.fresh else check_name)(cfg.entity_model, args.name)
        elif args.command == "show" and args.fresh:
            raise ConfigError("--fresh needs a name: the entity's table or key_map")
        importing = None
        if args.command in ("run", "validate", "quality-report"):
            from etl.quality.gate import import_in_background

            importing = import_in_background()  # the quality gate's library, while the JVM starts
        started = time.monotonic()
        spark = build_spark_session(cfg, app_name=f"etl-{args.command}")
        _progress(f"Spark session ready ({time.monotonic() - started:.0f} s)")
        if importing is not None:
            importing.join()
        return _run(spark, cfg, args, interval, move_to)
    except Exception as exc:
        code, message = exit_code_of(exc)
        if code is None:
            raise
        print(f"etl: {message}", file=sys.stderr)
        return code
    finally:
        if spark is not None:
            spark.stop()


def exit_code_of(exc: BaseException) -> tuple[int | None, str]:
    """The documented exit code and message of an error, or (None, ...) for a bug (exit 1, trace)."""
    import errno

    from etl.io.kafka import KafkaUnavailable
    from etl.io.landing import LandingError
    from etl.io.lock import WarehouseLocked
    from etl.io.runs import LandingChanged, OverlappingRunError
    from etl.jobs import RejectionCeilingExceeded, RunAlreadyLoaded, ValidationFailed
    from etl.maintenance import MaintenanceBlocked
    from etl.stream import RunStartedElsewhere

    if isinstance(exc, (ConfigError, LandingError, OverlappingRunError, LandingChanged, RunAlreadyLoaded, RunStartedElsewhere)):
        return EXIT_CONFIG, f"error: {exc}"
    if isinstance(exc, (WarehouseLocked, MaintenanceBlocked)):
        return EXIT_LOCKED, f"error: {exc}"
    if isinstance(exc, KafkaUnavailable):  # retry later: nothing was written, a retry reads what this run would have
        return EXIT_LOCKED, f"error: {exc}; retry when the cluster answers"
    if isinstance(exc, ValidationFailed):
        return EXIT_VALIDATION, str(exc)
    if isinstance(exc, RejectionCeilingExceeded):
        return EXIT_REJECTIONS, str(exc)
    text = "".join(str(e) for e in _chain(exc))
    if any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in _chain(exc)) or "No space left on device" in text:
        return EXIT_LOCKED, (
            "error: no space left on device (warehouse, meta, runs or Spark's scratch space): free space and "
            "rerun; nothing is lost, the rerun resumes where this one stopped"
        )
    if any(isinstance(e, PermissionError) for e in _chain(exc)) or "Permission denied" in text or "AccessDeniedException" in text:
        return EXIT_CONFIG, f"error: permission denied: {_first_line(text)}; fix the permissions and rerun"
    return None, ""


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if "Permission denied" in line or "AccessDenied" in line:
            return line.strip()[:300]
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def _run(spark, cfg: EtlConfig, args: argparse.Namespace, interval, move_to) -> int:
    from etl import jobs

    if args.command == "init":
        from etl.io.sequence_store import check_sequence_definition
        from etl.io.tables import open_tables

        tables = open_tables(spark, cfg)
        check_sequence_definition(cfg, tables, adopt=True)  # this model's order of versions is the warehouse's
        created = tables.ensure()
        print(f"created: {', '.join(created) or 'nothing (all tables exist)'} under {cfg.warehouse_uri}")
        return 0
    if args.command == "stream":
        return _stream(spark, cfg, args)
    if args.command == "show":
        from etl import show

        if not args.name:
            print(show.listing(spark, cfg))
            return 0
        columns = tuple(c.strip() for c in args.columns.split(",") if c.strip())
        print(show.show(spark, cfg, args.name, args.run, args.where, args.limit, columns, args.json, args.fresh))
        return 0
    if args.command == "maintain":
        from etl.maintenance import maintain

        _print(maintain(spark, cfg, args.steps_checked, progress=_progress), True)
        return 0
    if args.command == "quality-report":
        from etl.quality.report import build_report, summarize

        summary = summarize(build_report(spark, cfg, interval))
        _progress(f"report: {summary['plot']}; suites {'passed' if summary['suites_passed'] else 'FAILED'}")
        _print(summary, True)
        return 0
    if args.command == "late-lines":
        _print(jobs.late_lines(spark, cfg, interval, move_to), True)
        return 0
    if args.command == "discard":
        _print(jobs.discard(spark, cfg, interval), True)
        return 0
    if args.command in ("ingest", "run"):
        _progress(f"ingesting run {interval.run_key}: the landing files of its minutes")
        summary = jobs.ingest(spark, cfg, interval, progress=_progress)
        _progress(f"ingested {summary['valid']} valid, {summary['rejected']} rejected of {summary['lines']} lines")
        if summary.get("kafka_records_lost"):
            _progress(f"WARNING: {summary['kafka_records_lost']} Kafka records were deleted by the broker before any run "
                      f"read them: lost (the summary's skipped entries name the offsets)")
        for kafka, what in ((True, "Kafka entries not read by this run"), (False, "entries of the landing zone that are not landing files")):
            entries = [s for s in summary["skipped"] if s["name"].startswith("kafka:") == kafka]
            if entries:
                _progress(f"skipped {len(entries)} {what} (listed in the summary): {entries[0]['name']}: {entries[0]['reason']} ...")
    if args.command in ("load", "run"):
        summary = jobs.load(spark, cfg, interval, progress=_progress)
        _progress(f"loaded: {summary['outcomes']}, {summary['keys_allocated']} keys allocated")
    if args.command in ("validate", "run"):
        _progress("validating: the expectation suites (quality gate) and Data Docs")
        summary = jobs.validate(spark, cfg, interval)
        warned = [jobs.check_label(c) for c in jobs.failed_warnings(summary["checks"])]
        passed = f"quality gate passed with {len(warned)} warning(s): {'; '.join(warned)}" if warned else "quality gate passed"
        _progress(f"{passed}; Data Docs: {summary['data_docs']}")
    if args.command == "run":
        rep = jobs.report(cfg, interval)
        _print(rep, args.json, jobs.format_report(rep, cfg))
    else:
        _print(summary, True)
    return 0


def _stream(spark, cfg: EtlConfig, args: argparse.Namespace) -> int:
    import signal

    from etl.stream import Stream

    stream = Stream(spark, cfg, progress=_progress)

    def stop(signum, _frame) -> None:
        _progress(f"{signal.Signals(signum).name}: stopping after the piece being loaded")
        stream.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    finished = stream.run(args.start_ts, args.until_ts)
    _print({"runs_finished": [f["run_key"] for f in finished], "stopped_by_signal": stream.stopping}, True)
    return 0


def _generate(args: argparse.Namespace, cfg: EtlConfig) -> int:
    from etl.core.interval import parse_ts
    from etl.core.model import check_source_names
    from etl.generator import StreamSpec, generate_stream, spec_dict

    try:
        given = tuple(x.strip() for x in args.sources.split(",") if x.strip())
        check_source_names("--sources", given)
        p, q, r, s = (float(x) for x in args.pqrs.split(","))
        spec = StreamSpec(
            start=parse_ts(args.start),
            duration_s=args.duration,
            sources=given or cfg.sources or ("crm", "web"),
            rate=args.rate,
            key_domain=args.key_domain,
            new_key_share=args.new_key_share,
            duplicate_share=args.duplicate_share,
            unchanged_share=args.unchanged_share,
            malformed_share=args.malformed_share,
            b=args.b,
            p=p,
            q=q,
            r=r,
            s=s,
            seed=args.seed,
        )
        result = generate_stream(spec, cfg.landing_path, overwrite=args.overwrite, progress=_progress, entity=cfg.entity_model,
                                 model=cfg.model, piece_seconds=cfg.piece_seconds)
    except (ValueError, FileExistsError) as exc:
        print(f"etl: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps({"spec": spec_dict(spec), **result.summary(), "landing_root": str(cfg.landing_path)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
