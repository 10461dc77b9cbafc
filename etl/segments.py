"""Which segment of ``key_map`` a natural key belongs to (policy: pure Python, plus its Spark twin).

Range layout (papers/004 §6.3.2): the key domain ``[0, key_domain)`` is cut into ``2**n`` equal
slots; a slot array maps each slot to a segment, so mapping a key is one division and one array
lookup. A natural key's position is its value when it is a decimal integer of at most 18 digits;
any other key is hashed into the domain (order is kept only for numeric keys, which is what the
range variant exploits). Positions past the domain fall into the last slot, where new sequential
keys accumulate until maintenance splits that segment.

The layout is written once into the warehouse (``_meta/segment_layout.json``) and read back on every
run, so changing ``n_part`` or ``key_domain`` in the configuration never silently re-maps keys that
are already stored.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from etl.config import EtlConfig

NUMERIC_KEY = re.compile(r"^[0-9]{1,18}$")
LAYOUT_FILE = "_meta/segment_layout.json"


@dataclass(frozen=True)
class SlotArray:
    key_domain: int
    slots: tuple[int, ...]  # slot -> segment id; len is a power of two

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    @property
    def slot_length(self) -> int:
        return -(-self.key_domain // self.n_slots)

    @property
    def segments(self) -> list[int]:
        return sorted(set(self.slots))

    @classmethod
    def even(cls, key_domain: int, n_part: int) -> "SlotArray":
        n_slots = 1 << max(0, math.ceil(math.log2(n_part)))
        n_slots = max(n_slots, 1)
        return cls(key_domain, tuple(i * n_part // n_slots for i in range(n_slots)))

    def position(self, natural_key: str) -> int:
        if NUMERIC_KEY.match(natural_key):
            return int(natural_key)
        # Mirrors the Spark expression: pmod(xxhash64(key), key_domain).
        raise NotImplementedError("non-numeric keys are positioned by Spark's xxhash64; see segment_column")

    def segment_of_position(self, position: int) -> int:
        slot = min(max(position, 0) // self.slot_length, self.n_slots - 1)
        return self.slots[slot]

    def segment_of(self, natural_key: str) -> int:
        return self.segment_of_position(self.position(natural_key))

    kind = "range"

    def to_json(self) -> str:
        return json.dumps({"kind": "range", **asdict(self), "slots": list(self.slots)}, indent=1)


@dataclass(frozen=True)
class HashLayout:
    """Hash partitioning into ``n_part`` segments (papers/004 §6.3.2): spreads hot key ranges."""

    n_part: int
    kind = "hash"

    @property
    def segments(self) -> list[int]:
        return list(range(self.n_part))

    def to_json(self) -> str:
        return json.dumps({"kind": "hash", "n_part": self.n_part})


def layout_from_json(text: str):
    data = json.loads(text)
    if data.get("kind", "range") == "hash":
        return HashLayout(int(data["n_part"]))
    return SlotArray(int(data["key_domain"]), tuple(int(s) for s in data["slots"]))


def load_layout(cfg: EtlConfig, kind: str = "range"):
    """The warehouse's layout; created from the configuration (of ``kind``) the first time."""
    path = Path(cfg.warehouse_path) / LAYOUT_FILE
    if path.exists():
        return layout_from_json(path.read_text())
    layout = HashLayout(cfg.n_part) if kind == "hash" else SlotArray.even(cfg.key_domain, cfg.n_part)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(layout.to_json())
    tmp.replace(path)
    return layout


def segment_column(layout):
    """A function (source_id col, natural_key col) -> Spark column of the key's segment id."""
    from pyspark.sql import functions as F

    if isinstance(layout, HashLayout):
        return lambda source_id, natural_key: F.pmod(F.xxhash64(natural_key), F.lit(layout.n_part)).cast("int")

    def segment_of(source_id, natural_key):
        position = F.when(natural_key.rlike(NUMERIC_KEY.pattern), natural_key.cast("long")).otherwise(
            F.pmod(F.xxhash64(natural_key), F.lit(layout.key_domain))
        )
        slot = F.least(F.floor(position / F.lit(layout.slot_length)), F.lit(layout.n_slots - 1)).cast("int")
        slots = F.array(*[F.lit(s) for s in layout.slots])
        return F.element_at(slots, slot + 1).cast("int")

    return segment_of
