"""The partitioned join's wait buffer and probe threshold derived from its memory, as papers/004
§6.4.1 sizes its own (Table 6.2), so that a user who sets ``memory_budget`` gets the rest.

The thesis gives the join 40 MB: a 4 MB wait buffer, a read buffer for the segment being probed
(at most ``2*theta``, 2 MB) and 34 MB for resident segments; ``memory_budget`` is that last part
(what ``PartitionPolicy`` holds resident segments in). So:

- ``wait_buffer_tuples``: the wait buffer takes Table 6.2's 4 bytes for every 34 of resident
  memory, in waiting tuples of ``s_bytes`` each;
- the segments the memory holds: ``memory_budget`` over a range segment's average size (it holds
  ``theta`` to ``2*theta`` rows: ``1.5*theta`` rows of ``r_bytes``, key_map's stored bytes per row
  measured at the run's start);
- ``n_invoke``: the wait buffer's share per segment the memory holds. The thesis gives no rule;
  this one gives its 3,000 from its other sizes and moves with them, where a fixed threshold that
  no segment's share reaches leaves every probe to an overflow.

Table 6.2's numbers give 65,536 tuples, 22 segments and an ``n_invoke`` of 2,978 (the thesis sets
3,000): ``tests/etl/core/test_sizing.py``. A setting given explicitly wins over its derivation."""

from __future__ import annotations

from dataclasses import dataclass

MB = 1 << 20
# Table 6.2 and the text around it.
THESIS_WAIT_BYTES = 4 * MB
THESIS_RESIDENT_BYTES = 40 * MB - THESIS_WAIT_BYTES - 2 * MB  # less the read buffer: one segment of at most 2*theta
THESIS = dict(memory_budget=THESIS_RESIDENT_BYTES, theta=MB // 128, s_bytes=64, r_bytes=128, n_invoke=3000)


@dataclass(frozen=True)
class JoinSizes:
    wait_buffer_tuples: int
    resident_segments: int  # range segments of 1.5*theta rows the memory holds (at least 1)
    n_invoke: int


def join_sizes(memory_budget: int, theta: int, s_bytes: float, r_bytes: float,
               wait_buffer_tuples: int = 0, n_invoke: int = 0) -> JoinSizes:
    """The sizes for ``memory_budget`` bytes of resident memory; ``wait_buffer_tuples`` and
    ``n_invoke`` as given when positive (a user's setting), derived when 0."""
    if memory_budget <= 0 or theta <= 0 or s_bytes <= 0 or r_bytes <= 0:
        raise ValueError("need memory_budget, theta, s_bytes and r_bytes > 0")
    if wait_buffer_tuples <= 0:
        wait_buffer_tuples = max(1, int(memory_budget * THESIS_WAIT_BYTES // THESIS_RESIDENT_BYTES // s_bytes))
    resident = max(1, int(memory_budget // (1.5 * theta * r_bytes)))
    if n_invoke <= 0:
        n_invoke = max(1, wait_buffer_tuples // resident)
    return JoinSizes(wait_buffer_tuples, resident, n_invoke)


def configured_sizes(cfg, r_bytes: float) -> JoinSizes:
    """``cfg``'s sizes (``EtlConfig``: its ``memory_budget``, ``theta``, ``s_bytes`` and the two
    settings a user may give), for key_map rows of ``r_bytes``."""
    return join_sizes(cfg.memory_budget, cfg.theta, cfg.s_bytes, r_bytes, cfg.wait_buffer_tuples, cfg.n_invoke)
