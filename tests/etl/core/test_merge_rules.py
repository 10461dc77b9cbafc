"""The entity table's MERGE as rules (etl.core.merge_rules), pure: every rule matches on the key,
which merge-on-read relies on to touch only the changes' keys' rows."""

import pytest

from etl.core import merge_rules


@pytest.mark.parametrize("inferred", [False, True])
@pytest.mark.parametrize("type1", [(), ("email",)])
def test_every_rule_set_matches_on_the_key_and_states_each_clause(inferred, type1):
    rules = merge_rules.history(["surrogate_key", "email", "valid_to"], inferred, type1)
    assert rules.condition.startswith("t.surrogate_key = s.surrogate_key AND ")
    assert (rules.delete_when is not None) == inferred
    assert set(rules.update_set) >= {"valid_to", "is_current", "updated_batch_seq", *type1}
    assert rules.insert_values == {"surrogate_key": "s.`surrogate_key`", "email": "s.`email`", "valid_to": "s.`valid_to`"}
    assert merge_rules.CURRENT.update_all and merge_rules.CURRENT.condition == "t.surrogate_key = s.surrogate_key"


def test_a_rule_that_does_not_match_on_the_key_is_refused():
    with pytest.raises(ValueError, match="must start with t.surrogate_key = s.surrogate_key"):
        merge_rules.MergeRules(condition="t.natural_key = s.natural_key", update_when="true")
