"""Column expressions whose cost does not grow with their literals.

A column built in Python costs one Py4J round trip per literal: ``F.col("segment_id").isin(...)``
of 900 segment ids took 0.5-0.65 s, and the range layout's slot array of 1,024 literals 0.45 s,
each time a step built one (several a step at 20 M keys and 1,024 segments). The same expression
as SQL text is one call, parsed by the JVM in about a millisecond, and plans the same."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F


def ints_in(column: str, values: Iterable[int]) -> Column:
    """``column IN (values)``, as ``F.col(column).isin(values)``; no values: false."""
    ints = sorted({int(v) for v in values})
    if not ints:
        return F.lit(False)
    return F.expr(f"`{column}` IN ({', '.join(map(str, ints))})")


def int_array(values: Iterable[int]) -> Column:
    """An array literal of ``values``, in their order, as ``F.array(*map(F.lit, values))``."""
    return F.expr(f"array({', '.join(str(int(v)) for v in values)})")


def int_map(pairs: Iterable[tuple[int, int]]) -> Column:
    """A map literal of int ``pairs`` (key, value), as ``F.create_map`` of their literals."""
    items = [str(int(x)) for pair in pairs for x in pair]
    return F.expr(f"map({', '.join(items)})")
