"""A PostgreSQL cluster of its own on the loopback address, for Airflow's metadata database in the
tests (as a deployment keeps it: docs/deployment.md, "Airflow"): initialised in a directory, served
on ``127.0.0.1:<port>`` only, by an unprivileged account, stopped with its directory. The server
is Debian's (``apt-get install postgresql``; its ``initdb`` and ``pg_ctl`` are found on PATH or
under ``/usr/lib/postgresql/<version>/bin``); nothing is installed system-wide or started as a
service.

PostgreSQL refuses to run as root: started by root, the cluster belongs to the ``postgres``
account Debian's package creates (else ``nobody``), in a directory of its own under the system's
temporary directory (a root-private test directory is not traversable by that account).

    python -m etl.devtools.postgres start --dir var/pg     # prints the SQLAlchemy URL
    python -m etl.devtools.postgres stop --dir var/pg
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from etl.devtools.servers import free_port

DATABASE = "airflow"
USER = "airflow"


def binary(name: str) -> str:
    """A PostgreSQL server program: on PATH, else the newest of Debian's versions."""
    debian = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4].split(".")[0]))
    found = shutil.which(name) or (debian[-1] if debian else None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} was not found: install the server (Debian: apt-get install postgresql)")
    return found


def _account() -> str | None:
    """The unprivileged account the server runs as when started by root (None: as the caller)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("started as root, and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL as")


@dataclass
class Postgres:
    """A running cluster: its data directory, port and the account it runs as."""

    home: Path
    port: int
    account: str | None

    @property
    def url(self) -> str:
        """Airflow's ``sql_alchemy_conn`` (psycopg2; Airflow derives its asyncpg URL from it)."""
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), capture_output=True, text=True, user=self.account, check=check,
                              cwd=self.home, timeout=120)

    def stop(self) -> None:
        """A fast shutdown, then the directory removed."""
        if (self.home / "data" / "postmaster.pid").exists():
            self.run(binary("pg_ctl"), "-D", str(self.home / "data"), "-m", "fast", "-w", "stop", check=False)
        shutil.rmtree(self.home, ignore_errors=True)


def start(home: Path | None = None, port: int = 0, timeout: float = 60.0) -> Postgres:
    """Initialise a cluster in ``home`` (new: a fresh directory under the system's temporary one)
    and start it on ``127.0.0.1:port`` (0: a free port), with database and role ``airflow``.
    Connections are trusted, and only from this machine's loopback address."""
    account = _account()
    made = home is None or not Path(home).exists()
    home = Path(home) if home is not None else Path(tempfile.mkdtemp(prefix="etl-postgres-"))
    home.mkdir(parents=True, exist_ok=True)
    if account is not None:
        entry = pwd.getpwnam(account)
        os.chown(home, entry.pw_uid, entry.pw_gid)
    os.chmod(home, 0o700)
    server = Postgres(home, port or free_port(), account)
    data = home / "data"
    try:
        if not data.exists():
            server.run(binary("initdb"), "-D", str(data), "-U", USER, "--auth=trust", "--encoding=UTF8",
                       "--no-sync", "--no-instructions")
        options = (f"-c listen_addresses=127.0.0.1 -p {server.port} -c unix_socket_directories={home} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        started = server.run(binary("pg_ctl"), "-D", str(data), "-l", str(home / "server.log"), "-o", options,
                             "-t", str(int(timeout)), "-w", "start", check=False)
        if started.returncode != 0:
            log = (home / "server.log").read_text() if (home / "server.log").exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {started.stdout}{started.stderr}\n{log[-2000:]}")
        exists = server.run(binary("psql"), "-h", "127.0.0.1", "-p", str(server.port), "-U", USER, "-d", "postgres", "-tAc",
                            f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
        if exists.stdout.strip() != "1":
            server.run(binary("psql"), "-h", "127.0.0.1", "-p", str(server.port), "-U", USER, "-d", "postgres", "-c",
                       f"CREATE DATABASE {DATABASE}")
    except BaseException:
        if made:
            server.stop()  # and the directory made here with it
        raise
    (home / "server.json").write_text(json.dumps({"port": server.port, "account": account}))
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etl.devtools.postgres", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--dir", required=True, help="the cluster's directory")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    args = parser.parse_args(argv)
    home = Path(args.dir).resolve()
    if args.action == "start":
        print(start(home, args.port).url)
    else:
        state = json.loads((home / "server.json").read_text()) if (home / "server.json").exists() else None
        if state is None:
            print("no cluster recorded there")
        else:
            Postgres(home, state["port"], state["account"]).stop()
            print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
