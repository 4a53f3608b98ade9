"""Fixtures for the trainer tests: free ports, torchrun subprocesses, shared runs.

Multi-process tests start real torchrun launches (gloo on 127.0.0.1) as
argument lists in their own process group, so a timeout kills every rank.
The expensive launches are session fixtures shared by several tests.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

#: Shared by the parity runs: the same seed, data and global batch (8 sequences × 128 tokens).
PARITY_STEPS = 4


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def subprocess_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def torchrun_cmd(nproc: int, target: list[str], *, port: int | None = None, nnodes: int = 1,
                 node_rank: int = 0) -> list[str]:
    """``python -m torch.distributed.run``: one node, ``--standalone`` (its store binds a port the kernel picks, so
    concurrent tests cannot take each other's); several, a static rendezvous on 127.0.0.1:port."""
    if nnodes == 1:
        where = ["--standalone", "--nnodes", "1", "--local-addr", "127.0.0.1"]
    else:
        where = ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", "127.0.0.1",
                 "--master-port", str(port)]
    return [sys.executable, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(nproc), *target]


def run_group(cmd: list[str], *, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session; on timeout kill the whole group (launcher and ranks)."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env or subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"timed out after {timeout}s: {' '.join(cmd)}\n{out[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def parity_config(strategy: str, cache_dir: Path, shape: str = "tiny", **parallel) -> dict:
    """The shared parity setup: tiny GPT (or ``shape``), shipped corpus, global batch 8, clipping active (0.5)."""
    return {
        "model": {"shape": shape},
        "data": {"cache_dir": str(cache_dir), "shard_size": 64},
        "parallel": {"strategy": strategy, "micro_batch": 4, "global_batch": 8, **parallel},
        "optimizer": {"lr": 3e-3, "warmup_steps": 1, "grad_clip": 0.5},
        "steps": PARITY_STEPS,
        "seed": 1234,
        "log_every": 100,
    }


def run_strategies(tmp: Path, nproc: int, runs: list[dict], timeout: float = 300) -> dict:
    runs_path, out = tmp / "runs.json", tmp / "results.json"
    runs_path.write_text(json.dumps(runs), encoding="utf-8")
    cmd = torchrun_cmd(nproc, [str(HERE / "multi_strategy_worker.py"), str(out), str(runs_path)])
    proc = run_group(cmd, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-20000:]
    return json.loads(out.read_text(encoding="utf-8"))


class Launcher:
    """What tests need to start processes; handed out by the ``launcher`` fixture."""

    free_port = staticmethod(free_port)
    env = staticmethod(subprocess_env)
    torchrun_cmd = staticmethod(torchrun_cmd)
    run = staticmethod(run_group)
    parity_config = staticmethod(parity_config)


@pytest.fixture(scope="session")
def launcher() -> Launcher:
    return Launcher()


@pytest.fixture(scope="session")
def trainer_cache(tmp_path_factory) -> Path:
    """A node-local shard cache shared by the session's runs (the corpus is prepared once)."""
    return tmp_path_factory.mktemp("trainer-cache")


@pytest.fixture(scope="session")
def two_rank_results(tmp_path_factory, trainer_cache) -> dict:
    """dp, zero1, zero2, zero3, tp, pp (+ dp without clipping) on 2 ranks, one launch."""
    runs = [
        {"name": "dp", "config": parity_config("dp", trainer_cache)},
        {"name": "zero1", "config": parity_config("zero1", trainer_cache)},
        {"name": "zero2", "config": parity_config("zero2", trainer_cache)},
        {"name": "zero3", "config": parity_config("zero3", trainer_cache)},
        {"name": "tp", "config": parity_config("tp", trainer_cache, tp=2)},
        {"name": "pp", "config": parity_config("pp", trainer_cache, pp=2)},
        {"name": "dp_noclip", "config": {**parity_config("dp", trainer_cache),
                                         "optimizer": {"lr": 3e-3, "warmup_steps": 1, "grad_clip": 0.0}}},
        *({"name": f"llama_{name}", "config": parity_config(name, trainer_cache, LLAMA, **dims)}
          for name, dims in (("dp", {}), ("zero1", {}), ("zero2", {}), ("zero3", {}), ("tp", {"tp": 2}),
                             ("pp", {"pp": 2}))),
    ]
    return run_strategies(tmp_path_factory.mktemp("two-rank"), 2, runs)


#: The Llama shape of the parity runs: 4 query heads sharing 2 key/value heads, so tp 2 splits both.
LLAMA = "llama-tiny"


@pytest.fixture(scope="session")
def single_process_results(tmp_path_factory, trainer_cache) -> dict:
    """The single-process reference runs (one rank, grad_accum 2): the Llama of every strategy's parity check."""
    runs = [{"name": "llama", "config": parity_config("dp", trainer_cache, LLAMA)}]
    return run_strategies(tmp_path_factory.mktemp("one-rank"), 1, runs)


@pytest.fixture(scope="session")
def four_rank_results(tmp_path_factory, trainer_cache) -> dict:
    """3d (dp 1 × tp 2 × pp 2), dp over 4 ranks (micro-batch 2), tp 2 × dp 2, and the Llama in 3d, one launch."""
    runs = [
        {"name": "3d", "config": parity_config("3d", trainer_cache, tp=2, pp=2)},
        {"name": "dp4", "config": parity_config("dp", trainer_cache, micro_batch=2)},
        {"name": "tp_dp2", "config": parity_config("tp", trainer_cache, tp=2)},
        {"name": "llama_3d", "config": parity_config("3d", trainer_cache, LLAMA, tp=2, pp=2)},
    ]
    return run_strategies(tmp_path_factory.mktemp("four-rank"), 4, runs)
