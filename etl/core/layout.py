"""Which segment of ``key_map`` a natural key belongs to: the layouts, pure Python.

Their Spark twin is ``etl.transforms.layout``; the file that stores a warehouse's layout is
``etl.io.layout_store``.

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

NUMERIC_KEY = re.compile(r"^[0-9]{1,18}$")


@dataclass(frozen=True)
class SlotArray:
    key_domain: int
    slots: tuple[int, ...]  # slot -> segment id
    # Key positions per slot; 0 means ceil(key_domain / n_slots) (layouts written before refinement).
    length: int = 0

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    @property
    def slot_length(self) -> int:
        return self.length or -(-self.key_domain // self.n_slots)

    def refined(self) -> "SlotArray | None":
        """The same mapping with each slot cut into ``f`` slots (``f``: the smallest prime factor of
        the slot length), so a one-slot segment can be split; ``None`` once a slot is one key."""
        length = self.slot_length
        if length <= 1:
            return None
        f = next(p for p in range(2, length + 1) if length % p == 0)
        return SlotArray(self.key_domain, tuple(s for s in self.slots for _ in range(f)), length // f)

    @property
    def segments(self) -> list[int]:
        return sorted(set(self.slots))

    @classmethod
    def even(cls, key_domain: int, n_part: int) -> "SlotArray":
        n_slots = 1 << max(0, math.ceil(math.log2(n_part)))
        n_slots = max(n_slots, 1)
        return cls(key_domain, tuple(i * n_part // n_slots for i in range(n_slots)), -(-key_domain // n_slots))

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
        return json.dumps({"kind": "range", **asdict(self), "slots": list(self.slots), "length": self.slot_length})


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
    return SlotArray(int(data["key_domain"]), tuple(int(s) for s in data["slots"]), int(data.get("length", 0)))


@dataclass(frozen=True)
class RebalancePlan:
    layout: "SlotArray"
    split: dict  # old segment id -> ids its rows now spread over (the first is the old id)
    merged: dict  # segment id that disappears -> the segment id that absorbed it

    @property
    def changed(self) -> bool:
        return bool(self.split or self.merged)

    @property
    def touched_segments(self) -> list[int]:
        """Every segment id whose rows may change (the Delta partitions to rewrite)."""
        ids = set(self.merged) | set(self.merged.values())
        for old, new in self.split.items():
            ids |= {old, *new}
        return sorted(ids)


MAX_SLOTS = 4096  # the slot array is a literal in every segment expression: keep it small


def needs_refinement(layout: SlotArray, slot_rows: dict[int, int], theta: int) -> bool:
    """A slot holding more than 2*theta rows can only be split at a finer slot length (while the
    slot array stays within ``MAX_SLOTS``)."""
    finer = layout.refined()
    return finer is not None and finer.n_slots <= MAX_SLOTS and any(n > 2 * theta for n in slot_rows.values())


def segments_to_split(layout: SlotArray, segment_rows: dict[int, int], theta: int, limit: int = 0) -> list[int]:
    """The segments above ``2*theta`` rows that a rebalance may split: of more than one slot, or
    in a slot array that can still be refined, the largest first (ties: the lower id); with
    ``limit``, only that many. Decided from the rows per segment alone
    (what a run's end knows without reading the keys), so the table service between runs reads
    keys only of segments that may split; one whose rows all sit in one slot that cannot be cut is
    read and left as it is."""
    finer = layout.refined()
    refinable = finer is not None and finer.n_slots <= MAX_SLOTS
    _, slots_of = _segment_rows(layout, {})
    due = sorted((seg for seg, n in segment_rows.items()
                  if n > 2 * theta and seg in slots_of and (refinable or slots_of[seg] > 1)),
                 key=lambda seg: (-segment_rows[seg], seg))
    return due[:limit] if limit > 0 else due


def _segment_rows(layout: SlotArray, slot_rows: dict[int, int]):
    rows: dict[int, int] = {}
    n_slots_of: dict[int, int] = {}
    for slot, seg in enumerate(layout.slots):
        rows[seg] = rows.get(seg, 0) + slot_rows.get(slot, 0)
        n_slots_of[seg] = n_slots_of.get(seg, 0) + 1
    return rows, n_slots_of


def plan_rebalance(layout: SlotArray, slot_rows: dict[int, int], theta: int, merge: bool = True) -> RebalancePlan:
    """Split segments above ``2*theta`` rows at slot boundaries into pieces of at most ``2*theta``
    where the slots allow, then (``merge``) merge a segment below ``theta`` into its right (else
    left) neighbour when together they stay within ``2*theta``. Segments are runs of adjacent slots
    before and after; the first piece of a split keeps the old id; a merge keeps the id of the
    larger, so the fewest rows move."""
    slots = list(layout.slots)
    next_id = max(slots) + 1
    split: dict[int, list[int]] = {}
    rows, _ = _segment_rows(layout, slot_rows)
    for seg in sorted(rows):
        if rows[seg] <= 2 * theta:
            continue
        mine = [i for i, s in enumerate(slots) if s == seg]
        pieces, acc = [[mine[0]]], slot_rows.get(mine[0], 0)
        for i in mine[1:]:
            n = slot_rows.get(i, 0)
            if acc + n > 2 * theta and acc > 0:
                pieces.append([i])
                acc = n
            else:
                pieces[-1].append(i)
                acc += n
        if len(pieces) == 1:
            continue
        ids = [seg]
        for piece in pieces[1:]:
            for i in piece:
                slots[i] = next_id
            ids.append(next_id)
            next_id += 1
        split[seg] = ids
    merged: dict[int, int] = {}
    if not merge:
        return RebalancePlan(SlotArray(layout.key_domain, tuple(slots), layout.slot_length), split, merged)
    rows, _ = _segment_rows(SlotArray(layout.key_domain, tuple(slots), layout.slot_length), slot_rows)
    order = []  # segments in key order
    for s in slots:
        if not order or order[-1] != s:
            order.append(s)
    i = 0
    while i < len(order):
        seg = order[i]
        if rows[seg] < theta and len(order) > 1:
            j = i + 1 if i + 1 < len(order) else i - 1
            other = order[j]
            if rows[seg] + rows[other] <= 2 * theta:
                keep, gone = (seg, other) if rows[seg] > rows[other] else (other, seg)
                slots = [keep if s == gone else s for s in slots]
                rows[keep] += rows.pop(gone)
                for a, b in list(merged.items()):
                    if b == gone:
                        merged[a] = keep
                merged[gone] = keep
                order.pop(order.index(gone))
                i = min(i, order.index(keep))
                continue
        i += 1
    return RebalancePlan(SlotArray(layout.key_domain, tuple(slots), layout.slot_length), split, merged)


def carried_across(frequency: dict[int, float], resident: list[int], old: "SlotArray", new: "SlotArray",
                   rows: dict[int, int]) -> tuple[dict[int, float], list[int]] | None:
    """A run's carried join state (each segment's decayed frequency ``C_k`` and the resident
    segments) named by the segments of ``new``, a layout made from ``old`` by splits, merges or
    slot refinements (a run's end split, maintenance's rebalance), so the next run starts warm
    instead of cold (issue 47). Pure: whichever loader starts the run maps it alike. Each old
    segment's frequency is shared among the new segments its key range overlaps, in proportion to
    the rows those overlaps are estimated to hold (``rows``, now, per new segment, spread evenly
    over the new segment's slots; by overlap alone when they hold none): a split's pieces share it
    by their rows, a merge sums its parts'. A new segment overlapping a resident one is a resident
    candidate (admitted again while the memory holds it, ``PartitionPolicy.warm``). ``None`` when
    the two cannot be matched slot for slot (another key domain, slot lengths not multiples)."""
    lo, ln = old.slot_length, new.slot_length
    fine, coarse = min(lo, ln), max(lo, ln)
    if old.key_domain != new.key_domain or coarse % fine:
        return None
    atoms = -(-max(old.n_slots * lo, new.n_slots * ln) // fine)
    overlap: dict[tuple[int, int], int] = {}
    for a in range(atoms):
        pair = (old.segment_of_position(a * fine), new.segment_of_position(a * fine))
        overlap[pair] = overlap.get(pair, 0) + 1
    atoms_of: dict[int, int] = {}
    for (_, n), count in overlap.items():
        atoms_of[n] = atoms_of.get(n, 0) + count
    shares: dict[int, list[tuple[int, float, int]]] = {}
    for (o, n), count in sorted(overlap.items()):
        shares.setdefault(o, []).append((n, rows.get(n, 0) * count / atoms_of[n], count))
    out: dict[int, float] = {}
    for o, value in sorted(frequency.items()):
        parts = shares.get(o, [])
        by_rows = sum(r for _, r, _ in parts)
        total = by_rows or sum(c for _, _, c in parts)
        for n, r, c in parts:
            out[n] = out.get(n, 0.0) + value * (r if by_rows else c) / total
    was_resident = set(resident)
    return out, sorted({n for (o, n) in overlap if o in was_resident})
