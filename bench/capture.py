"""Overhead of recording your own training code: the run wrapper and the Python API.

``wrapper_overhead``: the same job run directly and under ``trainledger run``
(ledger, journal, heartbeat, the process-tree CPU sampler every second), in
ABBA order. The job (``bench/capture_job.py``) times its own steps: a fixed
amount of pure-Python work per step, with one thread, like a CPU-bound training
step. Measured: the median step time wrapped ÷ direct (target ≤ 1.01) and the
wall time the wrapper adds to the job (wrapped − direct wall time of the whole
command, start-up and final write included; target ≤ 1 s).

``api_overhead``: one process runs the same loop of training steps (a small
torch MLP, forward + backward + AdamW, one thread) with and without
``trainledger.track``'s ``run.log(step=, tokens=, loss=, lr=)`` after every step (a ~20 ms step on one
thread: a small step for LLM training, so the conservative case), in
ABBA order; its writer thread journals (fsync) and applies to a SQLite ledger
every 2 s as in production. Measured: the median step time logged ÷ not
(target ≤ 1.01), and the cost of one ``run.log`` call in µs (the mean over
every call, and the p99).

``wrapper_start``: the time from starting ``trainledger run`` to the first
instruction of its command (``date +%s.%N`` printed by the command itself),
with a free SQLite ledger and with the same ledger locked by a real second
process (an open ``BEGIN IMMEDIATE``), alternating. Target: the command
starts within 1 s whatever the ledger's state (before issue 24 the lock
delayed it by the 60 s busy timeout, twice). The ratio is locked ÷ free.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import ROOT, Result, log

JOB = ROOT / "bench" / "capture_job.py"


def _env(work: Path) -> dict[str, str]:
    env = {**os.environ, "TRAINLEDGER_JOURNAL_DIR": str(work / "journal"), "XDG_DATA_HOME": str(work / "xdg"),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for k in ("TRAINLEDGER_RUN_ID", "TRAINLEDGER_WRAPPED", "TRAINLEDGER_DB_URL"):
        env.pop(k, None)
    return env


def _job(work: Path, wrapped: bool, steps: int, db_url: str) -> dict[str, Any]:
    out = work / f"job-{time.monotonic_ns()}.json"
    cmd = [sys.executable, str(JOB), str(out), str(steps)]
    if wrapped:
        cmd = [sys.executable, "-m", "trainledger.cli", "run", "--quiet", "--db", db_url, "--project", "bench", "--", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=_env(work), cwd=ROOT, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"{'wrapped ' if wrapped else ''}job exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    data = json.loads(out.read_text())
    data.update(wall_s=wall, wrapped=wrapped)
    return data


def run_wrapper(quick: bool) -> Result:
    res = Result("wrapper_overhead", "trainledger run around a CPU-bound job (sampler, heartbeat, journal, ledger)",
                 "the same job run directly, ABBA", 1.01, "<=")
    res.target_text = "≤ 1.01 step time, ≤ 1 s wall"
    pairs, steps = (1, 40) if quick else (6, 150)
    with tempfile.TemporaryDirectory(prefix="tl-bench-wrapper-") as tmp:
        work = Path(tmp)
        db_url = f"sqlite:///{work / 'ledger.db'}"
        from trainledger.store.db import make_engine

        make_engine(db_url).dispose()  # the schema once, outside the runs
        runs = []
        for i in range(pairs):
            log(f"wrapper overhead: pair {i + 1}/{pairs}", progress=True)
            for wrapped in ((False, True) if i % 2 == 0 else (True, False)):
                runs.append(_job(work, wrapped, steps, db_url))
    direct = [r for r in runs if not r["wrapped"]]
    wrapped = [r for r in runs if r["wrapped"]]
    step_d = statistics.median(t for r in direct for t in r["step_s"])
    step_w = statistics.median(t for r in wrapped for t in r["step_s"])
    added = statistics.median(w["wall_s"] - d["wall_s"] for w, d in zip(wrapped, direct))
    res.ratio = step_w / step_d
    res.extra_targets.append({"name": "wall time added (s)", "value": added, "target": 1.0, "op": "<="})
    res.measured.update(step_direct_s=step_d, step_wrapped_s=step_w, wall_added_s=added, pairs=pairs, steps=steps,
                        wall_direct_s=statistics.median(r["wall_s"] for r in direct),
                        wall_wrapped_s=statistics.median(r["wall_s"] for r in wrapped))
    res.absolute = (f"step {step_w * 1000:.2f} vs {step_d * 1000:.2f} ms (median of {len(wrapped) * steps} + "
                    f"{len(direct) * steps} steps); the wrapper adds {added:.2f} s to the job's wall time")
    return res


def _mlp_step(width: int = 1024):
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Linear(2 * width, width))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(128, width)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def _loop(step, steps: int, run=None) -> tuple[list[float], list[float]]:
    times, log_s = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        loss = step()
        if run is not None:
            t1 = time.perf_counter()
            run.log(step=i, tokens=128 * 1024, loss=loss, lr=1e-3)
            log_s.append(time.perf_counter() - t1)
        times.append(time.perf_counter() - t0)
    return times, log_s


def run_api(quick: bool) -> Result:
    import trainledger

    res = Result("api_overhead", "trainledger.track: run.log() after every step (journal + writer thread)",
                 "the same loop without logging, ABBA in one process", 1.01, "<=")
    res.target_text = "≤ 1.01 step time"
    pairs, steps = (1, 20) if quick else (6, 250)  # quick: a run-through (the suite runs it), not a measurement
    step = _mlp_step(256 if quick else 1024)  # quick: a 16× smaller step (the suite's run-through: issue 38)
    _loop(step, 5 if quick else 30)  # warm-up: allocator, kernels
    plain, logged, calls, pair_ratios = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="tl-bench-api-") as tmp:
        work = Path(tmp)
        db_url = f"sqlite:///{work / 'ledger.db'}"
        for i in range(pairs):
            log(f"api overhead: pair {i + 1}/{pairs}", progress=True)
            medians = {}
            for with_log in ((False, True) if i % 2 == 0 else (True, False)):
                if not with_log:
                    t = _loop(step, steps)[0]
                    plain += t
                else:
                    with trainledger.track(project="bench", db=db_url, journal_dir=work / "journal",
                                      env={"USER": "bench"}) as run:
                        t, c = _loop(step, steps, run)
                    logged += t
                    calls += c
                medians[with_log] = statistics.median(t)
            pair_ratios.append(round(medians[True] / medians[False], 4))
    res.ratio = statistics.median(logged) / statistics.median(plain)
    res.measured["pair_ratios"] = pair_ratios
    calls_us = sorted(c * 1e6 for c in calls)
    res.measured.update(step_plain_s=statistics.median(plain), step_logged_s=statistics.median(logged),
                        log_call_mean_us=statistics.fmean(calls_us), log_call_p99_us=calls_us[int(0.99 * (len(calls_us) - 1))],
                        steps=len(logged))
    res.absolute = (f"step {statistics.median(logged) * 1000:.3f} vs {statistics.median(plain) * 1000:.3f} ms "
                    f"({len(logged)} + {len(plain)} steps); run.log {res.measured['log_call_mean_us']:.1f} µs mean, "
                    f"{res.measured['log_call_p99_us']:.1f} µs p99")
    return res


_LOCKER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
"""


