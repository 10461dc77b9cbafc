"""One typed configuration object: defaults, then a TOML file, then ``ETL_*`` variables, then CLI overrides.

Every parameter of the papers keeps the thesis's name here and everywhere else
(``n_invoke``, ``r_wb``, ``alpha``, ``tau``, ``rho``, ``theta``, ``n_part``, ``k``, ``d``,
``memory_budget``), so a reader can go from papers/004 Table 6.2 to a setting without a glossary.
This module imports nothing heavy: DAG files read it at parse time.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from etl.core import registry
from etl.core.errors import ConfigError
from etl.core.model import Entity, Model, check_source_names, load_model, parse_toml, read_text_file

ENV_PREFIX = "ETL_"
DELETION_VECTOR_MODES = ("auto", "on", "off")
TABLE_STORES = ("delta", "memory")
PIECE_SECONDS = tuple(s for s in range(1, 61) if 60 % s == 0)  # the lengths that tile a minute
_OLD_DELETION_VECTORS = {"1": "on", "true": "on", "yes": "on", "0": "off", "false": "off", "no": "off"}
CONFIG_FILE_ENV = "ETL_CONFIG"


@dataclass(frozen=True)
class EtlConfig:
    # --- where things live (relative paths are resolved against the working directory) ---
    warehouse_root: str = "var/warehouse"
    landing_root: str = "var/landing"
    gx_root: str = "var/gx"
    runs_root: str = "var/runs"
    reports_root: str = "var/reports"  # data-quality reports (JSON, CSV, PNG plots)
    # The load lock, run snapshots and the segment layout: small files that need POSIX semantics
    # (exclusive create, atomic rename), so a shared filesystem, never object storage. Empty means
    # ``<warehouse_root>/_meta``; required when warehouse_root is an object-store URI (s3a://...).
    meta_root: str = ""
    # The warehouse model (etl.core.model, docs/model.md): the entities, their keys, columns and
    # history. Empty: warehouse/models/customer.toml. ``entity`` picks the one this
    # configuration loads (empty: the first declared); each entity's tables, landing zone, lock,
    # GX, runs and reports live in its own directory under the roots above.
    model_file: str = ""
    entity: str = ""

    # --- Spark ---
    spark_master: str = "local[*]"
    spark_driver_memory: str = "2g"
    spark_shuffle_partitions: int = 4
    spark_ui: bool = False
    # Every library's log on stderr (Spark's start-up and INFO notes, Great Expectations' INFO
    # lines); off: the command's own lines, and warnings and errors (docs/operations.md, "Logs").
    verbose: bool = False
    # Extra JVM options of the driver (spark.driver.extraJavaOptions); empty: none. Short jobs on
    # small data run faster with "-XX:TieredStopAtLevel=1" (docs/decisions/driver-jit-for-tests.md); the tests use it.
    spark_driver_java_options: str = ""
    # Spark SQL's generated code (whole-stage and expression codegen). Off: expressions are
    # interpreted, which a short job on small data in a cold driver does sooner than compiling
    # them (the tests' subprocesses: docs/decisions/driver-codegen-for-tests.md); on in production.
    spark_codegen: bool = True
    # Maven coordinates of the Delta jar; empty means "derive from the installed delta-spark".
    delta_package: str = ""
    # Maven coordinates of Spark's Kafka source; empty: the one of the installed pyspark. Fetched
    # only when the model reads a Kafka topic (docs/sources.md).
    kafka_package: str = ""
    # More Maven coordinates for spark.jars.packages, comma-separated.
    spark_packages: str = ""
    # Maven coordinates of the object store's file system when warehouse_root is s3a://; empty:
    # Hadoop's S3A connector (hadoop-aws) of pyspark's Hadoop and the AWS SDK's S3 client modules
    # it calls (docs/deployment.md, "Delta tables on object storage").
    object_store_packages: str = ""
    # A Java properties file of more Spark settings for every driver (spark.hadoop.fs.s3a.* of an
    # object store, ...): kept outside the repository, since it may hold secrets; spark-submit
    # reads it as its --properties-file. Empty: none.
    spark_properties_file: str = ""
    # The first driver that resolves those packages records the jars Spark fetched in a folder of
    # its own here (one per set of packages); every later driver, subprocess and spark-submit
    # starts with them as spark.jars instead of an Ivy resolution. Empty: ~/.cache/active-dw-etl
    # (ETL_TOOLS_CACHE moves it). docs/decisions/jars-resolved-once.md
    spark_jars_dir: str = ""
    # Jar paths instead, comma-separated (an image with its jars baked in); empty: the recorded ones.
    spark_jars: str = ""
    # Start drivers from a class-data archive of Spark's classes (JVM CDS) that set-up writes under
    # spark_jars_dir: a cold driver is ready ~9 s sooner on 2 cores. docs/decisions/class-data-archive.md
    spark_class_archive: bool = True
    # Local files (file:// warehouses, Spark's own) without a process per call: Hadoop without its
    # native library runs `chmod` and `readlink` as processes, 48 per append to a small Delta table. On:
    # a small class that set-up compiles (etl/io/jvm, javac) does both in the JVM instead; without
    # a JDK's javac, drivers run as before. docs/decisions/local-files-without-a-shell.md
    spark_local_fs_nio: bool = True

    # --- Kafka (docs/sources.md; the topics are the model's, the cluster is the site's) ---
    kafka_bootstrap_servers: str = ""  # host:port,host:port
    # A Java properties file of Kafka client settings (security.protocol, sasl.*, ssl.*): kept
    # outside the repository, since it holds secrets. Empty: none.
    kafka_properties_file: str = ""

    # --- the job ---
    join_strategy: str = "native"
    micro_batch_seconds: int = 60
    # The input's piece: a landing file covers this many seconds of arrival time from the time in
    # its name, and the always-on loader reads Kafka in offset ranges of this many seconds (a
    # divisor of 60; docs/ingest.md "Landing pieces").
    piece_seconds: int = 60
    # The load's MERGEs off the delay path: a batch is decided and logged (the write-ahead commit)
    # at once, and the logged batches are applied to key_map and the entity table together once
    # the oldest has waited apply_interval_seconds (0: each batch as it is logged), at a run's end,
    # and by whoever takes the load lock next (docs/decisions/coalesced-apply.md).
    apply_interval_seconds: float = 0.0
    # Those MERGEs run in a thread beside the next batches' decisions and write-ahead commits
    # (which read key_map pinned at the version the apply started from, with the logged batches
    # merged over it), waited for before the load lock is given up; false: in turn, between them.
    apply_concurrently: bool = True
    # A table service after each coalesced apply (apply_interval_seconds above 0): a key_map
    # segment left with more files than this is compacted into one, under the load lock
    # (etl/core/services.py; 0: off, compaction is the maintenance DAG's).
    key_map_files_per_segment: int = 2
    # A table service at a run's end (partitioned-range), under the load lock: up to this many of
    # key_map's segments grown past 2*theta rows, the largest first, are split to theta..2*theta
    # (etl/io/rebalance.py, splits only: a bounded rewrite; the next run warm on the new segments). Owed from
    # the flush on, so whoever loads next makes it after a kill (etl/io/run_ends.py). 0: off,
    # splits wait for the maintenance DAG's rebalance, which merges too
    # (docs/decisions/table-services.md).
    split_segments_per_run: int = 16
    sources: tuple[str, ...] = ()  # empty: accept any source_id
    max_record_bytes: int = 65536
    max_rejected_fraction: float = 1.0  # a run whose rejected share exceeds this fails
    # A live fact naming a dimension member deleted at the fact's event time is counted and flagged
    # (docs/model.md, "Facts"); the gate warns of it, or fails (exit 3) when this is true.
    strict_deleted_references: bool = False
    schedule: str = "@hourly"
    # The always-on loader (etl stream): it reads a landing piece this long after the piece ends
    # (the landing agent's last write), says it is alive every stream_heartbeat_seconds, and a
    # DAG run waits for it instead of loading its interval while it said so within stream_stale_seconds.
    stream_grace_seconds: float = 5.0
    stream_heartbeat_seconds: float = 10.0
    stream_stale_seconds: float = 120.0
    # A fact's DAG run waits for its dimensions' runs of the same interval to have reported, asking
    # every dimension_poke_seconds, for at most dimension_wait_seconds; then it loads anyway (keys
    # a dimension has not loaded yet become inferred members).
    dimension_wait_seconds: int = 3600
    dimension_poke_seconds: int = 30
    # A load lock held from another host is stale once it has not been refreshed for this long
    # (its holder refreshes it every quarter of it); on the lock's own host a dead pid is enough.
    lock_stale_seconds: int = 900
    # --- data-quality report and maintenance (papers/003 panes: windows of report_window_seconds
    # every report_slide_seconds, half-open, aligned to the epoch) ---
    report_schedule: str = "@daily"
    report_window_seconds: int = 3600
    report_slide_seconds: int = 900
    maintenance_schedule: str = "@weekly"
    # Delta deletion vectors for the MERGEs into key_map and customer_current (a MERGE then writes
    # only the changed rows; readers need Delta 2.3+): "on", "off", or "auto": the tables are
    # created able to use them, and each is switched on at a run's start once it holds
    # deletion_vectors_from_bytes (below that, rewriting the touched files is as fast and takes
    # fewer Spark jobs: docs/decisions/deletion-vectors.md).
    deletion_vectors: str = "auto"
    deletion_vectors_from_bytes: int = 32 << 20
    vacuum_retention_hours: int = 168  # Delta's safe default; shorter breaks readers of old versions
    # Where the tables live: "delta" (the warehouse), or "memory": this process's memory, for tests
    # of the load protocol where Delta is not the claim (etl.io.memory_tables; the CLI refuses it).
    table_store: str = "delta"

    # --- the papers' parameters (papers/004 Table 6.1/6.2), one name everywhere ---
    # wait-buffer tuples of one segment that trigger its disk probe; 0: derived at a run's start
    # from memory_budget and key_map's segments as the thesis sizes its own (etl/core/sizing.py;
    # Table 6.2's numbers give 2,978)
    n_invoke: int = 0
    r_wb: float = 0.4  # fraction of the wait buffer freed when it overflows
    alpha: float = 0.3  # decay of the arrival frequency C_k per epoch
    tau: int = 1000  # epoch length, in stream tuples
    rho: float = 0.25  # eviction hysteresis of rule (6.1)
    theta: int = 8192  # minimum segment size in tuples (range variant: theta..2*theta)
    # segments of key_map (hash variant; initial range layout), fixed by a warehouse's first load;
    # 0: derived, key_domain's rows (a row per key and source) over 1.5*theta, at most 1,024
    # (etl/core/sizing.py; Table 6.2's 1,638,400 rows give 134)
    n_part: int = 64
    k: int = 8  # MESHJOIN: relation segments per cycle
    d: int = 1 << 20  # MESHJOIN: bytes per relation segment
    memory_budget: int = 40 << 20  # join memory in bytes: the partitioned join's resident segments
    # capacity of the wait buffer, in tuples; 0: derived, Table 6.2's 4 bytes for every 34 of
    # memory_budget, in tuples of s_bytes (etl/core/sizing.py)
    wait_buffer_tuples: int = 0
    # S-tuple size: an update's bytes in the unit memory_budget counts key_map in (stored bytes),
    # measured for the default entity by benchmarks.tuple_sizes; an entity with wider rows sets its own
    s_bytes: int = 127
    # R-tuple size: a key_map row's stored bytes (Table 6.2's R), the unit the partitioned join's
    # segment sizes and MESHJOIN's cycle count key_map in, by its rows: a run never sizes from the
    # table's files, which compaction and deletion vectors move, so loaders of one history decide
    # alike; measured for the default entity by benchmarks.tuple_sizes (76.2 B)
    r_bytes: int = 76
    # Not in the thesis: a waiting segment is probed once its oldest tuple has waited this many
    # seconds of stream time (bounds the partitioned join's delay tail); 0 = no bound.
    max_wait_s: float = 0.0
    # Not a parameter of the thesis, whose join runs without end: a run of the partitioned join
    # starts from where the previous run of its entity ended (its resident segments and decayed
    # frequencies, kept in meta_root's join_state/) instead of cold; false: every run starts cold.
    carry_join_state: bool = True
    key_domain: int = 1_000_000  # width of the numeric natural-key domain the slot array covers
    # Granularity marks (H_mark/L_mark), in backlog tuples: the thesis's 100 and 2 blocks of 4 KB
    # holding 64-byte stream tuples.
    h_mark: int = 6400
    l_mark: int = 128
    # Block granularity (partitioned strategies): above h_mark a load batch spans this many
    # arrival windows of micro_batch_seconds, until the backlog falls below l_mark.
    block_factor: int = 4

    extra: Mapping[str, str] = field(default_factory=dict)  # free-form, for site-specific settings

    def __post_init__(self) -> None:
        # The setting was a boolean: true and false (from Python, a file or ETL_*) still mean on and off.
        mode = str(self.deletion_vectors).strip().lower()
        object.__setattr__(self, "deletion_vectors", _OLD_DELETION_VECTORS.get(mode, mode))
        _validate(self)
        self.entity_model  # a bad model file or entity name fails here, naming the field

    # Resolved paths: a relative setting is taken from the working directory at load time;
    # ``file://`` URIs are local paths too.
    def path(self, name: str) -> Path:
        value = getattr(self, name)
        if _scheme(value) == "file":
            value = value[len("file://"):]
        elif _scheme(value):
            raise ConfigError(f"setting '{name}' = {value!r}: a URI where a local or shared POSIX path is needed")
        return Path(value).expanduser().resolve()

    @property
    def model(self) -> Model:
        return load_model(self.model_file or None)

    @property
    def entity_model(self) -> Entity:
        return self.model.entity(self.entity)

    def _scoped(self, root: Path) -> Path:
        directory = self.entity_model.directory
        return root / directory if directory else root

    def for_entity(self, name: str) -> "EtlConfig":
        """This configuration for entity ``name`` of its model, with the entity's own settings."""
        entity = self.model.entity(name)
        return self.replace(entity=entity.name, **entity_settings(self.model, entity))

    @property
    def warehouse_on_object_store(self) -> bool:
        return _scheme(self.warehouse_root) not in ("", "file")

    @property
    def warehouse_path(self) -> Path:
        """The entity's warehouse as a local path (only when it is on a POSIX filesystem)."""
        return self._scoped(self.path("warehouse_root"))

    @property
    def warehouse_uri(self) -> str:
        """What Spark and Delta are given: an absolute path, or the object-store URI as set."""
        if self.warehouse_on_object_store:
            directory = self.entity_model.directory
            return self.warehouse_root.rstrip("/") + (f"/{directory}" if directory else "")
        return str(self.warehouse_path)

    @property
    def meta_path(self) -> Path:
        return self._scoped(self.path("meta_root")) if self.meta_root else self.warehouse_path / "_meta"

    @property
    def landing_path(self) -> Path:
        return self._scoped(self.path("landing_root"))

    @property
    def gx_path(self) -> Path:
        return self._scoped(self.path("gx_root"))

    @property
    def runs_path(self) -> Path:
        return self._scoped(self.path("runs_root"))

    @property
    def reports_path(self) -> Path:
        return self._scoped(self.path("reports_root"))

    def table_path(self, table: str) -> str:
        return f"{self.warehouse_uri}/{table}"

    def replace(self, **changes: Any) -> "EtlConfig":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["sources"] = list(self.sources)
        out["extra"] = dict(self.extra)
        return out


