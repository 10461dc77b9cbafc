import json
import os
import subprocess
import sys

import pytest

from etl.lock import LoadLock, WarehouseLocked


def test_second_loader_fails_fast_naming_the_holder(tmp_path):
    with LoadLock(tmp_path, "load of run A"):
        with pytest.raises(WarehouseLocked, match="load of run A"):
            with LoadLock(tmp_path, "load of run B"):
                pass
    with LoadLock(tmp_path, "load of run B"):  # free again once the first is done
        pass


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = tmp_path / "load.lock"
    import socket

    lock.write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(), "owner": "crashed"}))
    with LoadLock(tmp_path, "me"):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


def test_loader_refuses_while_locked(spark, cfg):
    from datetime import datetime, timedelta, timezone

    from etl.ingest import Interval
    from etl.load import Loader

    t0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
    loader = Loader(spark, cfg)
    with LoadLock(cfg.meta_path, "the scheduled run"):
        with pytest.raises(WarehouseLocked, match="the scheduled run"):
            loader.load(Interval(t0, t0 + timedelta(minutes=1)))
