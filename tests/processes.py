"""Real processes for the tests, in one place: ``etl <command>`` started with a test's settings,
killed at a named crash point (``ETL_CRASH_AT``), at a moment, or with SIGTERM, restarted, its
output collected; and the process groups of the services (a Spark cluster's daemons). Each
process leads a process group of its own, so a kill takes its JVM with it, and nothing outlives
the test that started it (the ``etl_process`` fixture stops what is left)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from etl.core import faults
from etl.core.config import EtlConfig

ROOT = Path(__file__).resolve().parents[1]


def settings_json(cfg: EtlConfig, names) -> str:
    """``--settings-json`` carrying ``cfg``'s values of ``names``."""
    return json.dumps({name: getattr(cfg, name) for name in names})


class Group:
    """A command leading a new process group, its stdout and stderr in ``log`` (stdout apart when
    ``stdout_apart``: a command that prints JSON there)."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None, stdout_apart: bool = False):
        self.cmd, self.log = cmd, Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log, "w")
        env = dict(os.environ if env is None else env, SPARK_LOCAL_IP="127.0.0.1")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE if stdout_apart else self._log,
                                     stderr=self._log if stdout_apart else subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.stdout = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> int:
        """The exit code; ``subprocess.TimeoutExpired`` when still running after ``timeout`` s."""
        if self.proc.stdout is not None:
            self.stdout += self.proc.communicate(timeout=timeout)[0] or ""
        else:
            self.proc.wait(timeout=timeout)
        self._reap()
        return self.proc.returncode

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass  # gone already (a crash point kills its own group)

    def kill(self) -> int:
        """SIGKILL to the whole group; its exit code."""
        self.signal(signal.SIGKILL)
        return self.wait(timeout=60)

    def stop(self, grace: float = 30) -> int:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            return self.kill()

    def _reap(self) -> None:
        self.signal(signal.SIGKILL)  # whatever the leader left behind in its group
        self._log.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, n: int = 3000) -> str:
        return tail_of(self.stdout, self.output(), n)


def tail_of(stdout: str, output: str, n: int = 3000) -> str:
    """What a failing test shows of a process: the end of its stdout (when apart) and of its log."""
    return (stdout[-1000:] + "\n" if stdout else "") + output[-n:]


def etl_command(args: list[str], settings: str | None = None) -> list[str]:
    return [sys.executable, "-m", "etl.entrypoints.cli", *args, *(["--settings-json", settings] if settings else [])]


@dataclass
class Finished:
    code: int
    killed_by_test: bool  # the test's own SIGKILL (a moment), not a crash point's
    output: str  # stdout and stderr, or stderr alone when stdout was apart
    stdout: str

    def tail(self, n: int = 3000) -> str:
        return tail_of(self.stdout, self.output, n)


class EtlProcesses:
    """Starts ``etl`` commands as real processes for one test (logs under its directory) and stops
    every one still running when the test ends."""

    def __init__(self, log_dir: Path):
        self.log_dir = Path(log_dir)
        self.started: list[Group] = []

    def start(self, args: list[str], settings: str | None = None, *, crash_at: str | None = None,
              log: str = "etl.log", env: dict[str, str] | None = None, stdout_apart: bool = False) -> Group:
        """``etl *args --settings-json settings``, dying at ``crash_at`` (``point:nth``) if given."""
        env = dict(os.environ if env is None else env)
        if crash_at:
            env[faults.ENV] = crash_at
        group = Group(etl_command(args, settings), self.log_dir / log, env, stdout_apart)
        self.started.append(group)
        return group

    def run(self, args: list[str], settings: str | None = None, *, crash_at: str | None = None,
            kill_after: float | None = None, timeout: float = 600, log: str = "etl.log",
            env: dict[str, str] | None = None, stdout_apart: bool = False) -> Finished:
        """Start, then wait for the end: SIGKILLed by the test after ``kill_after`` seconds if it
        is still running then; a run past ``timeout`` fails the test."""
        group = self.start(args, settings, crash_at=crash_at, log=log, env=env, stdout_apart=stdout_apart)
        try:
            code, killed = group.wait(timeout=kill_after if kill_after is not None else timeout), False
        except subprocess.TimeoutExpired:
            if kill_after is None:
                group.kill()
                raise AssertionError(f"`etl {' '.join(args)}` still running after {timeout} s:\n{group.tail()}") from None
            code, killed = group.kill(), True
        return Finished(code, killed, group.output(), group.stdout)

    def wait_for(self, group: Group, done, what: str, timeout: float = 300) -> None:
        """Until ``done()`` holds; fails the test when ``group`` exits or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while not done():
            if not group.running():
                raise AssertionError(f"`{' '.join(group.cmd[3:5])}` exited before {what}:\n{group.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s:\n{group.tail()}")
            time.sleep(0.5)

    def stop_all(self) -> None:
        for group in self.started:
            if group.running():
                group.kill()
