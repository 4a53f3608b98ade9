"""Fixtures of the multi-host tests: hosts in network namespaces (tests/hosts.py) and a ledger they reach.

One set of hosts per module (``hosts``), torn down after it even when a test fails. The ledger is a
private PostgreSQL (tests/pgcluster.py) in the root namespace that listens on 127.0.0.1 *and* on the
hosts' bridge address, as a head node's database listens on the cluster network: every host reaches it
at ``10.231.0.<b·16 + 1>``, and each test gets a database of its own (``ledger``). Its URL carries
``connect_timeout=10``: a host whose link is cut gives up on the ledger instead of hanging.

Why not the machine's PostgreSQL at 127.0.0.1:5432: inside a namespace 127.0.0.1 is the host's own
loopback, and that server listens on loopback only; why not the journal + ``trainledger sync``: that is
the path for an unreachable ledger (tests/faults), not how a cluster's nodes record a run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.hosts import Host, Hosts, unavailable

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hosts():
    why = unavailable()
    if why:
        pytest.skip(f"no multi-host tests here: {why}")
    with Hosts(2) as hs:
        yield hs


@pytest.fixture(scope="module")
def ledger_server(hosts):
    """A PostgreSQL listening on 127.0.0.1 and on the hosts' bridge address, trusting the hosts' network."""
    from tests.pgcluster import PgCluster

    pg = PgCluster(listen=(hosts.gateway,), trust=(hosts.cidr,))
    try:
        pg.start()
        yield pg
    finally:
        pg.destroy()


@dataclass
class Ledger:
    url: str  # as every host (and the root namespace) reaches it: over the bridge

    def engine(self):
        from trainledger.store.db import make_engine

        return make_engine(self.url)


@pytest.fixture
def ledger(ledger_server, hosts):
    """A new, migrated ledger database on the hosts' PostgreSQL."""
    name = f"tl_mh_{uuid.uuid4().hex[:12]}"
    admin = create_engine(ledger_server.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    led = Ledger(f"postgresql+psycopg://postgres@{hosts.gateway}:{ledger_server.port}/{name}?connect_timeout=10")
    led.engine().dispose()  # migrate once, before the hosts race to
    yield led
    from trainledger.store.db import get_engine

    get_engine.cache_clear()
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def host_env(base: Path, host: Host, ledger: Ledger, **extra: str) -> dict:
    """The environment of a process on ``host``: node-local journal, data and logs under ``base/<host>``,
    the ledger over the network, gloo on the host's interface, fast heartbeats."""
    home = base / host.name
    env = dict(os.environ)
    env.pop("TRAINLEDGER_HOSTNAME", None)
    env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        "TRAINLEDGER_DB_URL": ledger.url,
        "TRAINLEDGER_JOURNAL_DIR": str(home / "journal"),
        "XDG_DATA_HOME": str(home / "xdg"),
        "TRAINLEDGER_HEARTBEAT_S": "1",
        "TRAINLEDGER_FLUSH_S": "0.5",
        "GLOO_SOCKET_IFNAME": host.iface,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "TRAINLEDGER_NODE_TYPE": "rtx4090-8x",  # the configured default: runs are costed (none: not costed)
        **extra,
    })
    return env


def trainledger(*args) -> list[str]:
    return [sys.executable, "-m", "trainledger.cli", *map(str, args)]


def start_on(host: Host, command: list[str], env: dict, log: Path) -> subprocess.Popen:
    """Start ``command`` on ``host`` (its output in ``log``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        return host.popen(command, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def wait_all(procs: list[subprocess.Popen], logs: list[Path], timeout: float = 420) -> list[int]:
    """Wait for every process (a generous upper bound, never a measurement); their exit codes."""
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            raise AssertionError("timed out:\n" + "\n".join(tail(log) for log in logs)) from None
    return codes


def tail(log: Path, n: int = 4000) -> str:
    try:
        return f"--- {log}\n" + log.read_text(encoding="utf-8", errors="replace")[-n:]
    except OSError:
        return f"--- {log}: none"


def poll(what, timeout: float = 300, every: float = 0.25, message: str = ""):
    """Call ``what`` until it returns something truthy (returned), up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not reached in {timeout}s: {message}")
