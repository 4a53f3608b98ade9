"""Tracking overhead: median step time of the ``tiny`` shape with full tracking ÷ without.

The loop is ``trainer/configs/dp.yaml`` (tiny shape, one CPU rank, gloo, torch
with one intra-op thread), trained by the real ``Trainer``. Tracked runs use
the real callback with everything on: ``LedgerTracker`` (journal + writer
thread into a SQLite ledger), the ``UtilSampler`` thread and the Prometheus
``Exporter`` (``metrics_port=0``), at the default intervals (flush 2 s,
heartbeat 5 s, sampler 1 s).

Noise is shared by running both sides at the same time: two worker processes
(``python -m bench.overhead --worker``) each pin every thread (the tracker's
too, so its background work competes with its own training loop: the
conservative case) to one of two CPUs and start each round's steps together (a
barrier after ``on_start``). Which process is tracked alternates every round and
the CPUs swap every two rounds, so in four rounds each process is tracked once
on each CPU: a process or a CPU that happens to be faster is on both sides
equally often. Round 0 of the full run is a warm-up. The first steps of every
run are dropped; the ratio is the median of all tracked step times ÷ the median
of all untracked ones (beside it: the geometric mean of the per-round ratios
with its standard error, the spread to expect on a shared machine). An A/A run,
``TRAINLEDGER_BENCH_AA=1`` (both sides untracked), checks the design. With a
single CPU the runs alternate in one process instead (ABBA order).

(Tried and dropped: both sides in lockstep on one CPU, step for step. It shares
noise best but is biased: the tracker's threads, waiting for the GIL during its
own step, run while the other side steps, so tracked looked ~2% *faster*.)

Measured directly as well: the time inside the tracker's ``on_step`` (µs per
step) and the process CPU time per step (all threads): tracked ÷ untracked CPU
is a second, less load-sensitive view of the same cost.

Target (SPEC §11): ≤ 1.01.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from bench import ROOT, Result, log

PROTO = "@@bench "
WARMUP = 3


def _pin(cpu: int) -> None:
    """Pin every thread of this process (the tracker's too) to one CPU."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except (ProcessLookupError, OSError):
            pass


def _setup(steps: int, work: Path):
    import logging

    import torch

    torch.set_num_threads(1)
    from deepspeed.utils import logger as ds_logger
    from trainledger.trainer.train import load_run_config

    ds_logger.setLevel(logging.WARNING)
    cfg = load_run_config(ROOT / "trainer" / "configs" / "dp.yaml", steps=steps)
    from dataclasses import replace

    cfg = replace(cfg, log_every=10**9)
    return cfg


def _one_run(cfg, steps: int, tracked: bool, db_url: str, work: Path, barrier=None) -> dict[str, Any]:
    """One Trainer run; returns step times (warm-up dropped), µs in on_step and process CPU per step."""
    from trainledger.trainer.engine import Trainer
    from trainledger.trainer.parallel import resolve_plan
    from trainledger.trainer.tracking import LedgerTracker, TrackingOptions

    class Timed:
        """Wraps the tracker's on_step to measure the time spent in it."""

        def __init__(self, tracker: LedgerTracker):
            self.t = tracker
            self.spent = 0.0

        def on_start(self, info):
            self.t.on_start(info)

        def on_step(self, step, metrics):
            t0 = time.perf_counter()
            self.t.on_step(step, metrics)
            self.spent += time.perf_counter() - t0

        def on_end(self, result):
            self.t.on_end(result)

        def on_error(self, exc):
            self.t.on_error(exc)

    class Clock:
        """Process CPU time (all threads: the tracker's too) over the measured steps."""

        def __init__(self):
            self.cpu0 = self.cpu1 = 0.0

        def on_step(self, step, metrics):
            if step == WARMUP - 1:
                self.cpu0 = time.process_time()
            elif step == steps - 1:
                self.cpu1 = time.process_time()

    callbacks: list[Any] = []
    timed = None
    if tracked and os.environ.get("TRAINLEDGER_BENCH_AA") != "1":  # A/A check of the design: both sides untracked
        opts = TrackingOptions(db_url=db_url, journal_dir=work / "journal", name="bench-overhead",
                               project="bench", metrics_port=0)
        timed = Timed(LedgerTracker(opts))
        callbacks.append(timed)
    if barrier is not None:
        callbacks.append(barrier)  # after the tracker's on_start: its threads exist and get pinned too
    clock = Clock()
    callbacks.append(clock)
    result = Trainer(cfg, resolve_plan(cfg, world_size=1), callbacks=callbacks).run()
    times = result.step_times_s[WARMUP:]
    return {"tracked": tracked, "times": times, "median_s": sorted(times)[len(times) // 2],
            "on_step_s": (timed.spent / steps) if timed else 0.0,
            "cpu_per_step_s": (clock.cpu1 - clock.cpu0) / (steps - WARMUP)}


def _concurrent_worker(parity: int, rounds: int, steps: int, work: Path) -> list[dict[str, Any]]:
    """One side of the concurrent design: ``rounds`` runs, each released by the parent's "go CPU"."""
    import torch

    cfg = _setup(steps, work)
    db_url = f"sqlite:///{work / 'ledger.db'}"

    class Barrier:
        """Both sides start their steps together, each pinned to the CPU the parent names."""

        def __init__(self, r: int):
            self.r = r

        def on_start(self, info):
            print(f"{PROTO}ready {self.r}", flush=True)
            line = sys.stdin.readline().split()
            if len(line) != 2 or line[0] != "go":
                raise RuntimeError(f"bench.overhead worker: expected 'go CPU', got {line!r}")
            _pin(int(line[1]))  # every thread, the tracker's too

    out = []
    for r in range(rounds):
        res = _one_run(cfg, steps, r % 2 == parity, db_url, work, Barrier(r))  # tracked every other round
        res["round"] = r
        out.append(res)
    print(f"{PROTO}done", flush=True)
    assert torch.get_num_threads() == 1
    return out


def _sequential_worker(pairs: int, steps: int, work: Path, warmup_run: bool) -> list[dict[str, Any]]:
    """The single-CPU design: untracked and tracked runs alternate in one process (ABBA)."""
    cfg = _setup(steps, work)
    db_url = f"sqlite:///{work / 'ledger.db'}"
    if warmup_run:
        _one_run(cfg, steps, False, db_url, work)  # data shards, imports, allocator
    out = []
    for i in range(pairs):
        for flag in ((False, True) if i % 2 == 0 else (True, False)):
            res = _one_run(cfg, steps, flag, db_url, work)
            res["round"] = i
            out.append(res)
    return out


def _env(work: Path) -> dict[str, str]:
    env = {**os.environ, "TRAINLEDGER_CACHE_DIR": str(ROOT / "bench" / "results" / "shard-cache"),
           "TRAINLEDGER_JOURNAL_DIR": str(work / "journal"), "XDG_DATA_HOME": str(work / "xdg"),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("TRAINLEDGER_RUN_ID", None)
    return env


def _run_concurrent(cpus: list[int], rounds: int, steps: int, work: Path) -> list[dict[str, Any]]:
    from trainledger.store.db import make_engine

    make_engine(f"sqlite:///{work / 'ledger.db'}").dispose()  # schema once, outside the runs
    procs = {}
    logs = {}
    for parity, mode in enumerate(("w0", "w1")):
        logs[mode] = open(work / f"{mode}.log", "w")
        procs[mode] = subprocess.Popen(
            [sys.executable, "-m", "bench.overhead", "--worker", "--mode", "concurrent", "--parity", str(parity),
             "--rounds", str(rounds),
             "--steps", str(steps), "--work", str(work), "--out", str(work / f"{mode}.json")],
            cwd=ROOT, env=_env(work), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs[mode], text=True)

    def wait_for(mode: str, what: str) -> None:
        for line in procs[mode].stdout:
            if line.startswith(PROTO):
                if line[len(PROTO):].strip() == what:
                    return
        code = procs[mode].wait()
        tail = (work / f"{mode}.log").read_text().strip().splitlines()[-5:]
        raise RuntimeError(f"{mode} worker exited {code} before '{what}': {' | '.join(tail)}")

    try:
        for r in range(rounds):
            for mode in procs:
                wait_for(mode, f"ready {r}")
            # w0 is tracked in even rounds, w1 in odd ones; w0's CPU flips every two rounds: in four rounds
            # each process is tracked once on each CPU
            w0_cpu = (r // 2) % 2
            for mode, cpu in (("w0", cpus[w0_cpu]), ("w1", cpus[1 - w0_cpu])):
                procs[mode].stdin.write(f"go {cpu}\n")
                procs[mode].stdin.flush()
        for mode in procs:
            wait_for(mode, "done")
            procs[mode].wait(timeout=600)
    finally:
        for mode, p in procs.items():
            if p.poll() is None:
                p.kill()
            logs[mode].close()
    out = []
    for mode in procs:
        path = work / f"{mode}.json"
        if not path.exists():
            tail = (work / f"{mode}.log").read_text().strip().splitlines()[-5:]
            raise RuntimeError(f"{mode} worker wrote no result: {' | '.join(tail)}")
        out += json.loads(path.read_text())
    return out


def run(quick: bool) -> Result:
    from bench import median

    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = []
    concurrent = len(cpus) >= 2
    res = Result("tracking_overhead", "tracking overhead, tiny shape (ledger + sampler + exporter)",
                 "the same loop untracked, at the same time on the other CPU" if concurrent
                 else "the same loop untracked, interleaved ABBA", 1.01, "<=")
    steps = 10 if quick else 60
    rounds = 1 if quick else 9  # round 0 of the full run is a warm-up, dropped: 8 rounds = 2 × all 4 placements
    with tempfile.TemporaryDirectory(prefix="tl-bench-overhead-") as tmp:
        work = Path(tmp)
        if concurrent:
            log(f"overhead: {rounds} round(s) of {steps}-step runs, tracked and untracked at the same time on "
                f"CPUs {cpus[0]} and {cpus[1]} (process, CPU and role rotating) …")
            runs = _run_concurrent(cpus[:2], rounds, steps, work)
            if not quick:
                runs = [r for r in runs if r["round"] > 0]
        else:
            pairs = 1 if quick else 6
            log(f"overhead: one CPU: {pairs} ABBA pair(s) of {steps}-step runs in a worker process …")
            out = work / "out.json"
            cmd = [sys.executable, "-m", "bench.overhead", "--worker", "--mode", "sequential", "--rounds", str(pairs),
                   "--steps", str(steps), "--work", str(work), "--out", str(out)] + (["--no-warmup-run"] if quick else [])
            proc = subprocess.run(cmd, cwd=ROOT, env=_env(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=1800)
            if proc.returncode != 0 or not out.exists():
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
                raise RuntimeError(f"worker exited {proc.returncode}: {' | '.join(tail)}")
            runs = json.loads(out.read_text())
    tracked = [t for r in runs if r["tracked"] for t in r["times"]]
    untracked = [t for r in runs if not r["tracked"] for t in r["times"]]
    t, u = median(tracked), median(untracked)
    res.ratio = t / u
    by_round: dict[int, dict[bool, dict]] = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[r["tracked"]] = r
    pair_ratios = [round(v[True]["median_s"] / v[False]["median_s"], 4) for _, v in sorted(by_round.items())
                   if True in v and False in v]
    import math

    logs_ = [math.log(x) for x in pair_ratios]
    gmean = math.exp(sum(logs_) / len(logs_)) if logs_ else None
    se = (math.sqrt(sum((x - sum(logs_) / len(logs_)) ** 2 for x in logs_) / (len(logs_) - 1) / len(logs_))
          if len(logs_) > 1 else None)
    on_step_us = median([r["on_step_s"] for r in runs if r["tracked"]]) * 1e6
    cpu_t = median([r["cpu_per_step_s"] for r in runs if r["tracked"]])
    cpu_u = median([r["cpu_per_step_s"] for r in runs if not r["tracked"]])
    res.measured.update({"design": "concurrent on two pinned CPUs; process, CPU and role rotate per round"
                         if concurrent else "sequential ABBA",
                         "runs_per_side": len(by_round), "steps_per_run": steps, "warmup_steps_dropped": WARMUP,
                         "tracked_median_step_s": round(t, 5), "untracked_median_step_s": round(u, 5),
                         "pair_ratios": pair_ratios, "round_ratio_geomean": round(gmean, 4) if gmean else None,
                         "round_ratio_stderr_pct": round(se * 100, 2) if se is not None else None,
                         "on_step_us_per_step": round(on_step_us, 1),
                         "on_step_share": round(on_step_us / 1e6 / u, 6),
                         "cpu_per_step_tracked_s": round(cpu_t, 5), "cpu_per_step_untracked_s": round(cpu_u, 5),
                         "cpu_ratio": round(cpu_t / cpu_u, 4)})
    res.target_text = "≤ 1.01"
    res.absolute = (f"tracked {t * 1000:.1f} ms vs untracked {u * 1000:.1f} ms per step (median of "
                    f"{len(tracked)}+{len(untracked)} steps); on_step {on_step_us:.0f} µs")
    res.notes.append(f"time inside LedgerTracker.on_step: {on_step_us:.1f} µs per step "
                     f"({on_step_us / 1e6 / u:.4%} of an untracked step); process CPU per step (all threads) "
                     f"tracked ÷ untracked: {cpu_t / cpu_u:.4f}; per-round ratios {pair_ratios}"
                     + (f", geometric mean {gmean:.4f} ± {se * 100:.2f}% (standard error)" if se is not None else ""))
    return res


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.overhead")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--mode", choices=("concurrent", "sequential"), default="sequential")
    ap.add_argument("--parity", type=int, default=0, help="concurrent: tracked in rounds r with r %% 2 == parity")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--no-warmup-run", action="store_true")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if a.worker:
        if a.mode == "sequential":
            data = _sequential_worker(a.rounds, a.steps, a.work, warmup_run=not a.no_warmup_run)
        else:
            data = _concurrent_worker(a.parity, a.rounds, a.steps, a.work)
        a.out.write_text(json.dumps(data))
        sys.stdout.flush()
        os._exit(0)  # gloo/TCPStore threads: leave without interpreter teardown (as trainledger.trainer.train does)
    print(json.dumps(run(quick=a.quick).to_dict(), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
