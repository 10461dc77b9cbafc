"""The gate run after every load (DESIGN.md §3 and §6).

- ``key_map``: keys never null; one surrogate key per natural key and one natural key per
  surrogate key (DESIGN.md §3.2).
- the entity's table (``<name>_current``): one row per surrogate key; (``<name>_history``): one
  row per version of a surrogate key;
- ``<name>_history_validity`` (history entities): one row per surrogate key with its count of
  open versions (exactly 1), and of overlaps and gaps between consecutive versions (0 each);
- ``<name>_fact_references`` (facts): one row per reference with its count of dangling fact keys
  (keys its dimension's ``key_map`` does not hold): 0 each; and of the run's live fact rows whose
  member was deleted at the fact's event time (``deleted``): 0 each, a warning (severity
  ``warning``) unless ``strict_deleted_references`` makes it fail the gate (``critical``);
- ``run_conservation``: one row per counting identity of the run (updates in = sum of outcomes,
  and the identities between stages); ``expected`` must equal ``actual`` (DESIGN.md §3.1).

Factories, not instances: great_expectations is imported only when a suite is built.
"""

from __future__ import annotations

from etl.core.model import Entity, load_model

DEFAULT_ENTITY = load_model().entity()


def key_map_suite() -> list:
    import great_expectations.expectations as gxe

    return [
        *[gxe.ExpectColumnValuesToNotBeNull(column=c) for c in ("source_id", "natural_key", "surrogate_key", "segment_id")],
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["source_id", "natural_key"]),
        gxe.ExpectColumnValuesToBeUnique(column="surrogate_key"),
    ]


def entity_table_suite(entity: Entity):
    def build() -> list:
        import great_expectations.expectations as gxe

        # A fact's references too: every fact row has each of its dimension keys.
        not_null = ["surrogate_key", "source_id", "natural_key", *(c.name for c in entity.key_columns_stored),
                    *(r.name for r in entity.references)]
        if entity.history == "current":
            unique = [gxe.ExpectColumnValuesToBeUnique(column="surrogate_key"),
                      gxe.ExpectCompoundColumnsToBeUnique(column_list=["source_id", "natural_key"])]
        else:
            unique = [gxe.ExpectCompoundColumnsToBeUnique(column_list=["surrogate_key", "source_seq"])]
        return [*[gxe.ExpectColumnValuesToNotBeNull(column=c) for c in not_null], *unique]

    return build


def history_validity_suite() -> list:
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToBeBetween(column="open_versions", min_value=1, max_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="last_open", min_value=1, max_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="overlaps", min_value=0, max_value=0),
        gxe.ExpectColumnValuesToBeBetween(column="gaps", min_value=0, max_value=0),
        gxe.ExpectColumnValuesToBeBetween(column="inverted", min_value=0, max_value=0),
    ]


def fact_references_suite(strict_deleted_references: bool = False):
    """No fact key dangling: each reference's count of fact rows whose key its dimension's
    ``key_map`` does not hold is 0. No live fact naming a member deleted at its event time either:
    a warning by default (a source may well send a sale of a product it retired), critical when
    the site says so."""
    def build() -> list:
        import great_expectations.expectations as gxe
        from great_expectations.expectations.metadata_types import FailureSeverity

        severity = FailureSeverity.CRITICAL if strict_deleted_references else FailureSeverity.WARNING
        return [
            gxe.ExpectColumnValuesToNotBeNull(column="dangling"),
            gxe.ExpectColumnValuesToBeBetween(column="dangling", min_value=0, max_value=0),
            gxe.ExpectColumnValuesToNotBeNull(column="deleted"),
            gxe.ExpectColumnValuesToBeBetween(column="deleted", min_value=0, max_value=0, severity=severity),
        ]

    return build


def run_conservation_suite() -> list:
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToNotBeNull(column="actual"),
        gxe.ExpectColumnPairValuesToBeEqual(column_A="expected", column_B="actual"),
    ]


def suites(entity: Entity, strict_deleted_references: bool = False) -> dict:
    """The suites of one entity's warehouse, by the frame each validates; a fact's references
    suite warns of deleted members, or fails on them when ``strict_deleted_references``."""
    out = {"key_map": key_map_suite, entity.table: entity_table_suite(entity)}
    if entity.history == "history":
        out[f"{entity.table}_validity"] = history_validity_suite
    if entity.is_fact:
        out[f"{entity.table}_references"] = fact_references_suite(strict_deleted_references)
    out["run_conservation"] = run_conservation_suite
    return out


SUITES = suites(DEFAULT_ENTITY)
