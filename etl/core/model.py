"""The warehouse model: the entities a user declares in a TOML file, validated before anything is
written (pure Python; DAG files read it at parse time, so nothing heavy is imported here).

One ``[entities.<name>]`` table per entity (docs/model.md has the whole format):

- ``key``: the natural key, one or more typed columns in order (``{ sku = "string", region = "string" }``);
- ``attributes``: the typed columns of the entity's content;
- ``compare``: the attributes compared for "unchanged content" (default: all of them but the
  sequence column);
- ``sequence``: the column that orders a key's versions (default ``source_seq``; else an integer
  or timestamp attribute);
- ``history``: ``current`` (SCD type 1: one row per key) or ``history`` (SCD type 2: one row per
  version, ``valid_from``/``valid_to``/``is_current``);
- ``type1`` (history entities): attributes overwritten on every version of the key, whose change
  alone makes no version (a corrected e-mail is not a new period of the customer's history);
- ``sources``, ``join_strategy``, ``directory`` and ``settings`` (the papers' parameters for this
  entity's join);
- ``inputs.<source>``: how a source's changes arrive when not as the project's own JSON lines in
  landing files: ``format = "debezium"`` (change events, mapped onto the entity by ``fields``,
  ``sequence`` and ``event_time``) and/or ``topics`` (read from Kafka instead of the landing zone;
  docs/sources.md);
- ``kind``: ``dimension`` (the default) or ``fact``. A fact has ``references``, each a surrogate
  key column filled from a dimension's ``key_map`` by the fact's own columns (``by``), and is
  identified by its ``key`` (a correction replaces the fact) or by an ``event_id`` (append-only: a
  second line with the same id is a duplicate). A dimension that a fact references gets inferred
  members: a key a fact names before the dimension has seen it.

Every error names the file, the entity and the field. Column names are compared without case, as
Spark resolves them; a source's name must be one folder name (``source_name_problem``), since the
landing zone keeps a source's files under ``source_id=<name>``; an entity's directory is never a
name the pipeline puts under a root (``RESERVED_DIRECTORIES``). Internally a key is one text,
``encode_key``: the value itself for a one-column key, a JSON array of the parts' texts for a
composite one, so ``key_map`` and every join strategy stay the same for any key shape.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import stat
import tomllib
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from etl.core import registry
from etl.core.errors import ConfigError

TYPES = ("string", "integer", "decimal(p,s)", "date", "timestamp", "boolean")
HISTORY_KINDS = ("current", "history")
# A row hash's first digest (SHA-256 in hex): for an entity with ``type1`` columns, the hash of the
# columns whose change makes a version (``etl.ingest.row_hash``).
VERSION_HASH_CHARS = 64


def version_hash(row_hash: str) -> str:
    """The part of a row hash that decides whether an update makes a version (all of it when the
    entity has no ``type1`` columns: the hash is one digest then)."""
    return row_hash[:VERSION_HASH_CHARS]
KINDS = ("dimension", "fact")
DEFAULT_SEQUENCE = "source_seq"
# The default model: today's customer entity (its tables at the warehouse root, where versions
# before the model kept them).
DEFAULT_MODEL_FILE = Path(__file__).resolve().parents[2] / "warehouse" / "models" / "customer.toml"
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_COLUMN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}")
_DECIMAL = re.compile(r"decimal\(\s*([0-9]{1,2})\s*,\s*([0-9]{1,2})\s*\)")
# Columns every table of an entity has already (or the pipeline uses on the way): a declared
# column may not take one of these names. ``natural_key`` is allowed as the one column of a
# one-column string key (the default customer's shape: the encoded key is the value itself).
RESERVED = frozenset({
    "update_id", "source_id", "natural_key", "op", "source_seq", "event_ts", "arrival_ts", "row_hash",
    "run_key", "batch_index", "batch_seq", "segment_id", "surrogate_key", "outcome", "reason",
    "stored_source_seq", "applies", "is_last_applied", "is_deleted", "last_source_seq", "updated_batch_seq",
    "valid_from", "valid_to", "is_current", "kind", "path_source_id", "file_name", "line_number", "raw_line",
    "arrival_minute", "reject_reason", "reject_field", "reason_detail", "file_bytes", "file_sha256", "file_lines", "file_blank_lines",
    "stands_for", "attributes", "strategy", "count", "is_new", "is_inferred",
    # The ledger's columns: the log (``outcome_log``) puts them beside the declared ones.
    "updates_in", "keys_allocated", "next_surrogate_key", "committed_at", "outcomes", "matched", "new",
    "duplicate", "stale", "keymap_bytes_read", "segments_probed", "segments_admitted", "segments_evicted",
    "resident_bytes", "wait_buffer_tuples", "queue_tuples", "disk_cycle", "delay_avg_s", "delay_p99_s",
    "clock_skew", "batch_started_at", "duration_s",
    # key_map's, which the strategies join onto the updates.
    "created_batch_seq", "first_arrival_ts", "last_arrival_ts",
})
_RESERVED_PREFIXES = ("km_", "o_", "_")
# What the pipeline keeps directly under a root beside the entities' directories, so no entity's
# ``directory`` may take one of these names (its run would write into them): under the warehouse
# root the tables every entity has beside its own (warehouse/schemas.py ``tables`` and ``views``; a
# view was a table in older warehouses, which keep it), under the meta root the run snapshots
# (``runs``) and the always-on loader's state (``stream``), under the GX root the GX project
# (``gx``). Everything else the code puts there (``_meta``, ``_spark_sql``, ``load.lock``,
# ``segment_layout.json``, run keys, ``source_id=<source>``) cannot be a directory's name anyway;
# tests/etl/core/test_model.py holds both against what the code writes. An entity at the roots
# (``directory = ""``) also owns its table's name there (``_check_directories``).
SYSTEM_TABLES = ("key_map", "ingested_updates", "rejected_updates", "landed_files", "batch_ledger",
                 "outcome_log", "applied_changes", "duplicates_quarantine", "join_metrics")
# Tables older versions wrote and warehouses made by them keep: the partitioned join's durable wait
# buffer (its tuples are held in memory since 2026-11-29, docs/tables.md).
RETIRED_TABLES = ("wait_buffer",)
RESERVED_DIRECTORIES = frozenset((*SYSTEM_TABLES, *RETIRED_TABLES, "gx", "runs", "stream"))
# A source's name is a folder's name in the landing zone, ``source_id=<name>`` (etl/io/landing.py),
# so it must be one path component that every filesystem holds: a file name has at most 255 bytes.
MAX_SOURCE_NAME_BYTES = 255 - len("source_id=")
# The settings an entity may set for its own join (the rest are the warehouse's).
ENTITY_SETTINGS = (
    "micro_batch_seconds", "max_record_bytes", "max_rejected_fraction", "n_invoke", "r_wb", "alpha", "tau",
    "rho", "theta", "n_part", "k", "d", "memory_budget", "wait_buffer_tuples", "s_bytes", "r_bytes", "max_wait_s", "key_domain",
    "h_mark", "l_mark", "block_factor", "deletion_vectors", "deletion_vectors_from_bytes", "strict_deleted_references",
)
_ENTITY_FIELDS = ("kind", "key", "event_id", "attributes", "references", "compare", "sequence", "history", "type1",
                  "sources", "join_strategy", "directory", "settings", "inputs")
_REFERENCE_FIELDS = ("dimension", "by", "source")
_DEBEZIUM_FIELDS = ("fields", "connector", "sequence", "sequence_bits", "event_time", "timestamp_unit", "decimal_handling")
_INPUT_FIELDS = ("format", "topics", *_DEBEZIUM_FIELDS)
INPUT_FORMATS = ("lines", "debezium")
# Units per second of a timestamp given as a number: integers all the way (a float would round
# nanoseconds), ``value * 1_000_000 // units`` microseconds, cut like the digits of ISO text.
TIMESTAMP_UNITS = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
# Debezium's ``decimal.handling.mode``: a decimal as base64 bytes of its unscaled value (the
# connector's default), as text, or as a JSON number.
DECIMAL_HANDLINGS = ("precise", "string", "double")
# Every table stores a sequence as ``source_seq``, a non-negative 64-bit signed integer.
SEQUENCE_BITS = 63
# Per Debezium connector: the ``source`` fields that order its changes, and the bits each of their
# parts takes in the 63-bit sequence, in order (docs/sources.md, "Connectors", says why).
CONNECTOR_SEQUENCES = {
    "postgresql": (("source.lsn",), (63,)),
    "oracle": (("source.scn",), (63,)),
    "mysql": (("source.file", "source.pos", "source.row"), (19, 32, 12)),
    "mariadb": (("source.file", "source.pos", "source.row"), (19, 32, 12)),
    "sqlserver": (("source.change_lsn", "source.event_serial_no"), (24, 25, 12, 2)),
}
# Kafka's own rule for a topic name (the characters ``Topic.validate`` allows).
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
# A path into a change event: its top level (``ts_ms``) or the ``source`` block (``source.lsn``).
_EVENT_PATH = re.compile(r"(source\.)?[A-Za-z_][A-Za-z0-9_]{0,62}")
# Key types a reference may join on: the fact's column is encoded in Spark as the dimension's
# line rules encode the key (``etl.transforms.references.encoded``); a timestamp's text is not.
REFERENCE_KEY_TYPES = ("string", "integer", "decimal", "date", "boolean")


@dataclass(frozen=True)
class ColumnType:
    kind: str  # string, integer, decimal, date, timestamp, boolean
    precision: int = 0
    scale: int = 0

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.kind == "decimal" else self.kind


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType


@dataclass(frozen=True)
class Reference:
    """A fact's surrogate key column ``name``, filled from ``dimension``'s ``key_map`` by the
    fact's columns ``by`` (the dimension's key, in order) under the source ``source`` (empty: the
    fact line's own ``source_id``)."""

    name: str
    dimension: str
    by: tuple[str, ...]
    source: str = ""


@dataclass(frozen=True)
class Input:
    """How one source's changes arrive (docs/sources.md). ``format``: ``lines`` (the project's own
    JSON lines) or ``debezium`` (change events); ``topics``: read from these Kafka topics (empty:
    the landing zone). For change events, ``fields`` maps an entity column to the field of
    ``after``/``before`` holding it (default: the same name); ``sequence`` the paths of the event's
    position in the source's log, compared in order, packed into one 63-bit sequence with
    ``sequence_bits`` per part (the ``connector``'s by default); ``event_time`` the path of its
    change time in milliseconds; ``timestamp_unit`` the unit of a timestamp given as a number;
    ``decimal_handling`` how a decimal arrives (the connector's ``decimal.handling.mode``)."""

    source: str
    format: str = "lines"
    topics: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()
    connector: str = "postgresql"
    sequence: tuple[str, ...] = ("source.lsn",)
    sequence_bits: tuple[int, ...] = (SEQUENCE_BITS,)
    event_time: str = "source.ts_ms"
    timestamp_unit: str = "us"
    decimal_handling: str = "precise"

    @property
    def is_kafka(self) -> bool:
        return bool(self.topics)

    def field_of(self, column: str) -> str:
        return dict(self.fields).get(column, column)


@dataclass(frozen=True)
class Entity:
    name: str
    key: tuple[Column, ...]
    attributes: tuple[Column, ...]
    compare: tuple[str, ...]
    sequence: str = DEFAULT_SEQUENCE
    history: str = "current"
    sources: tuple[str, ...] = ()
    join_strategy: str = ""  # empty: the warehouse's setting
    directory: str = ""  # under each root; empty: the root itself
    settings: Mapping[str, Any] = field(default_factory=dict, hash=False)
    kind: str = "dimension"
    references: tuple[Reference, ...] = ()
    append_only: bool = False  # a fact identified by an event id: a repeated id is a duplicate
    inferred: bool = False  # a dimension some fact references: its table flags inferred members
    inputs: tuple[Input, ...] = ()  # sources not given as JSON lines in landing files
    type1: tuple[str, ...] = ()  # a history entity's attributes overwritten on every version

    @property
    def version_compare(self) -> tuple[str, ...]:
        """The ``compare`` columns whose change makes a version: all of them but the ``type1`` ones."""
        return tuple(c for c in self.compare if c not in self.type1)

    @property
    def type1_compare(self) -> tuple[str, ...]:
        """The ``compare`` columns hashed apart, so that their change alone makes no version."""
        return tuple(c for c in self.compare if c in self.type1)

    def input_of(self, source: str) -> Input:
        """The source's input (a landing-file source of JSON lines unless declared)."""
        return next((i for i in self.inputs if i.source == source), Input(source))

    @property
    def kafka_inputs(self) -> tuple[Input, ...]:
        return tuple(i for i in self.inputs if i.is_kafka)

    @property
    def is_fact(self) -> bool:
        return self.kind == "fact"

    @property
    def dimensions(self) -> tuple[str, ...]:
        """The dimensions a fact references, each once, sorted (none for a dimension)."""
        return tuple(sorted({r.dimension for r in self.references}))

    @property
    def reference_columns(self) -> tuple[Column, ...]:
        return tuple(Column(r.name, ColumnType("integer")) for r in self.references)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.key)

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.attributes)

    @property
    def key_columns_stored(self) -> tuple[Column, ...]:
        """Key columns carried beside the encoded ``natural_key`` (none when the key is that column)."""
        return tuple(c for c in self.key if c.name != "natural_key")

    @property
    def columns(self) -> tuple[Column, ...]:
        """The declared columns a table row carries, keys first, a fact's surrogate keys last."""
        return (*self.key_columns_stored, *self.attributes, *self.reference_columns)

    @property
    def table(self) -> str:
        """The entity's own table: ``<name>_current``, ``<name>_history`` or ``<name>_fact``."""
        return f"{self.name}_fact" if self.is_fact else f"{self.name}_{self.history}"

    @property
    def sequence_column(self) -> Column | None:
        """The attribute that orders versions; ``None`` for the line's own ``source_seq``."""
        return None if self.sequence == DEFAULT_SEQUENCE else next(c for c in self.attributes if c.name == self.sequence)