_FIELDS = {f.name: f for f in fields(EtlConfig)}


def _scheme(value: str) -> str:
    """``s3a`` of ``s3a://bucket/x``; empty for a plain path."""
    head, sep, _ = str(value).partition("://")
    return head.lower() if sep and head.isidentifier() else ""


def _validate(cfg: EtlConfig) -> None:
    def need(ok: bool, name: str, what: str) -> None:
        if not ok:
            raise ConfigError(f"setting '{name}' = {getattr(cfg, name)!r}: {what}")

    registry.spec(cfg.join_strategy)
    check_source_names("setting 'sources'", cfg.sources)
    for name in ("warehouse_root", "landing_root", "gx_root", "runs_root", "reports_root", "spark_master"):
        need(bool(str(getattr(cfg, name)).strip()), name, "must not be empty")
    for name in ("landing_root", "gx_root", "runs_root", "reports_root", "meta_root"):
        need(_scheme(getattr(cfg, name)) in ("", "file"), name,
             "must be a local or shared POSIX path (only warehouse_root may be an object-store URI)")
    need(bool(cfg.meta_root) or not cfg.warehouse_on_object_store, "meta_root",
         f"must be set to a shared POSIX directory when warehouse_root is on object storage ({cfg.warehouse_root})")
    for name in (
        "spark_shuffle_partitions",
        "micro_batch_seconds",
        "max_record_bytes",
        "tau",
        "theta",
        "k",
        "d",
        "memory_budget",
        "s_bytes",
        "r_bytes",
        "key_domain",
        "report_window_seconds",
        "report_slide_seconds",
        "lock_stale_seconds",
        "deletion_vectors_from_bytes",
        "dimension_wait_seconds",
        "dimension_poke_seconds",
    ):
        need(getattr(cfg, name) > 0, name, "must be a positive number")
    need(cfg.table_store in TABLE_STORES, "table_store", f"must be one of {', '.join(TABLE_STORES)}")
    need(cfg.deletion_vectors in DELETION_VECTOR_MODES, "deletion_vectors", f"must be one of {', '.join(DELETION_VECTOR_MODES)}")
    need(cfg.report_slide_seconds <= cfg.report_window_seconds, "report_slide_seconds", "must not exceed report_window_seconds")
    need(cfg.vacuum_retention_hours >= 168, "vacuum_retention_hours", "must be >= 168 (7 days): shorter retention can delete files a reader or a retried task still needs")
    need(0 < cfg.alpha <= 1, "alpha", "must be in (0, 1]")
    need(0 < cfg.r_wb <= 1, "r_wb", "must be in (0, 1]")
    need(cfg.rho >= 0, "rho", "must be >= 0")
    need(cfg.stream_grace_seconds >= 0, "stream_grace_seconds", "must be >= 0")
    need(cfg.split_segments_per_run >= 0, "split_segments_per_run", "must be >= 0 (0: no split between runs)")
    need(cfg.key_map_files_per_segment >= 0, "key_map_files_per_segment", "must be >= 0 (0: no compaction between batches)")
    need(cfg.apply_interval_seconds >= 0, "apply_interval_seconds", "must be >= 0 (0: each batch applied as it is logged)")
    need(cfg.piece_seconds in PIECE_SECONDS, "piece_seconds",
         f"must divide a minute: one of {', '.join(map(str, PIECE_SECONDS))}")
    need(cfg.stream_heartbeat_seconds > 0, "stream_heartbeat_seconds", "must be a positive number")
    need(cfg.stream_stale_seconds > cfg.stream_heartbeat_seconds, "stream_stale_seconds",
         "must exceed stream_heartbeat_seconds (a live stream would look stopped between two heartbeats)")
    need(cfg.max_wait_s >= 0, "max_wait_s", "must be >= 0 (0 means no bound)")
    need(cfg.n_part >= 0, "n_part", "must be >= 0 (0: derived from key_domain and theta)")
    need(cfg.n_invoke >= 0, "n_invoke", "must be >= 0 (0: derived from memory_budget and key_map's segments)")
    need(cfg.wait_buffer_tuples >= 0, "wait_buffer_tuples", "must be >= 0 (0: derived from memory_budget)")
    need(0 <= cfg.l_mark <= cfg.h_mark, "l_mark", "must be between 0 and h_mark")
    need(cfg.block_factor >= 1, "block_factor", "must be at least 1 (1 turns block granularity off)")
    need(0 <= cfg.max_rejected_fraction <= 1, "max_rejected_fraction", "must be in [0, 1]")


