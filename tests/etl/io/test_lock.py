import json
import os
import subprocess
import sys

import pytest

from etl.core.config import load_config
from etl.io.lock import LoadLock, WarehouseLocked
from tests.helpers import ROOT


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

    from etl.core.interval import Interval
    from etl.load.loader import Loader

    t0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
    loader = Loader(spark, cfg)
    with LoadLock(cfg.meta_path, "the scheduled run"):
        with pytest.raises(WarehouseLocked, match="the scheduled run"):
            loader.load(Interval(t0, t0 + timedelta(minutes=1)))


def _age(path, seconds):
    import time as _t

    past = _t.time() - seconds
    os.utime(path, (past, past))


@pytest.mark.parametrize("content", [b"", b'{"pid": 12', b"not json at all", b"[1, 2]", b"\xff\xfe"])
def test_an_empty_or_unparsable_lock_does_not_block_forever(tmp_path, content):
    lock = tmp_path / "load.lock"
    lock.write_bytes(content)
    with pytest.raises(WarehouseLocked, match="unparsable"):  # young: maybe a writer of an older version
        with LoadLock(tmp_path, "me"):
            pass
    _age(lock, 60)
    with LoadLock(tmp_path, "me"):
        assert json.loads(lock.read_text())["owner"] == "me"
    assert not lock.exists()


@pytest.mark.parametrize("pid", ["abc", 10**30, -1, 0, None, 3.5, True])
def test_a_lock_with_a_nonsense_pid_is_taken_over_without_a_trace(tmp_path, pid):
    import socket

    lock = tmp_path / "load.lock"
    lock.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "owner": "hostile"}))
    with LoadLock(tmp_path, "me"):
        assert json.loads(lock.read_text())["owner"] == "me"


def test_a_lock_from_another_host_is_stale_only_once_it_stops_being_refreshed(tmp_path):
    lock = tmp_path / "load.lock"
    lock.write_text(json.dumps({"pid": 1, "host": "gone-host", "owner": "a load on gone-host"}))
    with pytest.raises(WarehouseLocked, match="gone-host"):
        with LoadLock(tmp_path, "me", stale_after=900):
            pass
    _age(lock, 901)
    with LoadLock(tmp_path, "me", stale_after=900):
        assert json.loads(lock.read_text())["owner"] == "me"


def test_the_holder_refreshes_its_lock_so_it_never_looks_stale(tmp_path):
    import time as _t

    with LoadLock(tmp_path, "long load", stale_after=2) as held:
        _age(held.path, 100)
        _t.sleep(1.5)  # the heartbeat runs every stale_after/4 = 0.5 s
        assert _t.time() - held.path.stat().st_mtime < 1.5
        with pytest.raises(WarehouseLocked, match="long load"):
            with LoadLock(tmp_path, "other", stale_after=2):
                pass


def test_a_pid_reused_by_another_program_does_not_hold_the_lock(tmp_path):
    import socket

    lock = tmp_path / "load.lock"
    # Our own pid, but a start time that is not ours: the recorded process is gone.
    lock.write_text(json.dumps({"pid": os.getpid(), "start": "1", "host": socket.gethostname(), "owner": "old"}))
    with LoadLock(tmp_path, "me"):
        assert json.loads(lock.read_text())["owner"] == "me"


def test_the_lock_is_created_atomically_and_never_half_written(tmp_path):
    """Created by linking a complete temp file: a reader sees no lock or a whole one."""
    import threading

    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                seen.append(json.loads((tmp_path / "load.lock").read_bytes()))
            except FileNotFoundError:
                pass

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(200):
            with LoadLock(tmp_path, f"load {i}"):
                pass
    finally:
        stop.set()
        t.join()
    assert seen and all("token" in s for s in seen)  # a JSON error would have raised in the reader
    assert [p.name for p in tmp_path.iterdir()] == ["load.last-holder"]  # no temp files left


def test_a_lock_taken_over_is_noticed_before_the_next_commit(tmp_path):
    with LoadLock(tmp_path, "me") as held:
        held.verify()
        (tmp_path / "load.lock").unlink()
        with LoadLock(tmp_path, "intruder"):
            with pytest.raises(WarehouseLocked, match="taken over by intruder"):
                held.verify()
        # leaving does not remove a lock that is not ours
    assert not (tmp_path / "load.lock").exists()


