"""A MERGE read instead of written (pure DataFrame -> DataFrame): the table as ``rules``
(``etl.core.merge_rules``, the rules Delta's MERGE runs) would leave it after merging
``changes``, without writing it. Hudi calls reading a table this way merge-on-read."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl.core.merge_rules import MergeRules


def _holds(sql: str | None):
    """A clause's condition as the MERGE takes it: a null is false; no condition is true."""
    return F.lit(True) if sql is None else F.coalesce(F.expr(sql), F.lit(False))


def merge_on_read(table: DataFrame, changes: DataFrame, rules: MergeRules) -> DataFrame:
    """Rows no change matches stay; a matched row is dropped, updated or kept as the first clause
    that holds says; a change that matched no row is inserted when its insert clause holds. As in
    Delta, each row is matched against the table as it was. One difference, for an input the load
    never makes: a table row matched by two changes is an error in Delta and two rows here."""
    # Every rule matches on the key (``MergeRules.key``): the rows of the changes' keys, found by a
    # broadcast semi-join, are the only ones the rules can touch; the rest pass through unjoined.
    keys = F.broadcast(changes.select(rules.key))
    untouched = table.join(keys, rules.key, "left_anti")
    touched = table.join(keys, rules.key, "left_semi")
    t, s = touched.alias("t"), F.broadcast(changes).alias("s")
    condition = F.expr(rules.condition)
    fields = table.schema.fields
    kept = t.join(s, condition, "left_anti")
    matched = t.join(s, condition, "inner")
    if rules.delete_when:
        matched = matched.where(~_holds(rules.delete_when))
    update = _holds(rules.update_when)

    def updated(name: str):
        if rules.update_all:
            return F.col(f"s.`{name}`")
        return F.expr(rules.update_set[name]) if name in rules.update_set else F.col(f"t.`{name}`")

    matched = matched.select(*[F.when(update, updated(f.name)).otherwise(F.col(f"t.`{f.name}`")).cast(f.dataType).alias(f.name)
                               for f in fields])
    inserted = changes.alias("s").join(F.broadcast(t), condition, "left_anti").where(_holds(rules.insert_when)).select(*[
        (F.expr(rules.insert_values[f.name]) if rules.insert_values else F.col(f"s.`{f.name}`")).cast(f.dataType).alias(f.name)
        for f in fields])
    kept = kept.select(*[F.col(f"t.`{f.name}`").alias(f.name) for f in fields])
    return untouched.unionByName(kept).unionByName(matched).unionByName(inserted)
