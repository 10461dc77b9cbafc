"""The live benchmark's mode settings, as a user writes them on the command line."""

from __future__ import annotations

import pytest

from benchmarks.stream_live import mode_settings


def test_a_mode_s_settings_are_typed_and_a_mistyped_one_is_refused_naming_the_choices():
    assert mode_settings(["micro_batch_seconds=20", "apply_interval_seconds=30", "sizes=derived"]) == {
        "micro_batch_seconds": 20, "apply_interval_seconds": 30.0, "sizes": "derived"}
    assert mode_settings([]) == {}
    with pytest.raises(SystemExit, match="window, derived"):
        mode_settings(["sizes=thesis"])
    with pytest.raises(SystemExit, match="name=value"):
        mode_settings(["wait_buffer_tuples=100"])
    with pytest.raises(SystemExit, match="name=value"):
        mode_settings(["sizes"])
    assert mode_settings(["apply_concurrently=false"]) == {"apply_concurrently": False}
    assert mode_settings(["max_wait_s=5"]) == {"max_wait_s": 5.0}
    with pytest.raises(SystemExit, match="true or false"):
        mode_settings(["apply_concurrently=no"])
    assert mode_settings(["memory_budget=41943040"]) == {"memory_budget": 41943040}