def test_unlock_removes_only_locks_whose_holder_is_gone_unless_forced(tmp_path):
    import socket

    from etl.io.lock import unlock

    assert "no lock" in unlock(tmp_path)
    with LoadLock(tmp_path, "running load"):
        with pytest.raises(WarehouseLocked, match="--force"):
            unlock(tmp_path)
    (tmp_path / "load.lock").write_text(json.dumps({"pid": 1, "host": "other-host", "owner": "far away"}))
    with pytest.raises(WarehouseLocked, match="another host"):
        unlock(tmp_path)
    assert "forced" in unlock(tmp_path, force=True) and not (tmp_path / "load.lock").exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "load.lock").write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(), "owner": "x"}))
    assert "is gone" in unlock(tmp_path)


def test_entities_load_under_their_own_locks(tmp_path):
    """One loader per entity, not per warehouse: a load of one entity holding its lock does not
    keep another entity's load from taking its own."""
    base = load_config(env={}, overrides={"model_file": str(ROOT / "examples" / "shop" / "model.toml"), "warehouse_root": str(tmp_path)})
    customer, product = base.for_entity("customer"), base.for_entity("product")
    assert customer.meta_path != product.meta_path
    with LoadLock(customer.meta_path, "load of customer"):
        with LoadLock(product.meta_path, "load of product"):
            pass
        with pytest.raises(WarehouseLocked):
            with LoadLock(customer.meta_path, "a second load of customer"):
                pass


def test_a_holder_learns_whether_anyone_held_the_lock_since_its_own_last_hold(tmp_path, monkeypatch):
    """What lets the always-on loader keep the state it read between its steps: the token of the
    holder before it, written as each holder takes the lock, including one killed while holding."""
    from etl.io.lock import HOLDER_NAME

    with LoadLock(tmp_path, "stream") as first:
        pass
    with LoadLock(tmp_path, "stream") as again:
        assert again.previous == first.token  # nobody in between
    killed = subprocess.run([sys.executable, "-c", (
        "import os, sys; from etl.io.lock import LoadLock\n"
        f"lock = LoadLock({str(tmp_path)!r}, 'a backfill', 900.0).__enter__()\n"
        "print(lock.token, flush=True); os._exit(9)")], capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == 9, killed.stderr
    with LoadLock(tmp_path, "stream") as third:  # takes over the dead holder's lock
        assert third.previous == killed.stdout.strip() != again.token
    (tmp_path / HOLDER_NAME).unlink()
    (tmp_path / HOLDER_NAME).mkdir()  # unreadable and unwritable: never taken for the loader's own
    with LoadLock(tmp_path, "stream") as fourth:
        assert fourth.previous is None
    (tmp_path / HOLDER_NAME).write_bytes(b"\xff\xfe garbled")  # read as unknown bytes, the lock still taken
    with LoadLock(tmp_path, "stream") as fifth:
        assert fifth.previous not in (None, fourth.token)
    # A holder that cannot write its token (a full disk) removes the one before, so the holder
    # after it does not find its own token there and think nobody held the lock in between.
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with LoadLock(tmp_path, "a backfill") as full:
        assert full.previous is None
    monkeypatch.setattr(os, "replace", real_replace)
    with LoadLock(tmp_path, "stream") as sixth:
        assert sixth.previous is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [HOLDER_NAME]  # no lock, no temp file left


def test_an_ingest_into_an_object_store_waits_for_maintenance_to_release_the_lock(tmp_path):
    """Delta's S3 log store lets one driver at a time commit to a table: the ingest, whose tables
    maintenance compacts under the lock, takes it too there (before reading anything)."""
    from etl import jobs
    from etl.core.config import EtlConfig
    from tests.helpers import T0
    from etl.core.interval import Interval
    from datetime import timedelta

    cfg = EtlConfig(warehouse_root="s3a://bucket/wh", meta_root=str(tmp_path / "meta"),
                    landing_root=str(tmp_path / "landing"), runs_root=str(tmp_path / "runs"))
    (tmp_path / "meta").mkdir()
    with LoadLock(cfg.meta_path, "maintenance (optimize)"):
        with pytest.raises(WarehouseLocked, match="maintenance"):
            jobs.ingest(None, cfg, Interval(T0, T0 + timedelta(minutes=5)))


def test_an_ingest_s_lock_leaves_the_last_holder_s_token_so_the_stream_keeps_its_state(tmp_path):
    """The always-on loader keeps its state between pieces only when nobody held the lock in
    between (its token still there); an ingest's lock (object stores) changes nothing it keeps."""
    with LoadLock(tmp_path, "stream's load step") as stream:
        pass
    with LoadLock(tmp_path, "ingest of pieces", records_holder=False):
        pass
    with LoadLock(tmp_path, "stream's next load step") as again:
        assert again.previous == stream.token
    with LoadLock(tmp_path, "maintenance"):
        pass
    with LoadLock(tmp_path, "stream's next load step") as after_maintenance:
        assert after_maintenance.previous != again.token