def _start_delay(work: Path, db_url: str, then=None) -> float:
    """Seconds from starting the wrapper to its command's first instruction; ``then()`` runs as soon as the
    command has started (the lock is released there, so the wrapper's end does not wait for it)."""
    env = {**_env(work), "TRAINLEDGER_LEDGER_WAIT_S": "0"}
    cmd = [sys.executable, "-m", "trainledger.cli", "run", "--quiet", "--db", db_url, "--", "date", "+%s.%N"]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    if then is not None:
        then()
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0 or not first.strip():
        raise RuntimeError(f"wrapped date exited {proc.returncode}: {err.strip()[-300:]}")
    return float(first.split()[0]) - t0


def run_wrapper_start(quick: bool) -> Result:
    res = Result("wrapper_start", "trainledger run: start of the command with a SQLite ledger locked by another writer",
                 "the same with a free ledger, alternating", None, "<=")
    res.target_text = "≤ 1 s locked"
    rounds = 1 if quick else 6  # quick: a run-through (the suite runs it), not a measurement
    free, locked = [], []
    with tempfile.TemporaryDirectory(prefix="tl-bench-start-") as tmp:
        work = Path(tmp)
        db_url = f"sqlite:///{work / 'ledger.db'}"
        from trainledger.store.db import make_engine

        make_engine(db_url).dispose()
        for i in range(rounds):
            log(f"wrapper start: round {i + 1}/{rounds}", progress=True)
            free.append(_start_delay(work, db_url))
            holder = subprocess.Popen([sys.executable, "-c", _LOCKER, str(work / "ledger.db")], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
            def release() -> None:
                if not holder.stdin.closed:
                    holder.stdin.close()
            try:
                assert holder.stdout.readline().strip() == "locked"
                locked.append(_start_delay(work, db_url, then=release))
            finally:
                release()
                holder.wait(timeout=60)
    free_s, locked_s = statistics.median(free), statistics.median(locked)
    t0 = time.perf_counter()  # the floor: the interpreter and the CLI's imports alone, on the same machine now
    subprocess.run([sys.executable, "-c", "import trainledger.cli.commands"], env=_env(Path(tempfile.gettempdir())), cwd=ROOT,
                   check=True, timeout=600)
    res.measured["cli_import_s"] = time.perf_counter() - t0
    res.ratio = locked_s / free_s
    res.extra_targets.append({"name": "start with a locked ledger (s)", "value": max(locked), "target": 1.0, "op": "<="})
    res.measured.update(free_s=free, locked_s=locked, free_median_s=free_s, locked_median_s=locked_s, rounds=rounds)
    res.absolute = (f"command starts {locked_s:.2f} s (max {max(locked):.2f}) after the wrapper with a locked ledger, "
                    f"{free_s:.2f} s with a free one (medians of {rounds}); importing the CLI alone "
                    f"{res.measured['cli_import_s']:.2f} s")
    return res
