"""Fixtures for tracked-run tests: real `trainledger launch` processes on CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "trainer" / "configs"


@pytest.fixture(scope="session")
def shard_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shard-cache")


def make_track_env(base: Path, shard_cache: Path) -> dict:
    """Environment for launched runs under ``base``: private journal, logs and data dirs; fast heartbeats."""
    env = dict(os.environ)
    env.update({
        "TRAINLEDGER_JOURNAL_DIR": str(base / "journal"),
        "TRAINLEDGER_CACHE_DIR": str(shard_cache),
        "XDG_DATA_HOME": str(base / "xdg"),
        "TRAINLEDGER_HEARTBEAT_S": "1",
        "TRAINLEDGER_FLUSH_S": "0.5",
        "OMP_NUM_THREADS": "1",
        # the configured default node type (none: recorded, not costed; tests/test_not_costed.py)
        "TRAINLEDGER_NODE_TYPE": "rtx4090-8x",
    })
    env.pop("TRAINLEDGER_DB_URL", None)
    return env


@pytest.fixture
def track_env(tmp_path, shard_cache):
    """Environment for launched runs: private journal, logs and data dirs; fast heartbeats."""
    return make_track_env(tmp_path, shard_cache)


@pytest.fixture
def pg_cluster():
    """A started throwaway PostgreSQL cluster (tests/pgcluster.py) that the test may stop and start."""
    from tests.pgcluster import PgCluster

    pg = PgCluster()
    try:
        pg.start()
        yield pg
    finally:
        pg.destroy()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trainledger(args: list[str], env: dict, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "trainledger.cli", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"trainledger {' '.join(map(str, args))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def launch_detached(url: str, env: dict, *extra, config: str = "zero2.yaml") -> str:
    """`trainledger launch CONFIG --detach`; returns the run id."""
    out = trainledger(["launch", CONFIGS / config, "--db", url, "--detach", "--json", *extra], env)
    return json.loads(out.stdout)["run_id"]


def run_row(engine, run_id: str):
    """The run's ledger row (detached from its session), or None."""
    from sqlmodel import Session
    from trainledger.store.models import Run

    with Session(engine) as s:
        return s.get(Run, run_id)


def sample_counts(engine, run_id: str) -> dict[str, int]:
    """Number of metric samples of a run, per metric."""
    from sqlmodel import Session, func, select
    from trainledger.store.models import MetricSample

    with Session(engine) as s:
        return dict(s.exec(select(MetricSample.metric, func.count()).where(MetricSample.run_id == run_id)
                           .group_by(MetricSample.metric)).all())


def journal_samples(path: Path) -> list[list]:
    """Every sample row ([node, gpu, metric, ts, value]) in a run journal file."""
    from trainledger.sources.record.journal import read_events

    if not Path(path).exists():
        return []
    return [row for ev in read_events(Path(path)) if ev["type"] == "samples" for row in ev["rows"]]


def processes_of_run(run_id: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries this run id."""
    pids = []
    needle = f"TRAINLEDGER_RUN_ID={run_id}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(d.name))
        except OSError:
            continue
    return pids


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def kill_leftover_runs(url: str, run_ids) -> None:
    """Teardown: SIGKILL the process group of any launched run still alive, then insist none is left."""
    from sqlmodel import Session
    from trainledger.store.db import make_engine
    from trainledger.store.models import Run

    engine = make_engine(url)
    for rid in run_ids:
        if processes_of_run(rid):  # the test failed before the run ended
            with Session(engine) as s:
                pgid = s.get(Run, rid).pgid
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, TypeError):
                pass
        wait_for(lambda: not processes_of_run(rid), 30, f"no processes of launched run {rid}")
    engine.dispose()
