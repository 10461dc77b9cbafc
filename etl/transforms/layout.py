"""The layouts' Spark twin: a natural key's slot and segment as Spark columns, computed exactly as
``etl.core.layout`` computes them in Python."""

from __future__ import annotations

from pyspark.sql import functions as F

from etl.core.layout import NUMERIC_KEY, HashLayout, SlotArray
from etl.transforms.columns import int_array


def segment_column(layout):
    """A function (source_id col, natural_key col) -> Spark column of the key's segment id."""
    if isinstance(layout, HashLayout):
        return lambda source_id, natural_key: F.pmod(F.xxhash64(natural_key), F.lit(layout.n_part)).cast("int")

    slots = []  # the slot array's literal, built at the first call (a session is up) and kept

    def segment_of(source_id, natural_key):
        if not slots:
            slots.append(int_array(layout.slots))
        return F.element_at(slots[0], slot_column(layout, natural_key) + 1).cast("int")

    return segment_of


def slot_column(layout: SlotArray, natural_key):
    """Spark column of the key's slot in a range layout (the slot array's index)."""
    position = F.when(natural_key.rlike(NUMERIC_KEY.pattern), natural_key.cast("long")).otherwise(
        F.pmod(F.xxhash64(natural_key), F.lit(layout.key_domain))
    )
    return F.least(F.floor(position / F.lit(layout.slot_length)), F.lit(layout.n_slots - 1)).cast("int")
