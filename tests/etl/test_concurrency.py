"""Two real jobs against one warehouse at once: one loads, the other fails fast with a clear
error (exit 5) and succeeds when retried; no update is lost or doubled, no key given twice."""

from __future__ import annotations

import time

import pytest

from etl import jobs
from tests.helpers import CRASH_RUN as RUN
from tests.helpers import crash_settings_json, start_from
from tests.helpers import crash_config as config
from tests.helpers import deterministic_tables as tables

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def start_load(processes, cfg, strategy: str, log: str):
    return processes.start(["load", "--start", RUN.start.isoformat(), "--end", RUN.end.isoformat(), "--join-strategy", strategy],
                           crash_settings_json(cfg), log=log)


@pytest.mark.slow  # in make test-slow while CI cannot afford it (issue 44); its claim: docs/guarantees.md
def test_two_loads_at_once_one_fails_fast_and_the_retry_changes_nothing(spark, crash_landing, crash_ingested, uninterrupted,
                                                                        tmp_path, etl_process):
    strategy = "partitioned-range"
    cfg = config(tmp_path / "shared", crash_landing)
    start_from(crash_ingested, tmp_path / "shared")

    started = time.monotonic()
    procs = [start_load(etl_process, cfg, strategy, f"load-{i}.log") for i in range(2)]
    finished = {}
    while len(finished) < 2 and time.monotonic() - started < 600:
        for i, p in enumerate(procs):
            if i not in finished and not p.running():
                finished[i] = (p.wait(timeout=60), time.monotonic() - started)
        time.sleep(0.5)
    assert len(finished) == 2, "a load did not finish within 10 minutes"
    codes = sorted(code for code, _ in finished.values())
    texts = [p.output() for p in procs]
    assert codes == [0, 5], f"expected one success and one 'locked' (exit 5): {finished}\n" + "\n---\n".join(t[-2000:] for t in texts)
    loser = next(i for i, (code, _) in finished.items() if code == 5)
    winner = 1 - loser
    assert "is being loaded by" in texts[loser]
    assert "retry" in texts[loser].lower()

    # The retry (in this process: what `etl load` runs, without a third JVM start): everything is
    # done already; nothing changes.
    assert jobs.load(spark, cfg, RUN, strategy=strategy)["batches_committed"] == 0
    assert tables(spark, cfg) == uninterrupted(strategy)
    keys = [r.surrogate_key for r in spark.read.format("delta").load(cfg.table_path("key_map")).collect()]
    assert len(keys) == len(set(keys))
    assert finished[loser][1] < finished[winner][1]  # it failed while the other was still loading