@dataclass(frozen=True)
class Model:
    path: str
    entities: tuple[Entity, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entities)

    def entity(self, name: str = "") -> Entity:
        """The named entity; with no name, the first declared."""
        if not name:
            return self.entities[0]
        for e in self.entities:
            if e.name == name:
                return e
        raise ConfigError(f"model file {self.path!r}: no entity {name!r} (declared: {', '.join(self.names)})")


def sequence_definition(entity: Entity) -> dict[str, Any]:
    """How each source's versions are ordered, as recorded with the warehouse
    (``etl.io.sequence_store``): the entity's attribute, the line's ``source_seq``, or a change
    event's log position (connector, fields, widths). ``*``: any source not declared as an input."""
    def of(source: str) -> dict[str, Any]:
        spec = entity.input_of(source)
        if spec.format == "debezium":
            return {"connector": spec.connector, "sequence": list(spec.sequence), "sequence_bits": list(spec.sequence_bits)}
        if entity.sequence_column is not None:
            return {"attribute": entity.sequence, "type": str(entity.sequence_column.type)}
        return {"field": DEFAULT_SEQUENCE}

    named = entity.sources or tuple(i.source for i in entity.inputs)
    return {**({} if entity.sources else {"*": of("*")}), **{s: of(s) for s in named}}


