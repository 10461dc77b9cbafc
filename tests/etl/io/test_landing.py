"""The landing zone read strictly (etl.io.landing), without Spark: only exact landing files in their
own folders are data; everything else is reported; unreadable data stops the run."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from etl.io.landing import LandingError, compare, file_digest, fingerprint, landing_file, scan_landing

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
END = T0 + timedelta(minutes=2)


def put(root: Path, source: str = "crm", minute: datetime = T0, text: str = "{}\n") -> Path:
    path = landing_file(root, source, minute)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def without_dac_override(cmd: list[str]) -> list[str]:
    """Run ``cmd`` so that file permissions apply to it even as root (root reads everything)."""
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd] if os.geteuid() == 0 else cmd


def test_only_exact_names_in_their_own_folders_are_landing_files(tmp_path):
    good = put(tmp_path)
    hour = good.parent
    for name in ("backup-updates-20261122T0100.jsonl", "copy of updates-20261122T0100.jsonl",
                 "updates-20261122T0100.jsonl.tmp", ".updates-20261122T0100.jsonl.swp", "updates-20261122T0100.json"):
        (hour / name).write_text("{}\n")
    (hour / "updates-20261122T0160.jsonl").write_text("{}\n")  # minute 60 does not exist
    misplaced = hour / "updates-20261122T0201.jsonl"  # a file of hour 02 in hour 01's folder
    misplaced.write_text("{}\n")
    (tmp_path / "updates-20261122T0100.jsonl").write_text("{}\n")  # outside any source folder
    (tmp_path / "source_id=crm" / "stray.txt").write_text("x")
    scan = scan_landing(tmp_path, T0, END)
    assert [f.name for f in scan.files] == ["source_id=crm/arrival_date=2026-11-22/arrival_hour=01/updates-20261122T0100.jsonl"]
    reasons = {s.name.rsplit("/", 1)[-1]: s.reason for s in scan.skipped}
    assert set(reasons) == {
        "backup-updates-20261122T0100.jsonl", "copy of updates-20261122T0100.jsonl", "updates-20261122T0100.jsonl.tmp",
        ".updates-20261122T0100.jsonl.swp", "updates-20261122T0100.json", "updates-20261122T0160.jsonl",
        "updates-20261122T0201.jsonl", "updates-20261122T0100.jsonl", "stray.txt",
    }
    assert reasons["updates-20261122T0201.jsonl"].startswith("misplaced")
    assert reasons["updates-20261122T0100.jsonl"] == "outside any source_id=<source> folder"
    # The misplaced file is data of hour 02's run only where it belongs: there it is not found.
    assert scan_landing(tmp_path, T0 + timedelta(hours=1), END + timedelta(hours=1)).files == []


def test_directories_fifos_and_dangling_links_with_landing_names_are_skipped(tmp_path):
    put(tmp_path, minute=T0)
    hour = landing_file(tmp_path, "crm", T0).parent
    (hour / "updates-20261122T0101.jsonl").mkdir()
    fifo = landing_file(tmp_path, "web", T0)
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    dangling = landing_file(tmp_path, "erp", T0)
    dangling.parent.mkdir(parents=True)
    dangling.symlink_to(tmp_path / "nowhere")
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("{}\n")
    linked = landing_file(tmp_path, "ops", T0)
    linked.parent.mkdir(parents=True)
    linked.symlink_to(target)  # a link to a regular file is data
    scan = scan_landing(tmp_path, T0, END)
    assert sorted(f.source_id for f in scan.files) == ["crm", "ops"]
    assert sorted(s.reason for s in scan.skipped) == [
        "a FIFO, not a file", "a dangling symbolic link", "a directory, not a file",
        "outside any source_id=<source> folder",  # elsewhere.jsonl, at the top
    ]


def test_a_source_id_with_spaces_quotes_and_percent_is_taken_as_written(tmp_path):
    for source in ("north east", "o'brien\"s", "100%", "a%20b"):
        put(tmp_path, source=source)
    scan = scan_landing(tmp_path, T0, END)
    assert sorted(f.source_id for f in scan.files) == sorted(["north east", "o'brien\"s", "100%", "a%20b"])
    assert all(not os.path.isabs(f.name) and f.name.startswith("source_id=") for f in scan.files)


def test_file_names_do_not_depend_on_where_the_zone_is_mounted(tmp_path):
    put(tmp_path / "a")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    names_a = [f.name for f in scan_landing(tmp_path / "a", T0, END).files]
    names_b = [f.name for f in scan_landing(tmp_path / "b", T0, END).files]
    assert names_a == names_b and len(names_a) == 1


def test_an_unreadable_folder_or_file_stops_the_scan_with_a_clear_error(tmp_path):
    """Skipping unreadable data would lose its lines: the run stops before writing (exit 2)."""
    put(tmp_path, source="crm")
    locked_file = put(tmp_path, source="web")
    locked_dir = put(tmp_path, source="erp").parent
    code = (
        "import sys; from datetime import datetime, timezone, timedelta\n"
        "from etl.io.landing import scan_landing, LandingError\n"
        "t0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)\n"
        "try:\n    scan_landing(sys.argv[1], t0, t0 + timedelta(minutes=2))\n"
        "except LandingError as e:\n    print(e); sys.exit(2)\n"
    )
    run = lambda: subprocess.run(without_dac_override([sys.executable, "-c", code, str(tmp_path)]), capture_output=True, text=True)  # noqa: E731
    locked_dir.chmod(0)
    try:
        out = run()
        assert out.returncode == 2 and "arrival_hour=01 is not readable" in out.stdout, out.stdout + out.stderr
    finally:
        locked_dir.chmod(0o755)
    locked_file.chmod(0)
    out = run()
    assert out.returncode == 2 and "updates-20261122T0100.jsonl is not readable" in out.stdout, out.stdout + out.stderr


def test_a_missing_zone_is_an_error(tmp_path):
    with pytest.raises(LandingError, match="does not exist"):
        scan_landing(tmp_path / "nope", T0, END)
    (tmp_path / "file").write_text("")
    with pytest.raises(LandingError, match="not a directory"):
        scan_landing(tmp_path / "file", T0, END)


def test_compare_tells_appended_from_changed_added_and_removed(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    a.write_bytes(b"one\n")
    b.write_bytes(b"two\n")
    c.write_bytes(b"three\n")
    recorded = {p.name: fingerprint(p.name, p.read_bytes(), 1, 0) for p in (a, b, c)}
    with a.open("ab") as f:
        f.write(b"late\n")
    b.write_bytes(b"TWO\n")
    d = tmp_path / "d"
    d.write_bytes(b"new\n")
    current = {p.name: file_digest(str(p), recorded[p.name].bytes if p.name in recorded else None) for p in (a, b, d)}
    got = {ch.name: (ch.kind, ch.recorded_bytes, ch.current_bytes) for ch in compare(recorded, current)}
    assert got == {"a": ("appended", 4, 9), "b": ("changed", 4, 4), "c": ("removed", 6, None), "d": ("added", None, 4)}


def test_pieces_shorter_than_a_minute_have_seconds_in_their_names(tmp_path):
    """piece_seconds = 15: a file covers 15 s from the time in its name; the minute's own name
    (no seconds) is the piece at :00; a name off the pieces stops the scan (its lines would join
    windows another piece closes), but only in the run that owns it."""
    assert landing_file(tmp_path, "crm", T0 + timedelta(seconds=45), 15).name == "updates-20261122T010045.jsonl"
    assert landing_file(tmp_path, "crm", T0).name == "updates-20261122T0100.jsonl"
    with pytest.raises(ValueError, match="not the start of a piece of 15 s"):
        landing_file(tmp_path, "crm", T0 + timedelta(seconds=20), 15)
    for seconds in (0, 15, 45, 75):
        put(tmp_path, minute=T0 + timedelta(seconds=seconds)) if seconds == 0 else \
            landing_file(tmp_path, "crm", T0 + timedelta(seconds=seconds), 15).write_text("{}\n")
    scan = scan_landing(tmp_path, T0, T0 + timedelta(minutes=1), 15)
    assert [(f.name.rsplit("/", 1)[-1], f.minute) for f in scan.files] == [
        ("updates-20261122T0100.jsonl", T0), ("updates-20261122T010015.jsonl", T0 + timedelta(seconds=15)),
        ("updates-20261122T010045.jsonl", T0 + timedelta(seconds=45))]
    # The stream's piece [00:15, 00:45) reads only the file of 00:15.
    assert [f.minute for f in scan_landing(tmp_path, T0 + timedelta(seconds=15), T0 + timedelta(seconds=45), 15).files] == [
        T0 + timedelta(seconds=15)]
    # A landing agent cutting 10-second files while the setting says 15 (or the default, 60).
    odd = landing_file(tmp_path, "crm", T0 + timedelta(seconds=70), 10)
    odd.write_text("{}\n")
    with pytest.raises(LandingError, match=r"updates-20261122T010110.jsonl starts at 01:01:10, not at the start of a piece of 15 s"):
        scan_landing(tmp_path, T0 + timedelta(minutes=1), END, 15)
    with pytest.raises(LandingError, match="piece of 60 s"):
        scan_landing(tmp_path, T0, END)
    assert len(scan_landing(tmp_path, T0, T0 + timedelta(minutes=1), 15).files) == 3  # not this run's file
