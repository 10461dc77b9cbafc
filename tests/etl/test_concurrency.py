"""Two real jobs against one warehouse at once: one loads, the other fails fast with a clear
error (exit 5) and succeeds when retried; no update is lost or doubled, no key given twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from etl import jobs
from tests.helpers import CRASH_RUN as RUN
from tests.helpers import ROOT, crash_settings_json, start_from
from tests.helpers import crash_config as config
from tests.helpers import deterministic_tables as tables

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


def start_load(cfg, strategy: str, log):
    cmd = [sys.executable, "-m", "etl.entrypoints.cli", "load", "--start", RUN.start.isoformat(), "--end", RUN.end.isoformat(),
           "--join-strategy", strategy, "--settings-json", crash_settings_json(cfg)]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.slow  # in make test-slow while CI cannot afford it (issue 44); its claim: docs/guarantees.md
def test_two_loads_at_once_one_fails_fast_and_the_retry_changes_nothing(spark, crash_landing, crash_ingested, uninterrupted, tmp_path):
    strategy = "partitioned-range"
    cfg = config(tmp_path / "shared", crash_landing)
    start_from(crash_ingested, tmp_path / "shared")

    logs = [open(tmp_path / f"load-{i}.log", "w+") for i in range(2)]
    started = time.monotonic()
    procs = [start_load(cfg, strategy, log) for log in logs]
    finished = {}
    while len(finished) < 2 and time.monotonic() - started < 600:
        for i, p in enumerate(procs):
            if i not in finished and p.poll() is not None:
                finished[i] = (p.returncode, time.monotonic() - started)
        time.sleep(0.5)
    assert len(finished) == 2, "a load did not finish within 10 minutes"
    codes = sorted(code for code, _ in finished.values())
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
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
