"""The entity table's MERGE as rules (pure Python: SQL over ``t``, the table, and ``s``, the
changes): the one statement of what applying logged batches does to ``<entity>_current`` or
``<entity>_history``. Delta runs them (``etl.io.delta_merges``); a reader of the logged tail runs
the same rules on read (``etl.transforms.merge_on_read``, ``etl.fresh``), so the two cannot
drift apart (tests/etl/load/test_apply.py runs both on every MERGE case). The in-memory tables of
the protocol tests run their own row-by-row version (``etl.core.row_merges``), held to the same
expected rows by the same tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from etl.core.row_merges import CLOSE, VERSION


@dataclass(frozen=True)
class MergeRules:
    """A MERGE with Delta's clause order: a matched row is deleted when ``delete_when`` holds, else
    updated when ``update_when`` holds (every column from ``s`` with ``update_all``, else
    ``update_set``'s); a change no row matched is inserted when ``insert_when`` holds (every column
    from ``s`` when ``insert_values`` is empty)."""

    condition: str  # always requires t.<key> = s.<key>
    update_when: str
    key: str = "surrogate_key"
    update_all: bool = False
    update_set: dict[str, str] = field(default_factory=dict)
    delete_when: str | None = None
    insert_when: str | None = None
    insert_values: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # merge_on_read touches only the rows of the changes' keys: every match must require the key.
        if not self.condition.startswith(f"t.{self.key} = s.{self.key}"):
            raise ValueError(f"a MERGE's condition must start with t.{self.key} = s.{self.key}: {self.condition}")


CURRENT = MergeRules(
    condition="t.surrogate_key = s.surrogate_key",
    update_when="t.updated_batch_seq < s.updated_batch_seq",  # idempotent: only a newer batch changes a row
    update_all=True,
)

HISTORY_CONDITION = (
    f"t.surrogate_key = s.surrogate_key AND ((s._kind = '{VERSION}' AND t.source_seq = s.source_seq) OR "
    f"(s._kind = '{CLOSE}' AND t.is_current AND t.updated_batch_seq < s.updated_batch_seq))"
)


def type1_history_condition(type1: tuple[str, ...]) -> str:
    """With type1 columns a key's ``close`` row reaches its open version (closed only when the
    batch made a version) and every stored version whose type1 values differ from the row's, so a
    batch rewrites only the versions it changes."""
    differs = " OR ".join(f"NOT (t.`{c}` <=> s.`{c}`)" for c in type1)
    return (f"t.surrogate_key = s.surrogate_key AND ((s._kind = '{VERSION}' AND t.source_seq = s.source_seq) OR "
            f"(s._kind = '{CLOSE}' AND t.updated_batch_seq < s.updated_batch_seq AND (t.is_current OR {differs})))")


def history(columns: list[str], inferred: bool, type1: tuple[str, ...]) -> MergeRules:
    """``transforms.history.history_changes`` into ``<entity>_history``: the batch's versions
    inserted, each key's open version closed where they start, type1 columns set on every version
    of the batch's keys, an inferred member's placeholder deleted by the first real version.
    Idempotent: a version already there matches itself, and a row the batch changed, made or
    left as it wanted it is not matched by its ``close`` row."""
    if type1:
        close = {
            "valid_to": "CASE WHEN t.is_current AND s._closes THEN s.valid_from ELSE t.valid_to END",
            "is_current": "t.is_current AND NOT s._closes",
            **{c: f"s.`{c}`" for c in type1},
            "updated_batch_seq": "s.updated_batch_seq",
        }
    else:
        close = {"valid_to": "s.valid_from", "is_current": "false", "updated_batch_seq": "s.updated_batch_seq"}
    return MergeRules(
        condition=type1_history_condition(type1) if type1 else HISTORY_CONDITION,
        delete_when=f"s._kind = '{CLOSE}' AND t.is_inferred" if inferred else None,
        update_when=f"s._kind = '{CLOSE}'",
        update_set=close,
        insert_when=f"s._kind = '{VERSION}'",
        insert_values={c: f"s.`{c}`" for c in columns},
    )
