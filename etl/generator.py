"""Synthetic update streams following the thesis's trace model (papers/004 §6.4.1).

Volume over time follows the **b-model** (Wang et al., ICDE 2002): the trace's total volume is
split recursively between the two halves of each time interval in the ratio ``b : 1-b`` (which
half gets ``b`` is a fair coin), down to ``2**n`` mini-intervals; ``n`` is the smallest level whose
mini-intervals are no longer than ``mini_interval_s``. ``b = 0.5`` is a smooth stream; ``b -> 1``
is ever burstier.

Within a mini-interval the tuples are placed in time x key space by **PQRS** (Wang, Ailamaki and
Faloutsos, 2002): the (time, key) square is split into four quadrants with probabilities
``p`` (early, low keys), ``q`` (early, high keys), ``r`` (late, low keys) and ``s`` (late, high keys),
recursively, one bit of time and one bit of key per level. Unequal p/q/r/s give skew over the key
space (hot key ranges) and correlation between time and key (spatio-temporal locality).

On top of the model, a share of updates carry a brand-new natural key, a share are re-deliveries
of an earlier update (same ``source_seq``), a share repeat a key's current content under a new
``source_seq``, and a share are malformed lines. Everything is drawn from one seeded generator:
the same parameters and seed give the same files, byte for byte.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Callable

import numpy as np

from etl.core.model import Column, Entity, Model, load_model, shown, source_name_problem
from etl.io.landing import landing_file  # noqa: F401  (where the generator writes; re-exported)

CITIES = (
    "Amsterdam", "Berlin", "Bogota", "Cairo", "Delhi", "Dublin", "Jakarta", "Lagos", "Lima", "Lisbon",
    "Madrid", "Manila", "Nairobi", "Osaka", "Oslo", "Paris", "Quito", "Seoul", "Toronto", "Waterloo",
)
MALFORMED_KINDS = (
    "truncated_json", "not_an_object", "missing_natural_key", "null_natural_key", "bad_source_seq",
    "bad_op", "bad_balance", "bad_event_ts", "missing_source_seq",
)


# PQRS quadrant probabilities (p, q, r, s) by name: one definition for the benchmarks, the
# simulator and whatever replays a stream. papers/004 publishes no PQRS of its own; "thesis" is the
# strongly skewed stream its experiments are run at here (85% of updates on the hottest sixth of the
# keys: docs/simulator.md), "default" the generator's own milder one. "uniform" seeds a relation.
SKEWS: dict[str, tuple[float, float, float, float]] = {
    "thesis": (0.6, 0.1, 0.25, 0.05),
    "default": (0.4, 0.25, 0.2, 0.15),
    "uniform": (0.25, 0.25, 0.25, 0.25),
}


def skew(name: str) -> dict[str, float]:
    """``StreamSpec``'s p, q, r, s for the skew ``name`` (``SKEWS``)."""
    if name not in SKEWS:
        raise ValueError(f"unknown skew {name!r}: one of {', '.join(SKEWS)}")
    return dict(zip("pqrs", SKEWS[name]))


