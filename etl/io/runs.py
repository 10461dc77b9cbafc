"""What the warehouse knows about runs: which are ingested, which have started loading, which
strategy owns a run, and the checks that refuse a run before it writes anything.

A run has *started loading* once any of its load state is durable: a ledger row, a logged batch
or a run snapshot. From then on its ingested updates must not change (a
rerun's ingest compares the landing files with ``landed_files``) and only the strategy that
started it may continue it (its wait buffer or MESHJOIN queue would otherwise be dropped).
"""

from __future__ import annotations

from etl.core.config import ConfigError, EtlConfig
from etl.core.interval import Interval, overlapping
from etl.core.offsets import PREFIX
from etl.io.landing import Fingerprint, LandingScan, Skipped, compare, file_digest, scan_landing
from etl.io.tables import read


class OverlappingRunError(RuntimeError):
    """The interval overlaps a different interval already ingested or loaded: its updates would be
    loaded twice."""


class RunOwnedByAnotherStrategy(ConfigError):
    """A run started with one join strategy cannot be continued with another."""


def summary_path(cfg: EtlConfig, run_key: str, stage: str):
    """A run's summary of ``stage`` (``ingest``, ``load``), written once that stage ended."""
    return cfg.runs_path / run_key / f"{stage}.json"


def snapshot_runs(cfg: EtlConfig) -> dict[str, str]:
    """run_key -> strategy of every run snapshot (``<run_key>.<strategy>.json``) under meta_root."""
    out = {}
    for p in (cfg.meta_path / "runs").glob("*.json"):
        run_key, _, strategy = p.name[: -len(".json")].partition(".")
        out[run_key] = strategy
    return out


def has_started(spark, cfg: EtlConfig, run_key: str) -> bool:
    """Whether any load state of the run is durable (partition-pruned reads: cheap)."""
    if run_key in snapshot_runs(cfg):
        return True
    return any(
        read(spark, cfg, table).where(f"run_key = '{run_key}'").limit(1).count()
        for table in ("batch_ledger", "outcome_log")
    )


def known_runs(spark, cfg: EtlConfig) -> set[str]:
    """Every run ingested (``landed_files``) or loaded (the ledger): the intervals a new one must
    not overlap. (A run ingested by a version without ``landed_files`` and never loaded is not
    seen; load it or discard it before ingesting an overlapping interval.)"""
    keys = read(spark, cfg, "batch_ledger").select("run_key").union(read(spark, cfg, "landed_files").select("run_key"))
    return {r[0] for r in keys.distinct().collect()} | set(snapshot_runs(cfg))


def check_no_overlap(spark, cfg: EtlConfig, interval: Interval, known: set[str] | None = None) -> None:
    """Refuse an interval sharing a minute with another run that is ingested or loaded."""
    others = overlapping(interval, known_runs(spark, cfg) if known is None else known)
    if not others:
        return
    other = others[0]
    o = Interval.from_run_key(other)
    span = f"--start {o.start:%Y-%m-%dT%H:%M} --end {o.end:%Y-%m-%dT%H:%M}"
    if has_started(spark, cfg, other):
        hint = "runs must not share landing minutes; rerun that exact interval instead"
    else:
        hint = (f"it is ingested but not loaded: load it (etl load {span}) or drop its ingest "
                f"(etl discard {span}), then retry")
    raise OverlappingRunError(f"interval {interval.run_key} overlaps the interval {other}: {hint}")


def run_owner(spark, cfg: EtlConfig, run_key: str, ledger_rows: list[dict] | None = None) -> str | None:
    """The strategy that started loading ``run_key``, or ``None`` if it has not started.
    ``ledger_rows``: the run's ledger rows, when the caller has read them."""
    if ledger_rows is None:
        rows = read(spark, cfg, "batch_ledger").where(f"run_key = '{run_key}'").select("strategy").distinct().collect()
        ledger_rows = [{"strategy": r[0]} for r in rows]
    if ledger_rows:
        return ledger_rows[0]["strategy"]
    return snapshot_runs(cfg).get(run_key)