def parse_type(text: Any) -> ColumnType:
    """``ValueError`` with what is accepted, for anything but the six type names."""
    if not isinstance(text, str):
        raise ValueError(f"a type must be a string, one of {', '.join(TYPES)}")
    t = text.strip().lower()
    if t in ("string", "integer", "date", "timestamp", "boolean"):
        return ColumnType(t)
    m = _DECIMAL.fullmatch(t)
    if m:
        p, s = int(m[1]), int(m[2])
        if not (1 <= p <= 38 and 0 <= s <= p):
            raise ValueError(f"{text!r}: decimal(p,s) needs 1 <= p <= 38 and 0 <= s <= p")
        return ColumnType("decimal", p, s)
    raise ValueError(f"unknown type {text!r}; types: {', '.join(TYPES)}")


def encode_key(parts: tuple[str, ...]) -> str:
    """The key's one text (``key_map``'s ``natural_key``): injective for an entity's key shape,
    since each part is its column's canonical text and a composite key is a JSON array of them."""
    if len(parts) == 1:
        return parts[0]
    return json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))


def source_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a source's name, or ``None``: the name becomes a folder of the
    landing zone, so a separator, ``..`` or a control character would write outside it or into a
    name no tool shows faithfully. Whitespace at either end is refused too: it is invisible in
    every listing and a comma-separated setting strips it, so the name could not be given twice
    the same way."""
    if not isinstance(name, str):
        return "is not text"
    if not name:
        return "is empty"
    if not name.strip():
        return "is only whitespace"
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        return "holds a control character (NUL, a line break, a tab, ...)"
    if any(unicodedata.category(ch) in ("Cf", "Zl", "Zp") for ch in name):
        return "holds an invisible format or separator character (a bidirectional override, U+2028, ...)"
    if name != name.strip():
        return "begins or ends with whitespace"
    if name in (".", ".."):
        return "is '.' or '..', which every folder holds already"
    if "/" in name or "\\" in name:
        return "holds a path separator ('/' or '\\')"
    if ":" in name:
        return "holds ':', which separates a line's file from its number in update_id, and drives on Windows"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: what an undecodable byte of the environment becomes
        return "is not valid UTF-8 text"
    if size > MAX_SOURCE_NAME_BYTES:
        return f"is {size} bytes long in UTF-8; at most {MAX_SOURCE_NAME_BYTES} fit a landing folder's name"
    return None


def shown(value: Any, limit: int = 60) -> str:
    """``value`` quoted for a message (``repr``: no raw control byte reaches a terminal), a long
    text cut short."""
    if not isinstance(value, str) or len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def check_source_names(where: str, names: Iterable[Any]) -> None:
    """``ConfigError`` at the first name ``source_name_problem`` refuses; ``where`` names the file
    or setting and the field."""
    for name in names:
        problem = source_name_problem(name)
        if problem:
            raise ConfigError(f"{where}: {shown(name)} {problem}; a source name becomes one folder of the landing "
                              f"zone (source_id=<name>)")


def _same_column(names: Iterable[str]) -> str:
    """What is wrong when two names are one column to Spark, which resolves column names without
    case (``name`` and ``Name`` would pass here and fail the run once its tables exist); empty if
    nothing is."""
    seen: dict[str, str] = {}
    for name in names:
        first = seen.get(name.lower())
        if first is None:
            seen[name.lower()] = name
        elif first == name:
            return f"column {name!r} declared twice (key and attributes share one namespace)"
        else:
            return (f"columns {first!r} and {name!r} are one column to Spark, which compares column names without "
                    f"case; rename one")
    return ""


def _columns(origin: str, raw: Any, what: str, allow_natural_key: bool = False) -> tuple[Column, ...]:
    if not isinstance(raw, Mapping) or (what == "key" and not raw):
        raise ConfigError(f"{origin}: '{what}' must be a table of column = type" + (" with at least one column" if what == "key" else ""))
    out = []
    for name, text in raw.items():
        where = f"{origin}: {what} column {name!r}"
        if not _COLUMN.fullmatch(name):
            raise ConfigError(f"{where}: a column name is a letter then letters, digits or _ (at most 63)")
        folded = name.lower()  # Spark's comparison of column names
        if folded in RESERVED and not (allow_natural_key and name == "natural_key"):
            as_spark_sees_it = "" if name == folded else f" ({folded!r} to Spark, which compares column names without case)"
            raise ConfigError(f"{where}: the name is the pipeline's own column{as_spark_sees_it}; reserved names: "
                              f"{', '.join(sorted(RESERVED))}")
        if folded.startswith(_RESERVED_PREFIXES):
            raise ConfigError(f"{where}: names starting with {', '.join(_RESERVED_PREFIXES)} (in any case) are reserved")
        try:
            out.append(Column(name, parse_type(text)))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return tuple(out)


def _strings(origin: str, raw: Any, what: str) -> tuple[str, ...]:
    if isinstance(raw, str) or not isinstance(raw, (list, tuple)) or not all(isinstance(s, str) and s for s in raw):
        raise ConfigError(f"{origin}: '{what}' must be a list of non-empty strings")
    return tuple(raw)


def _known_fields(where: str, raw: Mapping, fields: tuple[str, ...]) -> None:
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown field {', '.join(map(repr, unknown))}; fields: {', '.join(fields)}")


def _entity(path: str, name: str, raw: Any) -> Entity:
    origin = f"model file {path!r}, entity {name!r}"
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{origin}: an entity name is a lower-case letter then lower-case letters, digits or _ (at most 40)")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{origin}: must be a table")
    _known_fields(origin, raw, _ENTITY_FIELDS)
    kind = raw.get("kind", "dimension")
    if kind not in KINDS:
        raise ConfigError(f"{origin}: kind {kind!r} must be one of {', '.join(KINDS)}")
    append_only = "event_id" in raw
    if kind != "fact" and ("event_id" in raw or "references" in raw):
        raise ConfigError(f"{origin}: {'event_id' if 'event_id' in raw else 'references'} is for kind = \"fact\" only")
    if append_only and "key" in raw:
        raise ConfigError(f"{origin}: declare 'key' (a correction replaces the fact) or 'event_id' (append-only), not both")
    if append_only and (not isinstance(raw["event_id"], Mapping) or len(raw["event_id"]) != 1):
        raise ConfigError(f"{origin}: 'event_id' must be one typed column, like event_id = {{ order_line = \"string\" }}")
    if "key" not in raw and not append_only:
        raise ConfigError(f"{origin}: 'key' is missing (the natural key: one or more typed columns"
                          + ("; or a fact's 'event_id'" if kind == "fact" else "") + ")")
    what = "event_id" if append_only else "key"
    raw_key = raw[what]
    key = _columns(origin, raw_key, "key", allow_natural_key=isinstance(raw_key, Mapping) and len(raw_key) == 1)
    if any(c.name == "natural_key" and c.type.kind != "string" for c in key):
        raise ConfigError(f"{origin}: key column 'natural_key' must be a string (or take another name)")
    attributes = _columns(origin, raw.get("attributes", {}), "attributes")
    clash = _same_column(c.name for c in (*key, *attributes))
    if clash:
        raise ConfigError(f"{origin}: {clash}")
    attribute_names = tuple(c.name for c in attributes)
    sequence = raw.get("sequence", DEFAULT_SEQUENCE)
    # By default every attribute but the sequence column (a new sequence is no new content).
    compare = _strings(origin, raw["compare"], "compare") if "compare" in raw else tuple(n for n in attribute_names if n != sequence)
    for c in compare:
        if c not in attribute_names:
            raise ConfigError(f"{origin}: compare names {c!r}, which is not an attribute ({', '.join(attribute_names) or 'none declared'})")
    if not isinstance(sequence, str):
        raise ConfigError(f"{origin}: 'sequence' must be a column name")
    if sequence != DEFAULT_SEQUENCE:
        col = next((c for c in attributes if c.name == sequence), None)
        if col is None or col.type.kind not in ("integer", "timestamp"):
            raise ConfigError(f"{origin}: sequence {sequence!r} must be {DEFAULT_SEQUENCE!r} or an integer or timestamp attribute")
    history = raw.get("history", "current")
    if kind == "fact" and history != "current":
        raise ConfigError(f"{origin}: history {history!r}: a fact has no versions (a correction replaces it); leave 'history' out")
    if history not in HISTORY_KINDS:
        raise ConfigError(f"{origin}: history {history!r} must be one of {', '.join(HISTORY_KINDS)} (current: SCD type 1; history: SCD type 2)")
    type1 = _type1(origin, raw, history, attribute_names, sequence)
    sources = _strings(origin, raw["sources"], "sources") if "sources" in raw else ()
    check_source_names(f"{origin}: sources", sources)
    strategy = raw.get("join_strategy", "")
    if strategy:
        try:
            registry.spec(strategy)
        except ConfigError as exc:
            raise ConfigError(f"{origin}: join_strategy: {exc}") from None
    directory = raw.get("directory", name)
    if not isinstance(directory, str) or (directory and not _NAME.fullmatch(directory)):
        raise ConfigError(f"{origin}: 'directory' must be empty (the roots themselves) or a name like an entity's")
    if directory in RESERVED_DIRECTORIES:
        given = "" if "directory" in raw else " (the entity's name: the default directory)"
        raise ConfigError(f"{origin}: directory {directory!r}{given} is a name the pipeline uses under the roots "
                          f"({', '.join(sorted(RESERVED_DIRECTORIES))}); set 'directory' to another name")
    settings = raw.get("settings", {})
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{origin}: 'settings' must be a table of setting = value")
    refused = sorted(set(settings) - set(ENTITY_SETTINGS))
    if refused:
        raise ConfigError(f"{origin}: settings {', '.join(map(repr, refused))}: not a setting an entity may set ({', '.join(ENTITY_SETTINGS)})")
    if "strict_deleted_references" in settings and kind != "fact":
        raise ConfigError(f"{origin}: settings 'strict_deleted_references' is a fact's (how its gate takes facts naming "
                          f"deleted members); a dimension has no references")
    references = _references(origin, raw.get("references", {}), (*key, *attributes)) if kind == "fact" else ()
    if kind == "fact" and not references:
        raise ConfigError(f"{origin}: a fact needs 'references' (at least one surrogate key from a dimension)")
    inputs = _inputs(origin, raw.get("inputs", {}), sources, (*key, *attributes), sequence)
    return Entity(name, key, attributes, tuple(compare), sequence, history, sources, strategy, directory, dict(settings),
                  kind, references, append_only, inputs=inputs, type1=type1)


def _type1(origin: str, raw: Mapping, history: str, attribute_names: tuple[str, ...], sequence: str) -> tuple[str, ...]:
    """A history entity's ``type1`` attributes: declared ones, each once, not the sequence column
    (it orders the versions, so overwriting it on every version would reorder them)."""
    if "type1" not in raw:
        return ()
    names = _strings(origin, raw["type1"], "type1")
    if history != "history":
        raise ConfigError(f"{origin}: type1 is for history = \"history\" entities (a current-state entity "
                          f"overwrites every attribute already); leave it out or keep the history")
    for n in names:
        if n not in attribute_names:
            raise ConfigError(f"{origin}: type1 names {n!r}, which is not an attribute ({', '.join(attribute_names) or 'none declared'})")
        if n == sequence:
            raise ConfigError(f"{origin}: type1 names {n!r}, the sequence column: it orders the versions, so it cannot be overwritten on all of them")
    if len(set(names)) != len(names):
        raise ConfigError(f"{origin}: type1 names a column twice")
    return names


def _inputs(origin: str, raw: Any, sources: tuple[str, ...], columns: tuple[Column, ...], sequence: str) -> tuple[Input, ...]:
    """The entity's ``inputs.<source>`` tables, each checked on its own and against the entity."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{origin}: 'inputs' must be a table of <source> = {{ format, topics, fields, ... }}")
    names = {c.name for c in columns}
    out, topics = [], {}
    for source, spec in raw.items():
        check_source_names(f"{origin}: inputs.<source>", [source])
        where = f"{origin}: inputs.{source}"
        if sources and source not in sources:
            raise ConfigError(f"{where}: {source!r} is not one of the entity's sources ({', '.join(sources)})")
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where}: must be a table {{ format = \"debezium\", topics = [...] }}")
        _known_fields(where, spec, _INPUT_FIELDS)
        fmt = spec.get("format", "lines")
        if fmt not in INPUT_FORMATS:
            raise ConfigError(f"{where}: format {fmt!r} must be one of {', '.join(INPUT_FORMATS)}")
        named = _strings(where, spec["topics"], "topics") if "topics" in spec else ()
        for t in named:
            if not _TOPIC.fullmatch(t):
                raise ConfigError(f"{where}: topic {t!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)")
            if t in topics:
                raise ConfigError(f"{where}: topic {t!r} is read by inputs.{topics[t]} already; a topic feeds one source")
            topics[t] = source
        debezium_only = sorted(set(spec) & set(_DEBEZIUM_FIELDS))
        if fmt != "debezium" and debezium_only:
            raise ConfigError(f"{where}: {', '.join(map(repr, debezium_only))} map change events: set format = \"debezium\"")
        fields = spec.get("fields", {})
        if not isinstance(fields, Mapping) or not all(isinstance(v, str) and v for v in fields.values()):
            raise ConfigError(f"{where}: 'fields' must be a table of <entity column> = \"<field of after/before>\"")
        for column in fields:
            if column not in names:
                raise ConfigError(f"{where}: fields names {column!r}, which is not a key column or attribute "
                                  f"({', '.join(sorted(names))})")
        if fmt == "debezium" and sequence != DEFAULT_SEQUENCE:
            raise ConfigError(f"{where}: change events cannot feed an entity ordered by an attribute: the entity's sequence "
                              f"is its attribute {sequence!r}, taken from the change's row, but a delete's 'before' is the "
                              f"row as it was (or only its key), so the delete would carry the deleted version's "
                              f"{sequence!r} (judged a duplicate) or none (refused) and the row would stay; leave the "
                              f"entity's 'sequence' out: change events are ordered by their position in the source's log "
                              f"(inputs.{source}.sequence)")
        connector = spec.get("connector", "postgresql")
        if connector not in CONNECTOR_SEQUENCES:
            raise ConfigError(f"{where}: connector {connector!r} must be one of {', '.join(CONNECTOR_SEQUENCES)}")
        paths, bits = _input_sequence(where, spec, *CONNECTOR_SEQUENCES[connector])
        event_time = spec.get("event_time", "source.ts_ms")
        if not isinstance(event_time, str) or not _EVENT_PATH.fullmatch(event_time):
            raise ConfigError(f"{where}: event_time {event_time!r} must name a field of the event (\"ts_ms\") or of its "
                              f"source block (\"source.ts_ms\")")
        unit = spec.get("timestamp_unit", "us")
        if unit not in TIMESTAMP_UNITS:
            raise ConfigError(f"{where}: timestamp_unit {unit!r} must be one of {', '.join(TIMESTAMP_UNITS)}")
        decimals = spec.get("decimal_handling", "precise")
        if decimals not in DECIMAL_HANDLINGS:
            raise ConfigError(f"{where}: decimal_handling {decimals!r} must be one of {', '.join(DECIMAL_HANDLINGS)} "
                              f"(the connector's decimal.handling.mode)")
        out.append(Input(source, fmt, named, tuple(sorted(fields.items())), connector=connector, sequence=paths,
                         sequence_bits=bits, event_time=event_time, timestamp_unit=unit, decimal_handling=decimals))
    return tuple(out)


def _input_sequence(where: str, spec: Mapping, connector_paths: tuple[str, ...],
                    connector_bits: tuple[int, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """An input's ``sequence`` paths and the width of each part in the 63-bit sequence: the
    connector's unless given. One path alone may take all 63 bits; several need their widths."""
    raw = spec.get("sequence", connector_paths)
    paths = (raw,) if isinstance(raw, str) else raw
    if (not isinstance(paths, (list, tuple)) or not paths
            or not all(isinstance(p, str) and _EVENT_PATH.fullmatch(p) for p in paths)):
        raise ConfigError(f"{where}: sequence {raw!r} must name a field of the event (\"ts_ms\") or of its source block "
                          f"(\"source.lsn\"), or be a list of them compared in order ([\"source.file\", \"source.pos\"])")
    paths = tuple(paths)
    binlog = [p for p in paths if p in ("source.file", "source.pos", "source.row")]
    if binlog and binlog != ["source.file", "source.pos", "source.row"][:len(binlog)]:  # MySQL's and MariaDB's
        raise ConfigError(f"{where}: sequence {list(paths)!r}: a binlog position is its file, then its place in the "
                          f"file, then its row (source.pos starts again in every file, so later changes would be judged "
                          f"stale); order by [\"source.file\", \"source.pos\", \"source.row\"] (connector = \"mysql\" "
                          f"or \"mariadb\" does)")
    if "sequence_bits" not in spec:
        if "sequence" not in spec:
            return paths, connector_bits
        if len(paths) > 1:
            raise ConfigError(f"{where}: sequence {list(paths)!r} has several fields: give 'sequence_bits', the width in "
                              f"bits of each part, in order, within the {SEQUENCE_BITS} bits a sequence is stored in")
        return paths, (SEQUENCE_BITS,)
    bits = spec["sequence_bits"]
    if (not isinstance(bits, list) or not bits
            or not all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= SEQUENCE_BITS for b in bits)):
        raise ConfigError(f"{where}: sequence_bits {bits!r} must be a list of widths in bits (1 to {SEQUENCE_BITS}), one "
                          f"per part of the sequence, in order")
    if sum(bits) > SEQUENCE_BITS:
        raise ConfigError(f"{where}: sequence_bits {bits!r} add up to {sum(bits)} bits; a sequence is stored in "
                          f"{SEQUENCE_BITS} (source_seq, a non-negative 64-bit integer)")
    if len(bits) < len(paths):
        raise ConfigError(f"{where}: sequence_bits {bits!r} has {len(bits)} width(s) for {len(paths)} sequence fields; "
                          f"each field is at least one part")
    return paths, tuple(bits)


def _references(origin: str, raw: Any, columns: tuple[Column, ...]) -> tuple[Reference, ...]:
    """A fact's references, checked against its own columns (``_check_references`` checks them
    against the dimensions once every entity is read)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{origin}: 'references' must be a table of <surrogate key column> = {{ dimension, by, source }}")
    names = {c.name for c in columns}  # ``by`` names them exactly as declared
    taken = {c.name.lower(): ("a declared column", c.name) for c in columns}  # as Spark compares names
    out = []
    for name, ref in raw.items():
        where = f"{origin}: reference {name!r}"
        _columns(origin, {name: "integer"}, "references")  # the column name's own rules
        if name.lower() in taken:
            what, first = taken[name.lower()]
            raise ConfigError(f"{where}: the name is {what} already" + ("" if first == name else
                              f" ({first!r}: Spark compares column names without case)"))
        taken[name.lower()] = ("reference", name)
        if not isinstance(ref, Mapping):
            raise ConfigError(f"{where}: must be a table {{ dimension = \"...\", by = [...] }}")
        _known_fields(where, ref, _REFERENCE_FIELDS)
        dimension = ref.get("dimension")
        if not isinstance(dimension, str) or not dimension:
            raise ConfigError(f"{where}: 'dimension' (the referenced entity's name) is missing")
        by = _strings(where, ref.get("by"), "by") if "by" in ref else ()
        if not by:
            raise ConfigError(f"{where}: 'by' (the fact's columns holding the dimension's key, in order) is missing")
        for c in by:
            if c not in names:
                raise ConfigError(f"{where}: by names {c!r}, which is not a column of the fact")
        source = ref.get("source", "")
        if not isinstance(source, str):
            raise ConfigError(f"{where}: 'source' must be the dimension's source name (leave it out: the fact line's source)")
        if source:  # empty: as if left out, the fact line's own source
            check_source_names(f"{where}: source", [source])
        out.append(Reference(name, dimension, by, source))
    return tuple(out)


def _check_references(path: str, entities: tuple[Entity, ...]) -> tuple[Entity, ...]:
    """Each reference against its dimension (exists, is a dimension, key types in order, source),
    then every referenced dimension marked ``inferred``."""
    by_name = {e.name: e for e in entities}
    referenced = set()
    for e in entities:
        types = {c.name: c.type for c in (*e.key, *e.attributes)}
        for r in e.references:
            where = f"model file {path!r}, entity {e.name!r}: reference {r.name!r}"
            dim = by_name.get(r.dimension)
            if dim is None:
                raise ConfigError(f"{where}: no entity {r.dimension!r} in the model (declared: {', '.join(by_name)})")
            if dim.is_fact:
                raise ConfigError(f"{where}: {r.dimension!r} is a fact; a reference names a dimension")
            if len(r.by) != len(dim.key):
                raise ConfigError(f"{where}: by has {len(r.by)} column(s) but {dim.name!r}'s key has {len(dim.key)} "
                                  f"({', '.join(dim.key_names)})")
            for mine, theirs in zip(r.by, dim.key):
                if types[mine] != theirs.type:
                    raise ConfigError(f"{where}: by column {mine!r} is {types[mine]} but {dim.name!r}'s key column "
                                      f"{theirs.name!r} is {theirs.type}")
                if theirs.type.kind not in REFERENCE_KEY_TYPES:
                    raise ConfigError(f"{where}: a reference by a {theirs.type} key column is not supported "
                                      f"({', '.join(REFERENCE_KEY_TYPES)})")
            strays = sorted(set(e.sources) - set(dim.sources)) if not r.source and dim.sources else []
            if strays:
                raise ConfigError(f"{where}: the fact's source(s) {', '.join(strays)} are not {dim.name!r}'s sources "
                                  f"({', '.join(dim.sources)}); give the reference a 'source'")
            if r.source and dim.sources and r.source not in dim.sources:
                raise ConfigError(f"{where}: source {r.source!r} is not one of {dim.name!r}'s sources ({', '.join(dim.sources)})")
            referenced.add(dim.name)
    return tuple(dataclasses.replace(e, inferred=True) if e.name in referenced else e for e in entities)


def _check_directories(path: str, entities: tuple[Entity, ...]) -> None:
    """Each entity in a directory of its own: none shared, and none named as the table of the
    entity that lives at the roots (whose tables are there)."""
    dirs = [e.directory for e in entities]
    twice = sorted({d or "(the roots)" for d in dirs if dirs.count(d) > 1})
    if twice:
        raise ConfigError(f"model file {path!r}: entities share the directory {', '.join(twice)}; each needs its own")
    at_roots = next((e for e in entities if not e.directory), None)
    for e in entities:
        if at_roots is not None and e.directory == at_roots.table:
            raise ConfigError(f"model file {path!r}, entity {e.name!r}: directory {e.directory!r} is the table of entity "
                              f"{at_roots.name!r}, which lives at the roots; set 'directory' to another name")


def parse_toml(what: str, path: str, text: str) -> dict[str, Any]:
    """``text`` as TOML, or a ``ConfigError`` naming the file (``what``: "model file", ...)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {path!r} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per level of nesting
        raise ConfigError(f"{what} {path!r} nests arrays or tables too deeply to be read") from None


def parse_model(text: str, path: str = "<model>") -> Model:
    data = parse_toml("model file", path, text)
    unknown = sorted(set(data) - {"entities"})
    if unknown:
        raise ConfigError(f"model file {path!r}: unknown top-level field {', '.join(map(repr, unknown))}; entities go under [entities.<name>]")
    entities = data.get("entities")
    if not isinstance(entities, Mapping) or not entities:
        raise ConfigError(f"model file {path!r}: declares no entity ([entities.<name>] with a key)")
    try:
        out = _check_references(path, tuple(_entity(path, name, raw) for name, raw in entities.items()))
    except RecursionError:  # a deeply nested value met on the way (its repr in a message)
        raise ConfigError(f"model file {path!r} nests arrays or tables too deeply to be read") from None
    _check_directories(path, out)
    return Model(path, out)


def _kind_of_file(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _unreadable(where: str, exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{where} does not exist"
    if isinstance(exc, PermissionError):
        return f"{where} cannot be read: permission denied"
    return f"{where} cannot be read: {getattr(exc, 'strerror', None) or exc}"


def regular_file_stat(what: str, path: Path, hint: str = "") -> os.stat_result:
    """``path``'s status when it is a regular file (or a link to one), else a ``ConfigError``
    naming it: a FIFO is refused before anything opens it, so reading cannot block."""
    where = f"{what} {str(path)!r}"
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise ConfigError(f"{_unreadable(where, exc)}{hint}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{where} is {_kind_of_file(st.st_mode)}, not a file{hint}")
    return st


def read_text_file(what: str, path: Path, hint: str = "") -> str:
    """The UTF-8 text of the regular file ``path``, or a ``ConfigError`` naming it (``what``:
    "model file", "config file"; ``hint``: the setting that names it)."""
    regular_file_stat(what, path, hint)
    where = f"{what} {str(path)!r}"
    try:
        # Non-blocking: should the path become a FIFO after the check, opening it still returns.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{_unreadable(where, exc)}{hint}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{where} is {_kind_of_file(mode)}, not a file{hint}")
        try:
            data = f.read()
        except OSError as exc:
            raise ConfigError(f"{_unreadable(where, exc)}{hint}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); "
                          f"TOML files are UTF-8") from None


_MODEL_HINT = " (setting 'model_file')"


@functools.lru_cache(maxsize=32)
def _cached(path: str, mtime_ns: int, size: int) -> Model:
    return parse_model(read_text_file("model file", Path(path), _MODEL_HINT), path)


def load_model(path: str | os.PathLike[str] | None = None) -> Model:
    """The model in ``path`` (default: the customer model), read once per version of the file."""
    given = path or DEFAULT_MODEL_FILE
    try:
        p = Path(given).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, an unknown ~user, a NUL byte
        raise ConfigError(f"model file {str(given)!r} cannot be found: {exc}{_MODEL_HINT}") from None
    st = regular_file_stat("model file", p, _MODEL_HINT)
    return _cached(str(p), st.st_mtime_ns, st.st_size)
