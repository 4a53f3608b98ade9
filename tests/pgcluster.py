"""A throwaway PostgreSQL cluster (initdb + pg_ctl on a free loopback port) that a
test may stop and start, for database-outage tests. Runs as the ``postgres``
user when the tests run as root (initdb refuses root).

:func:`suite_server` is the suite's own server (issue 38): tests/conftest.py starts one per test run, in
memory and without durability, and each test's database is made on it."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def _bin(name: str) -> str:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[-1:]
    if not found:
        raise RuntimeError(f"{name} not found: install the Debian package postgresql")
    return found if isinstance(found, str) else found[0]


class PgCluster:
    """``listen``: addresses besides 127.0.0.1 to listen on (a bridge of tests/hosts.py), and ``trust``: the
    networks (CIDR) whose clients it trusts there, so that test hosts in network namespaces reach it."""

    def __init__(self, listen: tuple[str, ...] = (), trust: tuple[str, ...] = (), settings: tuple[str, ...] = (),
                 parent: Path | None = None, prefix: str = "tl-pg-") -> None:
        self.listen = ",".join(("127.0.0.1", *listen))
        self.settings = settings
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        (self.dir / "owner").write_text(str(os.getpid()))  # first: another run's _remove_stale judges by it
        self.data = self.dir / "data"
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run([_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        if trust:
            with open(self.data / "pg_hba.conf", "a", encoding="utf-8") as fh:
                fh.writelines(f"host all all {net} trust\n" for net in trust)

    def _run(self, cmd: list[str]) -> None:
        """Run ``cmd`` (as postgres when root); a failure raises with the program's own last lines in the error."""
        program = Path(cmd[0]).name
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        if done.returncode:
            err = subprocess.CalledProcessError(done.returncode, cmd, done.stdout)
            err.add_note(f"{program} said: " + " | ".join(done.stdout.strip().splitlines()[-5:]))
            raise err

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = " ".join([f"-p {self.port} -k {self.dir} -c listen_addresses={self.listen}",
                            *(f"-c {setting}" for setting in self.settings)])
        self._run([_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "-o", options, "start"])

    @classmethod
    def found(cls, folder: Path) -> "PgCluster":
        """A cluster made earlier in ``folder`` (by another process), to stop and remove."""
        cluster = cls.__new__(cls)
        cluster.dir, cluster.data, cluster.as_postgres = folder, folder / "data", os.geteuid() == 0
        return cluster

    def stop(self) -> None:
        self._run([_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    def destroy(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


#: The suite's server keeps nothing worth a crash of the machine: every database on it is a test's, dropped at the
#: test's end. Without the fsyncs and the WAL of a copied database, ``CREATE DATABASE ... TEMPLATE`` and ``DROP
#: DATABASE`` cost its backend ~0.03 CPU-s against 0.06-0.39 on the machine's server (which grew as the run went
#: on), and a commit waits for no disk: the 71 PostgreSQL tests of the three month-store files took 47 s instead of
#: 62 (2026-12-06, side by side). The tests that take a database down or kill it start clusters of their own with
#: PostgreSQL's defaults (tests/tracking, tests/multihost).
SUITE_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off", "wal_level=minimal",
                  "max_wal_senders=0", "max_wal_size=256MB", "max_connections=200")
SUITE_PREFIX = "tl-pg-suite-"


def _parent_dir() -> Path:
    """/dev/shm when it has room (a container's default 64 MB does not), else the temporary folder."""
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and shutil.disk_usage(shm).free >= 4 << 30:
            return shm
    except OSError:
        pass
    return Path(tempfile.gettempdir())


def _remove_stale(parent: Path) -> None:
    """The clusters of earlier runs whose pytest is gone (killed before it could stop them)."""
    for old in parent.glob(f"{SUITE_PREFIX}*"):
        try:
            state = Path(f"/proc/{int((old / 'owner').read_text())}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                continue  # its run is still going (a zombie is gone: nothing may have reaped it yet)
        except FileNotFoundError:  # its pytest is gone, or it is being made this instant: the owner is written
            if not (old / "owner").exists():  # at once, so only a folder without one for a minute is an orphan
                try:
                    if time.time() - old.stat().st_mtime < 60:
                        continue
                except FileNotFoundError:
                    continue
        except (OSError, ValueError, IndexError):
            continue  # not ours to judge
        PgCluster.found(old).destroy()


def suite_server() -> PgCluster:
    """Start the suite's server: a new cluster in memory (or the temporary folder) with :data:`SUITE_SETTINGS`,
    owned by this process; :meth:`PgCluster.destroy` removes it."""
    parent = _parent_dir()
    _remove_stale(parent)
    cluster = PgCluster(settings=SUITE_SETTINGS, parent=parent, prefix=SUITE_PREFIX)
    try:
        cluster.start()
    except BaseException:
        cluster.destroy()  # nothing left behind; the error (pg_ctl's) stops the run loudly
        raise
    return cluster
