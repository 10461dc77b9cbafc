"""The gate run after every load (DESIGN.md §3 and §6).

- ``key_map``: keys never null; one surrogate key per natural key and one natural key per
  surrogate key (DESIGN.md §3.2).
- ``customer_current``: one row per surrogate key.
- ``run_conservation``: one row per counting identity of the run (updates in = sum of outcomes,
  and the identities between stages); ``expected`` must equal ``actual`` (DESIGN.md §3.1).

Factories, not instances: great_expectations is imported only when a suite is built.
"""

from __future__ import annotations


def key_map_suite() -> list:
    import great_expectations.expectations as gxe

    return [
        *[gxe.ExpectColumnValuesToNotBeNull(column=c) for c in ("source_id", "natural_key", "surrogate_key", "segment_id")],
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["source_id", "natural_key"]),
        gxe.ExpectColumnValuesToBeUnique(column="surrogate_key"),
    ]


def customer_current_suite() -> list:
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToNotBeNull(column="surrogate_key"),
        gxe.ExpectColumnValuesToBeUnique(column="surrogate_key"),
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["source_id", "natural_key"]),
    ]


def run_conservation_suite() -> list:
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToNotBeNull(column="actual"),
        gxe.ExpectColumnPairValuesToBeEqual(column_A="expected", column_B="actual"),
    ]


SUITES = {
    "key_map": key_map_suite,
    "customer_current": customer_current_suite,
    "run_conservation": run_conservation_suite,
}
