"""Progress of a long Spark action, for steps that make no lines of their own for minutes (a
full-size seed writes 20 million rows in two actions): the running stages' tasks done of total,
every ``every_s`` seconds, read from Spark's status tracker on a thread."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator


def stage_lines(tracker) -> list[str]:
    """One text per running stage: ``stage 7: 12/64 tasks``."""
    lines = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            lines.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
    return lines


@contextmanager
def spark_progress(spark, label: str, progress: Callable[[str], None] | None, every_s: float = 30.0) -> Iterator[None]:
    """While the block runs, ``progress("<label>: <seconds> s; stage ...")`` every ``every_s``
    seconds (nothing when no stage runs, or when ``progress`` is ``None``)."""
    if progress is None:
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    started = time.monotonic()

    def watch() -> None:
        while not stop.wait(every_s):
            try:
                running = stage_lines(tracker)
            except Exception:  # noqa: BLE001 - the session is stopping: nothing to say
                return
            if running:
                progress(f"{label}: {time.monotonic() - started:.0f} s; " + ", ".join(running))

    thread = threading.Thread(target=watch, name=f"spark-progress-{label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
