"""The partitioned join's wait buffer and probe threshold derived from its memory, as papers/004
§6.4.1 sizes its own (Table 6.2), so that a user who sets ``memory_budget`` gets the rest.

The thesis gives the join 40 MB: a 4 MB wait buffer, a read buffer for the segment being probed
(at most ``2*theta``, 2 MB) and 34 MB for resident segments; ``memory_budget`` is that last part
(what ``PartitionPolicy`` holds resident segments in, counted as key_map's rows of ``r_bytes``, its
stored bytes a row: docs/decisions/sizes-by-rows.md). So:

- ``wait_buffer_tuples``: the wait buffer takes Table 6.2's 4 bytes for every 34 of resident
  memory, in waiting tuples of ``s_bytes`` each (an update's stored bytes, the unit the memory is
  counted in);
- the segments the memory holds: ``memory_budget`` over key_map's average segment, as the run's
  start finds it (a range segment holds ``theta`` to ``2*theta`` rows; Table 6.2's 1.5 MB);
- ``n_invoke``: the wait buffer's share per segment the memory holds. The thesis gives no rule;
  this one gives its 3,000 from its other sizes and moves with them, where a fixed threshold that
  no segment's share reaches leaves every probe to an overflow;
- ``n_part``, key_map's segments when its layout is first made, when set to 0 (the default is
  the fixed 64): the rows ``key_domain`` gives key_map (a row per key and declared source) over an
  average range segment, 1.5 ``theta`` rows (the thesis: "partitions of length between 1-2 MB"),
  at most 1,024, so that a hash segment has a range segment's size instead of whatever a fixed
  count makes of the table.

Table 6.2's numbers give 65,536 tuples, 22 segments held, an ``n_invoke`` of 2,978 (the thesis
sets 3,000) and, for its 200 MB relation of 1,638,400 rows, 134 segments:
``tests/etl/core/test_sizing.py``. A setting given explicitly wins over its derivation. A run
keeps the sizes its start derived (its snapshot), so a restart uses the run's own; a warehouse
keeps the layout its first load made (``etl.io.layout_store``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

MB = 1 << 20
# Table 6.2 and the text around it.
THESIS_WAIT_BYTES = 4 * MB
THESIS_RESIDENT_BYTES = 40 * MB - THESIS_WAIT_BYTES - 2 * MB  # less the read buffer: one segment of at most 2*theta
THESIS = dict(memory_budget=THESIS_RESIDENT_BYTES, theta=MB // 128, s_bytes=64, r_bytes=128, n_invoke=3000)
# What a run an older version began probed with: the fixed defaults before sizes were derived.
FIXED_N_INVOKE, FIXED_WAIT_BUFFER_TUPLES = 3000, 65536
# The most segments a derived n_part gives: the full-size runs' 1,024 (a Delta partition each).
MAX_DERIVED_SEGMENTS = 1024


@dataclass(frozen=True)
class JoinSizes:
    wait_buffer_tuples: int
    resident_segments: int  # average segments the memory holds (at least 1)
    n_invoke: int


def segment_bytes(theta: int, r_bytes: float, rows: int = 0, segments: int = 0) -> float:
    """key_map's average segment in bytes: its rows over its segments, or, with none yet, a range
    segment of ``theta``..``2*theta`` rows (1.5 ``theta`` on average) of ``r_bytes``."""
    return (rows / segments if rows and segments else 1.5 * theta) * r_bytes


def segments_for(rows: int, theta: int) -> int:
    """key_map's segments for ``rows`` rows: one per 1.5 ``theta`` of them, the average of a range
    segment's ``theta``..``2*theta`` rows, at most ``MAX_DERIVED_SEGMENTS`` (each is a Delta
    partition)."""
    if rows <= 0 or theta <= 0:
        raise ValueError("need rows and theta > 0")
    return min(MAX_DERIVED_SEGMENTS, max(1, math.ceil(rows / (1.5 * theta))))


def configured_n_part(cfg) -> int:
    """``cfg.n_part`` when above 0; with 0, derived from the rows ``key_domain`` gives key_map (a
    row per key and declared source, ``sources``; one source when any is accepted) and ``theta``."""
    if cfg.n_part > 0:
        return cfg.n_part
    return segments_for(cfg.key_domain * max(1, len(cfg.sources)), cfg.theta)


def wait_buffer_for(memory_budget: int, s_bytes: float) -> int:
    """Table 6.2's wait buffer for ``memory_budget`` bytes of resident memory, in updates of
    ``s_bytes``: 4 bytes for every 34."""
    return max(1, int(memory_budget * THESIS_WAIT_BYTES // THESIS_RESIDENT_BYTES // s_bytes))


def join_sizes(memory_budget: int, s_bytes: float, segment: float, wait_buffer_tuples: int = 0,
               n_invoke: int = 0) -> JoinSizes:
    """The sizes for ``memory_budget`` bytes of resident memory and segments of ``segment`` bytes;
    ``wait_buffer_tuples`` and ``n_invoke`` as given when positive (a user's setting), else derived."""
    if memory_budget <= 0 or s_bytes <= 0 or segment <= 0:
        raise ValueError("need memory_budget, s_bytes and the segment size > 0")
    if wait_buffer_tuples <= 0:
        wait_buffer_tuples = wait_buffer_for(memory_budget, s_bytes)
    resident = max(1, int(memory_budget // segment))
    if n_invoke <= 0:
        n_invoke = max(1, wait_buffer_tuples // resident)
    return JoinSizes(wait_buffer_tuples, resident, n_invoke)


def configured_sizes(cfg, segment: float) -> JoinSizes:
    """``cfg``'s sizes (``EtlConfig``: its ``memory_budget``, ``s_bytes`` and the two settings a
    user may give), for key_map segments of ``segment`` bytes."""
    return join_sizes(cfg.memory_budget, cfg.s_bytes, segment, cfg.wait_buffer_tuples, cfg.n_invoke)


def run_sizes(snapshot: Mapping, cfg) -> tuple[int, int]:
    """``(n_invoke, wait_buffer_tuples)`` of a run: as its start derived and kept them in its
    snapshot; a snapshot an older version wrote has none, and its run goes on with what that
    version probed with (the settings given, else the fixed defaults)."""
    if "n_invoke" in snapshot:
        return int(snapshot["n_invoke"]), int(snapshot["wait_buffer_tuples"])
    return cfg.n_invoke or FIXED_N_INVOKE, cfg.wait_buffer_tuples or FIXED_WAIT_BUFFER_TUPLES