@dataclass(frozen=True)
class StreamSpec:
    start: datetime
    duration_s: float = 300.0
    sources: tuple[str, ...] = ("crm", "web")
    rate: float = 40.0  # average updates per second, all sources together
    key_domain: int = 10_000  # natural keys of existing entities are 0..key_domain-1
    new_key_share: float = 0.05
    duplicate_share: float = 0.02  # re-delivered: same source_seq and content as an earlier update
    unchanged_share: float = 0.05  # same content as the key's current version, new source_seq
    malformed_share: float = 0.01
    delete_share: float = 0.005
    b: float = 0.6  # b-model bias
    p: float = SKEWS["default"][0]  # PQRS quadrant probabilities (must sum to 1)
    q: float = SKEWS["default"][1]
    r: float = SKEWS["default"][2]
    s: float = SKEWS["default"][3]
    mini_interval_s: float = 1.0
    max_event_lag_s: float = 2.0  # event_ts precedes arrival by up to this much
    seed: int = 7

    def __post_init__(self) -> None:
        if self.start.tzinfo is None:
            object.__setattr__(self, "start", self.start.replace(tzinfo=timezone.utc))
        checks = {
            "duration_s": self.duration_s > 0,
            "rate": self.rate >= 0,
            "key_domain": self.key_domain > 0,
            "sources": len(self.sources) > 0 and all(self.sources),
            "b": 0.5 <= self.b < 1,
            "mini_interval_s": self.mini_interval_s > 0,
            "p+q+r+s": abs(self.p + self.q + self.r + self.s - 1) < 1e-9 and min(self.p, self.q, self.r, self.s) >= 0,
        }
        for name in ("new_key_share", "duplicate_share", "unchanged_share", "malformed_share", "delete_share"):
            checks[name] = 0 <= getattr(self, name) <= 1
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid stream parameters: {', '.join(bad)} ({self})")
        for source in self.sources:  # each names a folder of the landing zone
            problem = source_name_problem(source)
            if problem:
                raise ValueError(f"invalid stream parameters: source {shown(source)} {problem}")
        if self.duplicate_share + self.unchanged_share + self.malformed_share + self.new_key_share > 1:
            raise ValueError("new_key_share + duplicate_share + unchanged_share + malformed_share must be <= 1")

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.duration_s)

    def described(self) -> dict:
        """What every result states of its stream: the skew (its name when it is one of
        ``SKEWS``), the burstiness b, the rate and the keys."""
        pqrs = (self.p, self.q, self.r, self.s)
        name = next((n for n, v in SKEWS.items() if v == pqrs), None)
        return {"skew": name, "p": self.p, "q": self.q, "r": self.r, "s": self.s, "b": self.b, "rate": self.rate,
                "key_domain": self.key_domain, "duration_s": self.duration_s, "seed": self.seed}


@dataclass
class GeneratedStream:
    files: list[Path] = field(default_factory=list)
    lines: int = 0
    kinds: Counter = field(default_factory=Counter)  # intended kind of each line, for tests and docs

    def summary(self) -> dict:
        return {"files": len(self.files), "lines": self.lines, "kinds": dict(sorted(self.kinds.items()))}


# ----------------------------------------------------------------------------- the two models


def b_model_volumes(total: int, levels: int, b: float, rng: np.random.Generator) -> np.ndarray:
    """Split ``total`` over ``2**levels`` mini-intervals by the b-model; the sum is exactly ``total``."""
    volumes = np.array([total], dtype=np.int64)
    for _ in range(levels):
        left_gets_b = rng.random(volumes.size) < 0.5
        frac = np.where(left_gets_b, b, 1 - b)
        left = np.floor(volumes * frac).astype(np.int64)
        # The remainder of the floor goes to a fair coin so the split is unbiased and exact.
        left += (rng.random(volumes.size) < (volumes * frac - left)).astype(np.int64)
        right = volumes - left
        volumes = np.stack([left, right], axis=1).reshape(-1)
    return volumes


def b_model_levels(duration_s: float, mini_interval_s: float) -> int:
    return max(0, math.ceil(math.log2(max(duration_s / mini_interval_s, 1.0))))


