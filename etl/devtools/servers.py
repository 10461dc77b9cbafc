"""What the real services the tests and benchmarks start on the loopback address have in common
(a Kafka broker, an S3-API server): their jars resolved once from Maven Central with the Ivy that
pyspark ships (the resolver Spark uses for ``spark.jars.packages``), a free port, and a server
process in a process group of its own, stopped cleanly or killed as a lost machine."""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark


def ivy_jar() -> str:
    found = sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "ivy-*.jar")))
    if not found:
        raise RuntimeError("pyspark's Ivy jar was not found (pyspark/jars/ivy-*.jar)")
    return found[-1]


def resolve_jars(organisation: str, module: str, version: str, target: Path, cache: Path, what: str) -> Path:
    """``organisation:module:version`` and its dependencies in ``target`` (a classpath directory),
    resolved from Maven Central the first time."""
    done = target / ".resolved"
    if done.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    print(f"fetching {what} from Maven Central (once)...", file=sys.stderr, flush=True)
    cmd = ["java", "-jar", ivy_jar(), "-dependency", organisation, module, version, "-confs", "default",
           "-retrieve", str(target / "[artifact]-[revision](-[classifier]).[ext]"), "-cache", str(cache / "ivy")]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"resolving {what} failed:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    done.write_text(version)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    """A server started in a process group of its own, listening on ``127.0.0.1:port``."""

    pid: int
    port: int
    data_dir: Path

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the server's process group (a clean shutdown), SIGKILL after ``timeout``."""
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return
            time.sleep(0.2)
        self.kill()

    def kill(self) -> None:
        """SIGKILL to the whole group, as a lost machine: nothing flushed."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        while self.alive():
            time.sleep(0.1)

    def alive(self) -> bool:
        """Whether the server still runs (a dead child started by this process is reaped first)."""
        try:
            if os.waitpid(self.pid, os.WNOHANG)[0] == self.pid:
                return False
        except ChildProcessError:
            pass  # not this process's child
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


def wait_listening(proc: subprocess.Popen, server: ServerProcess, timeout: float, what: str, log: Path) -> None:
    """Until ``server`` accepts connections; its process exiting, or ``timeout``, is an error
    naming its log (the server is stopped then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}); see {log}")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{server.port} within {timeout:.0f} s; see {log}")


def refuse_if_running(state: Path, what: str) -> None:
    """An error if the server recorded in ``state`` (its pid and port) still runs there."""
    if not state.exists():
        return
    old = json.loads(state.read_text())
    try:
        os.killpg(old["pid"], 0)
    except ProcessLookupError:
        return
    raise RuntimeError(f"{what} (pid {old['pid']}) runs on {state.parent} already, at 127.0.0.1:{old['port']}")


def launch(command: list[str], server: type[ServerProcess], port: int, data_dir: Path, log: Path, state: Path,
           what: str, timeout: float) -> ServerProcess:
    """``command`` in a process group of its own, its output in ``log``, until it listens on
    ``port``; its pid and port recorded in ``state`` (for ``stop_recorded``)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    started = server(proc.pid, port, data_dir)
    wait_listening(proc, started, timeout, what, log)
    state.write_text(json.dumps({"pid": proc.pid, "port": port}))
    return started


def stop_recorded(state: Path, server: type[ServerProcess]) -> bool:
    """Stop the server recorded in ``state``; False when none is."""
    if not state.exists():
        return False
    old = json.loads(state.read_text())
    server(old["pid"], old["port"], state.parent).stop()
    state.unlink()
    return True
