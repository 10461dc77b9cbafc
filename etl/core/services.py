"""Table services between batches (issue 47): what the load compacts after a coalesced apply,
decided from the table's own state, as Hudi's and Paimon's inline services are, instead of a
weekly maintenance run that an always-on loader, which never gives up the lock, would never let in.

With deletion vectors (at full size) each coalesced MERGE of ``key_map`` adds files to the
segments it touches and marks the rows it changed in the old ones; a read or a MERGE of a segment
then opens all of them. (Below ``deletion_vectors_from_bytes`` a MERGE rewrites every file it
touches instead, and a segment's count grows little.) The
service keeps every segment at no more than ``key_map_files_per_segment`` files: a segment above
it is compacted into one. Planned from the files the table lists now, not from a record of past
compactions: the count is what the bound is about, and it is right after any crash."""

from __future__ import annotations

import re
from typing import Iterable, Mapping

_SEGMENT = re.compile(r"(?:^|/)segment_id=(-?\d+)/")


def files_per_segment(paths: Iterable[str]) -> dict[int, int]:
    """Data files per ``segment_id`` partition, from the paths a table's current version lists
    (a path outside any segment's directory is not counted)."""
    out: dict[int, int] = {}
    for path in paths:
        found = _SEGMENT.search(path)
        if found:
            segment = int(found.group(1))
            out[segment] = out.get(segment, 0) + 1
    return out


def segments_to_compact(files: Mapping[int, int], max_files: int) -> list[int]:
    """The segments holding more than ``max_files`` files (``0``: the service is off), in order."""
    if max_files <= 0:
        return []
    return sorted(segment for segment, n in files.items() if n > max_files)
