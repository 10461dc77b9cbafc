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

Every error names the file, the entity and the field. Internally a key is one text,
``encode_key``: the value itself for a one-column key, a JSON array of the parts' texts for a
composite one, so ``key_map`` and every join strategy stay the same for any key shape.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from etl.core import registry
from etl.core.errors import ConfigError

TYPES = ("string", "integer", "decimal(p,s)", "date", "timestamp", "boolean")
HISTORY_KINDS = ("current", "history")
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
    "arrival_minute", "reject_reason", "file_bytes", "file_sha256", "file_lines", "file_blank_lines",
    "stands_for", "attributes", "strategy", "count", "is_new", "is_inferred",
})
_RESERVED_PREFIXES = ("km_", "o_", "_")
# The settings an entity may set for its own join (the rest are the warehouse's).
ENTITY_SETTINGS = (
    "micro_batch_seconds", "max_record_bytes", "max_rejected_fraction", "n_invoke", "r_wb", "alpha", "tau",
    "rho", "theta", "n_part", "k", "d", "memory_budget", "wait_buffer_tuples", "max_wait_s", "key_domain",
    "h_mark", "l_mark", "block_factor", "deletion_vectors", "deletion_vectors_from_bytes",
)
_ENTITY_FIELDS = ("kind", "key", "event_id", "attributes", "references", "compare", "sequence", "history", "sources",
                  "join_strategy", "directory", "settings", "inputs")