def _coerce(name: str, raw: Any) -> Any:
    """Turn a file or environment value into the field's type, naming the setting on failure."""
    kind = _FIELDS[name].type
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if kind == "int":
            if isinstance(raw, bool):
                raise ValueError("expected an integer")
            if isinstance(raw, int):
                return raw
            return int(str(raw).strip().replace("_", ""), 0)
        if kind == "float":
            return float(raw)
        if kind == "str":
            return str(raw)
        if kind.startswith("tuple"):
            if isinstance(raw, str):
                return tuple(s.strip() for s in raw.split(",") if s.strip())
            return tuple(str(s) for s in raw)
        if kind.startswith("Mapping"):
            if not isinstance(raw, Mapping):
                raise ValueError("expected a table of key = value")
            return {str(k): str(v) for k, v in raw.items()}
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting '{name}' = {raw!r}: {exc}") from None
    raise ConfigError(f"setting '{name}': unsupported type {kind}")  # pragma: no cover


def _from_mapping(values: Mapping[str, Any], origin: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in values.items():
        name = key.replace("-", "_")
        if name not in _FIELDS:
            raise ConfigError(f"{origin}: unknown setting '{key}'; known settings: {', '.join(sorted(_FIELDS))}")
        out[name] = _coerce(name, raw)
        if name == "sources":  # each becomes a folder of the landing zone: say where a bad one was set
            check_source_names(f"{origin}: setting '{key}'", out[name])
    return out


def read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Settings from a TOML file: top-level keys, or keys under an ``[etl]`` table."""
    p = Path(path)
    data = parse_toml("config file", str(p), read_text_file("config file", p, f" (set by --config or {CONFIG_FILE_ENV})"))
    if isinstance(data.get("etl"), dict):
        data = data["etl"]
    return _from_mapping(data, f"config file {str(p)!r}")


def read_env(env: Mapping[str, str]) -> dict[str, Any]:
    """Settings from ``ETL_<NAME>`` variables (``ETL_CONFIG`` names the file and is not a setting)."""
    out: dict[str, Any] = {}
    for variable, value in env.items():
        name = variable[len(ENV_PREFIX) :].lower()
        if variable.startswith(ENV_PREFIX) and variable != CONFIG_FILE_ENV and name in _FIELDS:
            out.update(_from_mapping({name: value}, f"environment variable {variable}"))
    return out


def strategy_settings(strategy: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` checked as settings of ``strategy`` alone (names and values), for a run's overrides."""
    allowed = registry.spec(strategy, setting="strategy").settings
    names = {k.replace("-", "_") for k in given}
    refused = sorted(n for n in names if n not in allowed)
    if refused:
        raise ConfigError(
            f"strategy settings: {', '.join(refused)} {'is' if len(refused) == 1 else 'are'} not a setting of "
            f"{strategy} (its settings: {', '.join(allowed) or 'none'}); other settings come from the "
            f"configuration file or ETL_* variables, not from a run's parameters"
        )
    return _from_mapping(given, f"strategy settings of {strategy}")


def strategy_settings_schema() -> dict[str, Any]:
    """JSON Schema of every strategy's settings (the DAG parameter validates a run's conf with it)."""
    props: dict[str, Any] = {}
    for name in sorted({n for s in registry.SPECS for n in s.settings}):
        kind = _FIELDS[name].type
        props[name] = {"type": "integer", "minimum": 0} if kind == "int" else {"type": "number", "minimum": 0}
    return {"type": "object", "properties": props, "additionalProperties": False}


def entity_settings(model: Model, entity: Entity) -> dict[str, Any]:
    """The settings ``entity`` of ``model`` declares (its join strategy, sources and join
    parameters), typed; the model has refused any other name already, so only a value can fail."""
    try:
        out = _from_mapping(entity.settings, "")
    except ConfigError as exc:
        raise ConfigError(f"model file {model.path!r}, entity {entity.name!r}, settings: {exc}") from None
    if entity.join_strategy:
        out["join_strategy"] = entity.join_strategy
    if entity.sources:
        out["sources"] = entity.sources
    return out


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> EtlConfig:
    """Defaults < file (``path`` or ``$ETL_CONFIG``) < ``ETL_*`` environment < the entity's
    settings in the model < ``overrides``."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    file_path = path or env.get(CONFIG_FILE_ENV)
    if file_path:
        merged.update(read_file(file_path))
    merged.update(read_env(env))
    given = _from_mapping({k: v for k, v in (overrides or {}).items() if v is not None}, "override")
    scope = {k: given.get(k, merged.get(k, "")) for k in ("model_file", "entity")}
    model = load_model(scope["model_file"] or None)
    merged.update(entity_settings(model, model.entity(scope["entity"])))
    merged.update(given)
    return EtlConfig(**merged)