def run_finished(spark, cfg: EtlConfig, run_key: str, ledger_rows: list[dict] | None = None) -> bool:
    """The run's end-of-run release (``flush``) is committed: nothing of it is pending."""
    if ledger_rows is not None:
        return any(r["batch_index"] == -1 for r in ledger_rows)  # the flush step (etl.load.results)
    return bool(read(spark, cfg, "batch_ledger").where(f"run_key = '{run_key}' AND batch_index = -1").limit(1).count())


def check_owner(spark, cfg: EtlConfig, run_key: str, strategy: str, ledger_rows: list[dict] | None = None) -> str | None:
    """The run's owner; ``RunOwnedByAnotherStrategy`` if it is another strategy and the run has
    work pending (a finished run may be rerun with any strategy: there is nothing left to do)."""
    owner = run_owner(spark, cfg, run_key, ledger_rows)
    if owner is not None and owner != strategy and not run_finished(spark, cfg, run_key, ledger_rows):
        i = Interval.from_run_key(run_key)
        raise RunOwnedByAnotherStrategy(
            f"run {run_key} was started with join strategy {owner!r}, not {strategy!r}: its pending updates "
            f"are held by {owner}. Finish it with `etl load --start {i.start:%Y-%m-%dT%H:%M} --end "
            f"{i.end:%Y-%m-%dT%H:%M} --join-strategy {owner}` (or the DAG parameter join_strategy={owner}); "
            f"later runs may use {strategy}"
        )
    return owner


def recorded_files(spark, cfg: EtlConfig, run_key: str) -> dict[str, Fingerprint]:
    """The run's landing files as ingest recorded them (its Kafka ranges are checked on reading)."""
    rows = read(spark, cfg, "landed_files").where(f"run_key = '{run_key}' AND NOT startswith(file_name, '{PREFIX}')").collect()
    return {r.file_name: Fingerprint(r.file_name, r.bytes, r.sha256, r.lines, r.blank_lines) for r in rows}


class LandingChanged(RuntimeError):
    """Landing files of a run that has started loading differ from what its ingest read."""


def landing_changes(spark, cfg: EtlConfig, interval: Interval, files) -> list:
    """How the run's landing files now differ from ``landed_files`` (empty: unchanged). ``files``:
    the run's ``LandedFile``s as the landing zone lists them now."""
    recorded = recorded_files(spark, cfg, interval.run_key)
    if not recorded and read(spark, cfg, "ingested_updates").where(f"run_key = '{interval.run_key}'").limit(1).count():
        return []  # ingested by a version that kept no fingerprints: nothing to compare with
    current = {f.name: file_digest(f.path, recorded[f.name].bytes if f.name in recorded else None) for f in files}
    return compare(recorded, current)


def describe_changes(interval: Interval, changes) -> str:
    lines = [f"  {c.name}: {c.kind}" + (f" ({c.recorded_bytes} -> {c.current_bytes} bytes)" if c.kind in ("appended", "changed") else "")
             for c in changes]
    span = f"--start {interval.start:%Y-%m-%dT%H:%M} --end {interval.end:%Y-%m-%dT%H:%M}"
    return (
        f"landing files of run {interval.run_key} changed after it was loaded (landed files are immutable "
        f"once their run has loaded; docs/ingest.md, 'Late lines'):\n" + "\n".join(lines) +
        f"\nMove appended or added lines to a minute no run has loaded with `etl late-lines {span} "
        f"--move-to YYYY-MM-DDTHH:MM`; restore changed or removed files to what was loaded"
    )


def scan_sources(cfg: EtlConfig, start, end) -> LandingScan:
    """The landing files of ``[start, end)`` of the sources that land files. A source read from
    Kafka has no landing folder: files there are skipped, and a model whose every source is read
    from Kafka needs no landing zone."""
    kafka_sources = {i.source for i in cfg.entity_model.kafka_inputs}
    if kafka_sources and not cfg.landing_path.exists():
        return LandingScan()
    scan = scan_landing(cfg.landing_path, start, end, cfg.piece_seconds)
    if kafka_sources:
        kept = []
        for f in scan.files:
            if f.source_id in kafka_sources:
                scan.skipped.append(Skipped(f.name, f"source {f.source_id!r} is read from Kafka topics, not landing files"))
            else:
                kept.append(f)
        scan.files = kept
    return scan