_REFERENCE_FIELDS = ("dimension", "by", "source")
_INPUT_FIELDS = ("format", "topics", "fields", "sequence", "event_time", "timestamp_unit")
INPUT_FORMATS = ("lines", "debezium")
TIMESTAMP_UNITS = {"ms": 1_000, "us": 1, "ns": 0.001}  # microseconds per unit of an integer timestamp
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
    ``after``/``before`` holding it (default: the same name), ``sequence`` is the path of the
    event's position in the source's log (when the entity's sequence is ``source_seq``),
    ``event_time`` the path of its change time in milliseconds, and ``timestamp_unit`` the unit of
    a timestamp attribute given as a number."""

    source: str
    format: str = "lines"
    topics: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()
    sequence: str = "source.lsn"
    event_time: str = "source.ts_ms"
    timestamp_unit: str = "us"

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


def _columns(origin: str, raw: Any, what: str, allow_natural_key: bool = False) -> tuple[Column, ...]:
    if not isinstance(raw, Mapping) or (what == "key" and not raw):
        raise ConfigError(f"{origin}: '{what}' must be a table of column = type" + (" with at least one column" if what == "key" else ""))
    out = []
    for name, text in raw.items():
        where = f"{origin}: {what} column {name!r}"
        if not _COLUMN.fullmatch(name):
            raise ConfigError(f"{where}: a column name is a letter then letters, digits or _ (at most 63)")
        if name in RESERVED and not (allow_natural_key and name == "natural_key"):
            raise ConfigError(f"{where}: the name is the pipeline's own column; reserved names: {', '.join(sorted(RESERVED))}")
        if name.startswith(_RESERVED_PREFIXES):
            raise ConfigError(f"{where}: names starting with {', '.join(_RESERVED_PREFIXES)} are reserved")
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
    names = [c.name for c in (*key, *attributes)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{origin}: column {', '.join(map(repr, twice))} declared twice (key and attributes share one namespace)")
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
    sources = _strings(origin, raw["sources"], "sources") if "sources" in raw else ()
    strategy = raw.get("join_strategy", "")
    if strategy:
        try:
            registry.spec(strategy)
        except ConfigError as exc:
            raise ConfigError(f"{origin}: join_strategy: {exc}") from None
    directory = raw.get("directory", name)
    if not isinstance(directory, str) or (directory and not _NAME.fullmatch(directory)):
        raise ConfigError(f"{origin}: 'directory' must be empty (the roots themselves) or a name like an entity's")
    settings = raw.get("settings", {})
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{origin}: 'settings' must be a table of setting = value")
    refused = sorted(set(settings) - set(ENTITY_SETTINGS))
    if refused:
        raise ConfigError(f"{origin}: settings {', '.join(map(repr, refused))}: not a setting an entity may set ({', '.join(ENTITY_SETTINGS)})")
    references = _references(origin, raw.get("references", {}), (*key, *attributes)) if kind == "fact" else ()
    if kind == "fact" and not references:
        raise ConfigError(f"{origin}: a fact needs 'references' (at least one surrogate key from a dimension)")
    inputs = _inputs(origin, raw.get("inputs", {}), sources, (*key, *attributes), sequence)
    return Entity(name, key, attributes, tuple(compare), sequence, history, sources, strategy, directory, dict(settings),
                  kind, references, append_only, inputs=inputs)


def _inputs(origin: str, raw: Any, sources: tuple[str, ...], columns: tuple[Column, ...], sequence: str) -> tuple[Input, ...]:
    """The entity's ``inputs.<source>`` tables, each checked on its own and against the entity."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{origin}: 'inputs' must be a table of <source> = {{ format, topics, fields, ... }}")
    names = {c.name for c in columns}
    out, topics = [], {}
    for source, spec in raw.items():
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
        debezium_only = sorted(set(spec) & {"fields", "sequence", "event_time", "timestamp_unit"})
        if fmt != "debezium" and debezium_only:
            raise ConfigError(f"{where}: {', '.join(map(repr, debezium_only))} map change events: set format = \"debezium\"")
        fields = spec.get("fields", {})
        if not isinstance(fields, Mapping) or not all(isinstance(v, str) and v for v in fields.values()):
            raise ConfigError(f"{where}: 'fields' must be a table of <entity column> = \"<field of after/before>\"")
        for column in fields:
            if column not in names:
                raise ConfigError(f"{where}: fields names {column!r}, which is not a key column or attribute "
                                  f"({', '.join(sorted(names))})")
        if "sequence" in spec and sequence != DEFAULT_SEQUENCE:
            raise ConfigError(f"{where}: the entity's sequence is its attribute {sequence!r}, taken from the change's row; "
                              f"leave 'sequence' out")
        for name in ("sequence", "event_time"):
            path = spec.get(name, "")
            if name in spec and (not isinstance(path, str) or not _EVENT_PATH.fullmatch(path)):
                raise ConfigError(f"{where}: {name} {path!r} must name a field of the event (\"ts_ms\") or of its "
                                  f"source block (\"source.lsn\")")
        unit = spec.get("timestamp_unit", "us")
        if unit not in TIMESTAMP_UNITS:
            raise ConfigError(f"{where}: timestamp_unit {unit!r} must be one of {', '.join(TIMESTAMP_UNITS)}")
        out.append(Input(source, fmt, named, tuple(sorted(fields.items())), spec.get("sequence", "source.lsn"),
                         spec.get("event_time", "source.ts_ms"), unit))
    return tuple(out)


def _references(origin: str, raw: Any, columns: tuple[Column, ...]) -> tuple[Reference, ...]:
    """A fact's references, checked against its own columns (``_check_references`` checks them
    against the dimensions once every entity is read)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{origin}: 'references' must be a table of <surrogate key column> = {{ dimension, by, source }}")
    names = {c.name for c in columns}
    out = []
    for name, ref in raw.items():
        where = f"{origin}: reference {name!r}"
        _columns(origin, {name: "integer"}, "references")  # the column name's own rules
        if name in names:
            raise ConfigError(f"{where}: the name is a declared column already")
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


def parse_model(text: str, path: str = "<model>") -> Model:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"model file {path!r} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"entities"})
    if unknown:
        raise ConfigError(f"model file {path!r}: unknown top-level field {', '.join(map(repr, unknown))}; entities go under [entities.<name>]")
    entities = data.get("entities")
    if not isinstance(entities, Mapping) or not entities:
        raise ConfigError(f"model file {path!r}: declares no entity ([entities.<name>] with a key)")
    out = _check_references(path, tuple(_entity(path, name, raw) for name, raw in entities.items()))
    dirs = [e.directory for e in out]
    twice = sorted({d or "(the roots)" for d in dirs if dirs.count(d) > 1})
    if twice:
        raise ConfigError(f"model file {path!r}: entities share the directory {', '.join(twice)}; each needs its own")
    return Model(path, out)


@functools.lru_cache(maxsize=32)
def _cached(path: str, mtime_ns: int, size: int) -> Model:
    return parse_model(Path(path).read_text(), path)


def load_model(path: str | os.PathLike[str] | None = None) -> Model:
    """The model in ``path`` (default: the customer model), read once per version of the file."""
    p = Path(path) if path else DEFAULT_MODEL_FILE
    p = p.expanduser().resolve()
    if not p.is_file():
        raise ConfigError(f"model file {str(p)!r} does not exist (setting 'model_file')")
    st = p.stat()
    return _cached(str(p), st.st_mtime_ns, st.st_size)
