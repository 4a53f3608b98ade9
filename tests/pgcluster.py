"""A throwaway PostgreSQL cluster (initdb + pg_ctl on a free loopback port) that a
test may stop and start, for database-outage tests. Runs as the ``postgres``
user when the tests run as root (initdb refuses root)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def _bin(name: str) -> str:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[-1:]
    if not found:
        raise RuntimeError(f"{name} not found: install the Debian package postgresql")
    return found if isinstance(found, str) else found[0]


class PgCluster:
    """``listen``: addresses besides 127.0.0.1 to listen on (a bridge of tests/hosts.py), and ``trust``: the
    networks (CIDR) whose clients it trusts there, so that test hosts in network namespaces reach it."""

    def __init__(self, listen: tuple[str, ...] = (), trust: tuple[str, ...] = ()) -> None:
        self.listen = ",".join(("127.0.0.1", *listen))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = Path(tempfile.mkdtemp(prefix="tl-pg-"))
        self.data = self.dir / "data"
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run([_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        if trust:
            with open(self.data / "pg_hba.conf", "a", encoding="utf-8") as fh:
                fh.writelines(f"host all all {net} trust\n" for net in trust)

    def _run(self, cmd: list[str]) -> None:
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self._run([_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "-o",
                   f"-p {self.port} -k {self.dir} -c listen_addresses={self.listen}", "start"])

    def stop(self) -> None:
        self._run([_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    def destroy(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
