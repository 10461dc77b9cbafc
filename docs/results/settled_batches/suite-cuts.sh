#!/bin/bash
export SPARK_LOCAL_IP=127.0.0.1
SEL=(tests/etl/test_object_store.py
 "tests/etl/load/test_loader.py::test_coalesced_applies_compact_key_map_segments_between_batches_and_change_no_row"
 "tests/etl/strategies/test_partitioned.py::test_a_run_s_end_splits_segments_grown_past_two_theta_and_a_kill_or_a_rerun_changes_nothing"
 "tests/etl/test_kafka_sources.py::test_change_events_on_kafka_load_the_tables_the_landing_files_give[customer]"
 "tests/etl/test_runs.py::test_the_cli_refuses_overlaps_and_foreign_settings_with_exit_2")
for side in after before; do
  if [ $side = before ]; then dir=/tmp/before; else dir=/work/main; fi
  (cd $dir && /work/main/.venv/bin/python -m pytest -p no:cacheprovider -q --durations=0 --junitxml=/tmp/pr/junit-$side.xml "${SEL[@]}" > /tmp/pr/tests-$side.log 2>&1)
  echo "$side rc=$?"
done
