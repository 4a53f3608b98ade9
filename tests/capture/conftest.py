"""Fixtures for capture tests: real ``trainledger run`` processes around commands that are not ours."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.app.conftest import app_env  # noqa: F401  (fixture: the dashboard pointed at a ledger)
from tests.tracking.conftest import shard_cache  # noqa: F401  (fixture: the trainer's data shards, shared)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = Path(sys.executable).parent
JOB = HERE / "job.py"


@pytest.fixture
def capture_env(tmp_path) -> dict:
    """Environment for wrappers: private journal and data dirs, fast heartbeats and flushes, one thread per rank."""
    env = dict(os.environ)
    env.update({"TRAINLEDGER_JOURNAL_DIR": str(tmp_path / "journal"), "XDG_DATA_HOME": str(tmp_path / "xdg"),
                "TRAINLEDGER_HEARTBEAT_S": "1", "TRAINLEDGER_FLUSH_S": "0.5", "TRAINLEDGER_UTIL_INTERVAL_S": "0.5",
                "TRAINLEDGER_LEDGER_WAIT_S": "20", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                # the configured default node type (none: recorded, not costed; tests/test_not_costed.py)
                "TRAINLEDGER_NODE_TYPE": "rtx4090-8x"})
    for k in ("TRAINLEDGER_DB_URL", "TRAINLEDGER_RUN_ID", "TRAINLEDGER_WRAPPED", "CUDA_VISIBLE_DEVICES"):
        env.pop(k, None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def wrap_cmd(url: str, *args, command: list[str]) -> list[str]:
    """``trainledger run ARGS --db URL -- COMMAND`` as an argument list."""
    return [str(BIN / "trainledger"), "run", *map(str, args), "--db", url, "--", *map(str, command)]


def run_wrapped(url: str, env: dict, *args, command: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(wrap_cmd(url, *args, command=command), env=env, capture_output=True, timeout=timeout,
                          cwd=REPO)


def job(*args) -> list[str]:
    """The generic test job (tests/capture/job.py) with its arguments."""
    return [sys.executable, str(JOB), *map(str, args)]


def run_row(url: str, run_id: str):
    from sqlmodel import Session
    from trainledger.store.db import make_engine
    from trainledger.store.models import Run

    engine = make_engine(url)
    try:
        with Session(engine, expire_on_commit=False) as s:
            return s.get(Run, run_id)
    finally:
        engine.dispose()


def all_runs(url: str) -> list:
    from sqlmodel import Session, select
    from trainledger.store.db import make_engine
    from trainledger.store.models import Run

    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return list(s.exec(select(Run)).all())
    finally:
        engine.dispose()


def nodes_of(url: str, run_id: str) -> list:
    from sqlmodel import Session, select
    from trainledger.store.db import make_engine
    from trainledger.store.models import RunNode

    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return list(s.exec(select(RunNode).where(RunNode.run_id == run_id).order_by(RunNode.node_rank)).all())
    finally:
        engine.dispose()


def samples_of(url: str, run_id: str, metric: str) -> list[tuple]:
    from sqlmodel import Session, select
    from trainledger.store.db import make_engine
    from trainledger.store.models import MetricSample

    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return [tuple(r) for r in s.exec(select(MetricSample.node, MetricSample.gpu, MetricSample.value)
                                             .where(MetricSample.run_id == run_id, MetricSample.metric == metric)
                                             .order_by(MetricSample.ts)).all()]
    finally:
        engine.dispose()


def run_id_of(stderr: bytes) -> str:
    """The run id the wrapper announced on stderr ("[trainledger] node 0 of 1 registers run ID")."""
    for line in stderr.decode(errors="replace").splitlines():
        if line.startswith("[trainledger] node ") and " run " in line:
            return line.rsplit(" ", 1)[1]
    raise AssertionError(f"no run id announced in:\n{stderr.decode(errors='replace')}")


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory) -> Path:
    """``libnvidia-ml.so.1`` built from tests/capture/fake_nvml.c: NVML's C interface, answering from
    environment variables, for the code paths that need a GPU (pynvml loads it as it loads the real one)."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        if os.environ.get("CI"):
            raise AssertionError("no C compiler for the NVML test double (tests/run.sh installs gcc)")
        pytest.skip("no C compiler to build the NVML test double (apt-get install gcc)")
    out = tmp_path_factory.mktemp("nvml")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out / "libnvidia-ml.so.1"), str(HERE / "fake_nvml.c")], check=True)
    return out
