"""What the always-on loader keeps in ``<meta_root>/stream/`` beside its run states, without Spark."""

from __future__ import annotations

import subprocess
import sys

import pytest

from etl.core.config import EtlConfig
from etl.io.lock import WarehouseLocked
from etl.io.stream_status import STREAM_LOCK, hold_stream_lock, stream_dir
from etl.stream import check_stream_start
from tests.helpers import ROOT


def test_one_stream_per_warehouse_refused_in_a_second_before_spark_and_free_once_the_first_ends(tmp_path):
    """A second ``etl stream`` would ingest the same pieces: refused, naming the first, by the check
    the CLI runs before Spark starts, for as long as the first process lives, however it ends."""
    cfg = EtlConfig(warehouse_root=str(tmp_path / "wh"), runs_root=str(tmp_path / "runs"))
    first = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from etl.core.config import EtlConfig; from etl.io.stream_status import hold_stream_lock\n"
        f"held = hold_stream_lock(EtlConfig(warehouse_root={str(tmp_path / 'wh')!r}))\n"
        "print('held', flush=True); time.sleep(600)")], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(WarehouseLocked, match=f"another etl stream runs on this warehouse \\(pid {first.pid} on "):
            check_stream_start(cfg, None)
        with pytest.raises(WarehouseLocked, match="stop it first"):
            hold_stream_lock(cfg)
    finally:
        first.kill()  # as a lost process ends: no clean release
        first.wait()
    held = hold_stream_lock(cfg)
    try:
        assert (stream_dir(cfg) / STREAM_LOCK).read_text().startswith("pid ")
    finally:
        held.close()
    check_stream_start(cfg, None)  # no stream, no warehouse: nothing to refuse
