"""The benchmarks' counters, on a tree shaped as a warehouse is: tables at its top level, a
partitioned table's segments below (whose directories the commit count does not walk)."""

from benchmarks.measures import delta_commits


def test_delta_commits_counts_every_tables_commit_files_and_nothing_else(tmp_path):
    assert delta_commits(tmp_path / "none yet") == 0
    for table, commits in (("key_map", 3), ("batch_ledger", 2)):
        log = tmp_path / table / "_delta_log"
        log.mkdir(parents=True)
        for v in range(commits):
            (log / f"{v:020d}.json").write_text("{}")
        (log / "_last_checkpoint").write_text("{}")
        (log / f"{0:020d}.checkpoint.parquet").write_bytes(b"")
    for segment in range(3):
        (tmp_path / "key_map" / f"segment_id={segment}").mkdir()
        (tmp_path / "key_map" / f"segment_id={segment}" / "part-0.parquet").write_bytes(b"")
    (tmp_path / "_spark_sql").mkdir()
    assert delta_commits(tmp_path) == 5
