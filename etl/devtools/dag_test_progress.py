"""What a person follows of ``airflow dags test``: each task as it starts and ends (its state and
seconds) and the ``[etl]`` lines of the jobs it runs, from Airflow's log on stdin (the whole log
goes to the demo's log file beside it). The demos pipe their DAG runs through it; without it a
demo printed nothing for minutes while its tasks ran."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime

_STAMP = r"(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?)"
_START = re.compile(_STAMP + r".*\[DAG TEST\] starting task_id=(?P<task>\S+)")
_END = re.compile(_STAMP + r".*\[DAG TEST\] end task task_id=(?P<task>\S+)")
_STATE = re.compile(r"Task instance state updated.*new_state=(?P<state>\w+)")
_ETL = re.compile(r"(?P<line>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[etl\] .*?)(?:\s+\[airflow\.task\..*)?$")
# Its run_duration counts from the run's logical date under `dags test`, not from its start: the
# run's time is taken from its first task's start instead.
_RUN_DONE = re.compile(_STAMP + r".*DagRun Finished: .*, state=(?P<state>\w+)")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.rstrip("Z"))


def follow(lines: Iterable[str]) -> Iterator[str]:
    """The lines to show, in order, for the lines of an ``airflow dags test`` log."""
    started: dict[str, datetime] = {}
    first: datetime | None = None  # the run's first task's first start (a retry starts a task again)
    state = "?"
    for raw in lines:
        line = raw.rstrip("\n")
        if m := _START.search(line):
            started[m["task"]], state = _time(m["at"]), "?"
            first = first or started[m["task"]]
            yield f"    {m['at'][11:19]} task {m['task']} started"
        elif m := _STATE.search(line):
            state = m["state"]
        elif m := _END.search(line):
            began = started.get(m["task"])
            took = f", {(_time(m['at']) - began).total_seconds():.0f} s" if began else ""
            yield f"    {m['at'][11:19]} task {m['task']} {state if state != '?' else 'ended'}{took}"
        elif m := _ETL.search(line):
            yield f"      {m['line']}"
        elif m := _RUN_DONE.search(line):
            took = f" in {(_time(m['at']) - first).total_seconds():.0f} s" if first else ""
            yield f"    DAG run {m['state']}{took}"


def main() -> int:
    lines = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    try:
        for shown in follow(lines):
            print(shown, flush=True)
    except Exception as exc:  # noqa: BLE001 - the display only: Airflow must not die of a closed pipe
        print(f"    (progress display stopped: {exc}; the whole log is in the demo's log file)", file=sys.stderr)
        for _ in lines:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
