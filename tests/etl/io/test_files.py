import json
import os

import pytest

from etl.io import files


def test_a_json_file_is_replaced_whole_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "a" / "b" / "state.json"
    files.write_json(path, {"z": 1, "when": tmp_path})
    assert json.loads(path.read_text()) == {"z": 1, "when": str(tmp_path)}

    def crash(src, dst):
        raise OSError("killed before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="killed before the rename"):
        files.write_json(path, {"z": 2})
    assert json.loads(path.read_text()) == {"z": 1, "when": str(tmp_path)}  # the old file, whole
    monkeypatch.undo()
    files.write_json(path, {"z": 3}, indent=None)
    assert path.read_text() == '{"z": 3}' and sorted(p.name for p in path.parent.iterdir()) == ["state.json"]
