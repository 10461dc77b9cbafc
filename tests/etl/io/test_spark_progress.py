"""A long Spark action says how far its running stages are while it runs (a full-size seed writes
for minutes without a line of its own otherwise)."""

import re
import threading
import time

from etl.io.spark_progress import spark_progress, stage_lines


def _slow(batches):
    for batch in batches:
        time.sleep(0.6)
        yield batch


def test_a_long_action_reports_its_running_stage_s_tasks_and_stops_with_the_block(spark):
    said = []
    with spark_progress(spark, "seeding key_map", said.append, every_s=0.2):
        spark.range(0, 8, numPartitions=4).mapInPandas(_slow, "id long").count()
    assert said, "no progress during a 1-2 s action"
    stage = r"stage \d+: \d+/\d+ tasks"
    assert all(re.fullmatch(rf"seeding key_map: \d+ s; {stage}(, {stage})*", line) for line in said), said
    assert any(re.search(r"stage \d+: [0-3]/4 tasks", line) for line in said), said  # the slow stage, under way
    heard = len(said)
    time.sleep(0.5)
    assert len(said) == heard  # the watcher stopped with the block
    assert not any(t.name.startswith("spark-progress-") for t in threading.enumerate())


def test_without_a_listener_nothing_watches(spark):
    with spark_progress(spark, "quiet", None, every_s=0.01):
        assert not any(t.name.startswith("spark-progress-") for t in threading.enumerate())


class _Tracker:
    """Spark's status tracker as the watcher reads it: stage ids, and per stage its task counts."""

    def __init__(self, stages):
        self.stages = stages

    def getActiveStageIds(self):
        return list(self.stages)

    def getStageInfo(self, stage_id):
        done, total = self.stages[stage_id]
        return None if total is None else type("Info", (), {"numCompletedTasks": done, "numTasks": total})


def test_each_running_stage_says_its_tasks_done_of_total_in_stage_order():
    assert stage_lines(_Tracker({7: (12, 64), 3: (0, 1), 9: (0, None)})) == ["stage 3: 0/1 tasks", "stage 7: 12/64 tasks"]
    assert stage_lines(_Tracker({})) == []