def pqrs_points(
    count: int, key_domain: int, p: float, q: float, r: float, s: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` points of (time fraction in [0,1), key in [0, key_domain)) from the PQRS recursion."""
    key_bits = max(1, math.ceil(math.log2(key_domain)))
    time_bits = min(key_bits, 24)
    quadrants = rng.choice(4, size=(count, key_bits), p=[p, q, r, s]).astype(np.int64)
    key_bit = quadrants & 1  # q and s: high half of the key range
    time_bit = quadrants >> 1  # r and s: late half of the time range
    key_weights = np.left_shift(np.int64(1), np.arange(key_bits - 1, -1, -1, dtype=np.int64))
    raw_keys = key_bit @ key_weights
    keys = (raw_keys * key_domain) >> key_bits  # map [0, 2**bits) onto [0, key_domain) in order
    time_weights = 0.5 ** np.arange(1, time_bits + 1)
    times = time_bit[:, :time_bits] @ time_weights
    return times, keys


# ----------------------------------------------------------------------------- records


def _iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def initial_content(source_id: str, natural_key: str) -> dict:
    """The content a seeded warehouse holds for a key before the stream starts (deterministic)."""
    n = int(natural_key) if natural_key.isdigit() else sum(natural_key.encode())
    return {
        "name": f"Customer {source_id}-{natural_key}",
        "email": f"c{natural_key}@{source_id}.example",
        "city": CITIES[(n * 7 + len(source_id)) % len(CITIES)],
        "balance": f"{(n * 37) % 100000 / 10:.2f}",
    }


_EPOCH = datetime(2020, 1, 1, tzinfo=timezone.utc)


def _value(column: Column, n: int):
    """A JSON value of ``column``'s type determined by ``n >= 0`` (one-to-one within a wide range)."""
    t = column.type
    if t.kind == "string":
        return f"{column.name}-{n}"
    if t.kind == "integer":
        return n
    if t.kind == "decimal":
        return format((Decimal(n % 10 ** (t.precision - t.scale))).scaleb(-t.scale), "f")
    if t.kind == "date":
        return (_EPOCH + timedelta(days=n % 2_900_000)).date().isoformat()
    if t.kind == "timestamp":
        return _iso(_EPOCH + timedelta(seconds=n % 200_000_000_000))
    return n % 2 == 1  # boolean


class Shape:
    """How the generator writes one entity's lines: its key fields for a key number, its content.
    The default customer keeps the stream it always had, byte for byte (``CustomerShape``)."""

    def __init__(self, entity: Entity) -> None:
        self.entity = entity
        self.sequence = entity.sequence_column

    def key_fields(self, index: int, key_domain: int) -> dict:
        """Top-level fields of key number ``index``: a composite key is ``index`` in mixed radix,
        so ``key_domain`` keys are spread over its columns (the first takes what is left)."""
        cols = self.entity.key
        if len(cols) == 1:
            return {cols[0].name: _value(cols[0], index)}
        radix = max(2, math.ceil(key_domain ** (1 / len(cols))))
        digits = []
        for _ in cols[1:]:
            index, d = divmod(index, radix)
            digits.append(d)
        digits.append(index)
        return {c.name: _value(c, d) for c, d in zip(cols, reversed(digits))}

    def key_text(self, fields: dict) -> str:
        return json.dumps([fields[c.name] for c in self.entity.key])

    def initial(self, source_id: str, index: int) -> dict:
        return {c.name: _value(c, index + len(source_id)) for c in self.entity.attributes}

    def content(self, source_id: str, index: int, rng: np.random.Generator) -> dict:
        return {c.name: _value(c, int(rng.integers(0, 1 << 30))) for c in self.entity.attributes}

    def sequenced(self, record: dict, event_us: int, counter: int) -> None:
        """Give a record of an entity sequenced by an attribute that attribute, increasing like
        ``source_seq``."""
        if self.sequence is None:
            return
        if self.sequence.type.kind == "integer":
            value = record["source_seq"]
        else:
            value = _iso(datetime.fromtimestamp(0, tz=timezone.utc) + timedelta(microseconds=event_us + counter % 100))
        record["attributes"] = dict(record["attributes"], **{self.sequence.name: value})

    def malformed(self, kind: str, record: dict) -> str:
        rec = dict(record)
        first = self.entity.key[0].name
        others = [c for c in self.entity.attributes if c.name != self.entity.sequence]
        if kind == "truncated_json":
            return json.dumps(rec, sort_keys=True)[:25]
        if kind == "not_an_object":
            return json.dumps([rec[first], rec["source_seq"]])
        if kind == "missing_natural_key":
            rec.pop(first)
        elif kind == "null_natural_key":
            rec[first] = None
        elif kind in ("bad_source_seq", "missing_source_seq") and self.sequence is not None:
            rec["attributes"] = dict(rec["attributes"], **{self.sequence.name: "seq-x" if kind == "bad_source_seq" else None})
        elif kind == "bad_source_seq":
            rec["source_seq"] = "seq-" + str(rec["source_seq"])
        elif kind == "missing_source_seq":
            rec.pop("source_seq")
        elif kind == "bad_balance" and others:
            c = others[0]
            rec["attributes"] = dict(rec["attributes"], **{c.name: [1] if c.type.kind == "string" else "lots"})
        elif kind in ("bad_op", "bad_balance"):
            rec["op"] = "merge"
        elif kind == "bad_event_ts":
            rec["event_ts"] = "yesterday"
        return json.dumps(rec, sort_keys=True)


class CustomerShape(Shape):
    def key_fields(self, index: int, key_domain: int) -> dict:
        return {"natural_key": str(index)}

    def key_text(self, fields: dict) -> str:
        return fields["natural_key"]

    def initial(self, source_id: str, index: int) -> dict:
        return initial_content(source_id, str(index))

    def content(self, source_id: str, index: int, rng: np.random.Generator) -> dict:
        natural_key = str(index)
        return {
            "name": f"Customer {source_id}-{natural_key}",
            "email": f"c{natural_key}.{int(rng.integers(0, 1000))}@{source_id}.example",
            "city": CITIES[int(rng.integers(0, len(CITIES)))],
            "balance": f"{rng.random() * 10000:.2f}",
        }

    def malformed(self, kind: str, record: dict) -> str:
        return _malformed(kind, record)


class FactShape(Shape):
    """A fact's lines: each reference's columns hold a key of its dimension's generated stream (a
    key number below ``key_domain``, in the dimension's shape), the same for every line of one
    fact, so a correction changes the fact's own attributes, not what it references."""

    def __init__(self, entity: Entity, dimensions: dict[str, Entity], key_domain: int) -> None:
        super().__init__(entity)
        self.dimensions = {name: shape_of(dim) for name, dim in dimensions.items()}
        self.key_domain = key_domain

    def references(self, index: int) -> dict:
        out = {}
        for j, r in enumerate(self.entity.references):
            dim = self.dimensions[r.dimension]
            fields = dim.key_fields((index * 7919 + 104729 * j) % self.key_domain, self.key_domain)
            out.update({mine: fields[theirs.name] for mine, theirs in zip(r.by, dim.entity.key)})
        return out

    def initial(self, source_id: str, index: int) -> dict:
        return {**super().initial(source_id, index), **self.references(index)}

    def content(self, source_id: str, index: int, rng: np.random.Generator) -> dict:
        return {**super().content(source_id, index, rng), **self.references(index)}


def shape_of(entity: Entity | None, model: Model | None = None, key_domain: int = 1) -> Shape:
    """The customer's own shape for the default model's entity (and any of the same columns); a
    fact's references drawn from its dimensions' keys (``model`` has them)."""
    if entity is not None and entity.is_fact:
        model = model or load_model()
        return FactShape(entity, {r.dimension: model.entity(r.dimension) for r in entity.references}, key_domain)
    default = load_model().entity()
    if entity is None or (entity.key == default.key and entity.attributes == default.attributes and entity.sequence == default.sequence):
        return CustomerShape(entity or default)
    return Shape(entity)


def _malformed(kind: str, record: dict) -> str:
    rec = dict(record)
    if kind == "truncated_json":
        return json.dumps(rec, sort_keys=True)[: 25]
    if kind == "not_an_object":
        return json.dumps([rec["natural_key"], rec["source_seq"]])
    if kind == "missing_natural_key":
        rec.pop("natural_key")
    elif kind == "null_natural_key":
        rec["natural_key"] = None
    elif kind == "bad_source_seq":
        rec["source_seq"] = "seq-" + str(rec["source_seq"])
    elif kind == "missing_source_seq":
        rec.pop("source_seq")
    elif kind == "bad_op":
        rec["op"] = "merge"
    elif kind == "bad_balance":
        rec["attributes"] = dict(rec["attributes"], balance="lots")
    elif kind == "bad_event_ts":
        rec["event_ts"] = "yesterday"
    return json.dumps(rec, sort_keys=True)


def generate_stream(
    spec: StreamSpec,
    landing_root: str | Path,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    entity: Entity | None = None,
    model: Model | None = None,
    piece_seconds: int = 60,
) -> GeneratedStream:
    """Write the stream of ``entity`` (default: the customer) as JSON-lines landing files; one file
    per source and arrival piece (``piece_seconds``: a minute by default). A fact's references name keys of its dimensions in ``model``
    (generated with the same ``key_domain``, most of them exist there)."""
    shape = shape_of(entity, model, spec.key_domain)
    rng = np.random.default_rng(spec.seed)
    landing_root = Path(landing_root)
    total = int(round(spec.rate * spec.duration_s))
    levels = b_model_levels(spec.duration_s, spec.mini_interval_s)
    volumes = b_model_volumes(total, levels, spec.b, rng)
    mini_len = spec.duration_s / len(volumes)

    # Arrival time and key of every tuple: b-model volume per mini-interval, PQRS inside it.
    offsets = np.empty(total, dtype=np.float64)
    keys = np.empty(total, dtype=np.int64)
    pos = 0
    for i, v in enumerate(volumes):
        if v == 0:
            continue
        t, k = pqrs_points(int(v), spec.key_domain, spec.p, spec.q, spec.r, spec.s, rng)
        offsets[pos : pos + v] = (i + t) * mini_len
        keys[pos : pos + v] = k
        pos += v
    order = np.argsort(offsets, kind="stable")
    offsets, keys = offsets[order], keys[order]

    src_idx = rng.integers(0, len(spec.sources), size=total)
    kind_draw = rng.random(total)
    lags = rng.random(total) * spec.max_event_lag_s
    start_us = int(spec.start.timestamp() * 1_000_000)

    c_new = spec.new_key_share
    c_dup = c_new + spec.duplicate_share
    c_unch = c_dup + spec.unchanged_share
    c_bad = c_unch + spec.malformed_share

    out = GeneratedStream()
    by_file: dict[Path, list[str]] = {}
    recent: dict[str, list[dict]] = {s: [] for s in spec.sources}  # per source, for re-deliveries
    current: dict[tuple[str, str], dict] = {}  # last content sent per key, for unchanged updates
    seq_counter = Counter()
    report_every = max(1, total // 10)

    for i in range(total):
        source = spec.sources[src_idx[i]]
        arrival_us = start_us + int(offsets[i] * 1_000_000)
        arrival = datetime.fromtimestamp(arrival_us / 1_000_000, tz=timezone.utc)
        draw = kind_draw[i]
        if draw < c_dup and draw >= c_new and recent[source]:
            # Re-delivery of an earlier update: same source_seq, same content, later arrival.
            j = int(rng.integers(0, len(recent[source])))
            record = dict(recent[source][j], arrival_ts=_iso(arrival))
            kind = "redelivered"
        else:
            if draw < c_new:
                # A key no earlier run has seen: above the domain, unique per arrival microsecond.
                index = spec.key_domain + arrival_us * 10 + (seq_counter[source] % 10)
                kind = "new_key"
            else:
                index = int(keys[i])
                kind = "update"
            key_fields = shape.key_fields(index, spec.key_domain)
            event_us = arrival_us - int(lags[i] * 1_000_000)
            seq_counter[source] += 1
            source_seq = event_us * 100 + seq_counter[source] % 100
            key = (source, shape.key_text(key_fields))
            if c_dup <= draw < c_unch:
                content = current.get(key) or shape.initial(source, index)
                kind = "unchanged"
                if shape.entity.type1 and seq_counter[source] % 2:
                    # Half of a history entity's unchanged updates change its type1 columns only,
                    # to a value made from a number above the content draws' (a type that wraps
                    # around, a boolean say, may give the same value: then it is unchanged).
                    columns = [c for c in shape.entity.attributes if c.name in shape.entity.type1]
                    content = dict(content, **{c.name: _value(c, (1 << 30) + seq_counter[source]) for c in columns})
                    kind = "type1_only"
            else:
                content = shape.content(source, index, rng)
            op = "delete" if rng.random() < spec.delete_share else "upsert"
            record = {
                "source_id": source,
                **key_fields,
                "op": op,
                "source_seq": source_seq,
                "event_ts": _iso(datetime.fromtimestamp(event_us / 1_000_000, tz=timezone.utc)),
                "arrival_ts": _iso(arrival),
                "attributes": content,
            }
            shape.sequenced(record, event_us, seq_counter[source])
            if c_unch <= draw < c_bad:
                kind = "malformed:" + MALFORMED_KINDS[int(rng.integers(0, len(MALFORMED_KINDS)))]
            else:
                current[key] = content
                recent[source].append(record)
                if len(recent[source]) > 1000:
                    recent[source].pop(0)
        if kind.startswith("malformed:"):
            line = shape.malformed(kind.split(":", 1)[1], record)
        else:
            line = json.dumps(record, sort_keys=True)
        piece = arrival.replace(second=arrival.second - arrival.second % piece_seconds, microsecond=0)
        by_file.setdefault(landing_file(landing_root, source, piece, piece_seconds), []).append(line)
        out.kinds[kind.split(":")[0]] += 1
        out.lines += 1
        if progress and (i + 1) % report_every == 0:
            progress(f"generated {i + 1}/{total} updates")

    for path in sorted(by_file):
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} already exists; refusing to overwrite landed data (use --overwrite)")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(by_file[path]) + "\n")
        out.files.append(path)
    if progress:
        progress(f"wrote {out.lines} updates in {len(out.files)} files under {landing_root}")
    return out


def spec_dict(spec: StreamSpec) -> dict:
    d = asdict(spec)
    d["start"] = _iso(spec.start)
    d["sources"] = list(spec.sources)
    return d
