"""The offline floor of segment fetches: Belady's MIN over a trace of segment requests.

A join that must hold a tuple's segment in memory when it joins it, with ``capacity`` bytes of
join memory, fetches at least this many segments if it knew the whole trace in advance (evict
the resident segment whose next request is furthest in the future). Exact for equal segment
sizes; with unequal sizes it is the classic furthest-next-use rule, a near-optimal floor.
The request trace is each micro-batch's distinct segments, in batch order.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Mapping, Sequence


def belady_fetches(batches: Sequence[Iterable[int]], sizes: Mapping[int, int], capacity: int) -> int:
    requests = [seg for batch in batches for seg in sorted(set(batch))]
    # next_use[i]: index of the next request of requests[i]'s segment after i (inf if none).
    next_use = [0] * len(requests)
    last: dict[int, int] = {}
    for i in range(len(requests) - 1, -1, -1):
        next_use[i] = last.get(requests[i], len(requests) + 1)
        last[requests[i]] = i
    resident: dict[int, int] = {}  # segment -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, segment), lazily invalidated
    used = fetches = 0
    for i, seg in enumerate(requests):
        size = sizes.get(seg, 0)
        if seg not in resident:
            fetches += 1
            if size > capacity:
                continue  # streamed through, never resident
            while used + size > capacity:
                nu, victim = heapq.heappop(heap)
                if resident.get(victim) == -nu:
                    del resident[victim]
                    used -= sizes.get(victim, 0)
            used += size
        resident[seg] = next_use[i]
        heapq.heappush(heap, (-next_use[i], seg))
    return fetches
