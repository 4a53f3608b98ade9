"""``trainledger sweep``: the pre-scaling trial. One tracked run per strategy,
for N steps, sharing a sweep id, one after another on the same nodes.

:func:`run_sweep` is the loop (the ``sweep`` command calls it; so does the
background sweep of ``trainledger demo``, through :func:`start_background`,
which runs ``python -m trainledger.runs.sweep run ...`` in its own session). Before the
first run the sweep records its plan in the ledger (setting ``sweep:<id>``: the
strategies, steps, and the driver's host and pid), so :func:`sweep_progress`
can say "3 of 5 strategies measured" while it runs, from any process.

A SIGTERM/SIGINT to the driver is passed on once to the running strategy's
supervisor (that run ends ``cancelled``) and stops the sweep: the strategies
after it are not started.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import yaml
from sqlalchemy import func
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.runs.launch import _alive
from trainledger.store.files import write_output
from trainledger.store.ids import validate_run_id
from trainledger.store.models import Run, RunStatus, Setting
from trainledger.store.settings import display_timezone

STRATEGIES = ("dp", "zero1", "zero2", "zero3", "pp", "tp", "3d")


def strategy_config(base: dict, strategy: str, processes: int) -> dict:
    """The base config with ``parallel`` set for ``strategy`` on ``processes`` ranks per node.

    dp/zero*: all ranks data-parallel; tp: all ranks tensor-parallel; pp: all
    ranks pipeline stages; 3d: tp = 2, pp = 2, the rest data-parallel.
    """
    cfg = copy.deepcopy(base)
    par = {k: v for k, v in (cfg.get("parallel") or {}).items() if k in ("micro_batch", "global_batch", "grad_accum")}
    par["strategy"] = strategy
    if strategy == "tp":
        par["tp"] = processes
    elif strategy == "pp":
        par["pp"] = processes
    elif strategy == "3d":
        par["tp"], par["pp"] = 2, 2
    cfg["parallel"] = par
    return cfg


def parse_strategies(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGIES]
    if bad or not names:
        raise LedgerInputError(f"--strategies: unknown {bad[0] if bad else '(empty)'!r}; use a comma list of {','.join(STRATEGIES)}")
    return names


def config_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("trainledger", appauthor=False)) / "sweeps"


def write_configs(base_path: Path, strategies: list[str], processes: int, sweep_id: str) -> dict[str, Path]:
    from trainledger.trainer.config import ConfigError, load_yaml, read_config_text

    validate_run_id(sweep_id, "sweep id")  # it names the sweep's folder

    try:
        base = load_yaml(read_config_text(base_path), base_path) or {}
    except ConfigError as exc:
        raise LedgerInputError(f"CONFIG: {exc}") from None
    if not isinstance(base, dict):
        raise LedgerInputError(f"CONFIG: {base_path} is not a mapping of config sections")
    out_dir = config_dir() / sweep_id
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for s in strategies:
        p = out_dir / f"{s}.yaml"
        text = yaml.safe_dump(strategy_config(base, s, 4 if s == "3d" and processes < 4 else processes), sort_keys=False)
        write_output(p, text.encode("utf-8"), flag="sweep config")
        paths[s] = p
    return paths


# --- the loop ------------------------------------------------------------------------

PLAN_PREFIX = "sweep:"  # setting key of a sweep's plan: sweep:<sweep id>


def new_sweep_id() -> str:
    import uuid

    return "sweep-" + uuid.uuid4().hex[:10]


SWEEP_LAUNCHERS = ("torchrun", "deepspeed")


@dataclass
class SweepRequest:
    """What ``trainledger sweep`` takes: strategies × steps on ``nodes`` nodes of ``gpus_per_node`` processes."""

    config: Path
    strategies: list[str]
    steps: int = 20
    nodes: int = 1
    gpus_per_node: Optional[int] = None  # default 2; 3d uses at least 4
    hostfile: Optional[Path] = None
    launcher: str = "torchrun"
    node_type: Optional[str] = None  # None: $TRAINLEDGER_NODE_TYPE, else the runs are recorded and not costed
    project: Optional[str] = None
    sweep_id: str = field(default_factory=new_sweep_id)
    #: prepared configs by entry name (``plan recommend --trial``): run as they are, not derived from ``config``
    configs: Optional[dict[str, Path]] = None
    processes_by_name: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.launcher not in SWEEP_LAUNCHERS:  # a sweep waits for each run here: no batch queue
            raise LedgerInputError(f"--launcher: a sweep runs under {' or '.join(SWEEP_LAUNCHERS)}, got {self.launcher!r}")

    def processes(self, strategy: str) -> int:
        if strategy in self.processes_by_name:
            return self.processes_by_name[strategy]
        gpn = self.gpus_per_node or 2
        return max(gpn, 4) if strategy == "3d" else gpn


@dataclass
class SweepOutcome:
    sweep_id: str
    runs: list[dict[str, Any]]  # strategy, run_id, exit_code; in the order they ran
    stopped_by: Optional[str] = None  # the signal that stopped the sweep early
    calibration: Optional[dict[str, Any]] = None  # the calibration fitted to the sweep's runs (or why none)


def _pid_start(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def record_plan(session: Session, req: SweepRequest, pid: int, log: Optional[Path] = None) -> dict[str, Any]:
    """Write the sweep's plan (setting ``sweep:<id>``) before its first run."""
    plan = {"strategies": list(req.strategies), "steps": req.steps, "nodes": req.nodes,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), "pid": pid, "pid_start": _pid_start(pid), "log": str(log) if log else None}
    value = json.dumps(plan, separators=(",", ":"))
    if len(value) > 1000:  # the setting's width; the log path is the only open-ended field
        plan["log"] = None
        value = json.dumps(plan, separators=(",", ":"))
    row = session.get(Setting, PLAN_PREFIX + req.sweep_id)
    if row is None:
        session.add(Setting(key=PLAN_PREFIX + req.sweep_id, value=value))
    else:
        row.value = value
    return plan


def _mark_stopped(url: str, sweep_id: str, why: str) -> None:
    from trainledger.store.db import get_engine, session_scope

    with session_scope(get_engine(url)) as s:
        row = s.get(Setting, PLAN_PREFIX + sweep_id)
        if row is not None:
            plan = json.loads(row.value)
            plan["stopped"] = why
            row.value = json.dumps(plan, separators=(",", ":"))


def sweep_plan(session: Session, sweep_id: str) -> Optional[dict[str, Any]]:
    """The plan a sweep recorded, or None (a sweep of an older trainledger, or one with ad-hoc sweep ids)."""
    row = session.get(Setting, PLAN_PREFIX + sweep_id)
    if row is None:
        return None
    try:
        return json.loads(row.value)
    except ValueError:
        return None


def planned_sweeps(session: Session) -> dict[str, dict[str, Any]]:
    """Every recorded plan by sweep id."""
    rows = session.exec(select(Setting).where(Setting.key.startswith(PLAN_PREFIX))).all()
    out = {}
    for r in rows:
        try:
            out[r.key[len(PLAN_PREFIX):]] = json.loads(r.value)
        except ValueError:
            continue
    return out


def run_sweep(url: str, req: SweepRequest, on_start: Optional[Callable[[int, int, str, str], None]] = None,
              record: bool = True, progress: Optional[Callable[[int, Optional[int]], None]] = None) -> SweepOutcome:
    """Run each strategy of ``req`` as a tracked run, one after another; returns what ran.

    ``on_start(i, n, strategy, run_id)`` is called as each run starts, ``progress(runs done, runs)`` as each
    ends. With
    ``record`` the plan is written first (:func:`start_background` writes it
    itself, before the driver process is up).
    """
    from trainledger.runs.launch import LaunchRequest, cancel, prepare, record_process, start
    from trainledger.store.db import get_engine, session_scope

    names = list(req.strategies)
    paths = req.configs or write_configs(req.config, names, req.gpus_per_node or 2, req.sweep_id)
    if record:
        with session_scope(get_engine(url)) as s:
            record_plan(s, req, os.getpid())
    outcome = SweepOutcome(req.sweep_id, [])
    current: list[subprocess.Popen] = []

    def stop(signum, frame):
        if outcome.stopped_by is None:
            outcome.stopped_by = signal.Signals(signum).name
            for proc in current:  # once: the supervisor forwards it to the launcher, rank 0 records cancelled
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for i, strat in enumerate(names, 1):
            if outcome.stopped_by:
                break
            lreq = LaunchRequest(config=paths[strat], nodes=req.nodes, gpus_per_node=req.processes(strat),
                                 hostfile=req.hostfile, launcher=req.launcher, node_type=req.node_type,
                                 project=req.project, name=f"{req.sweep_id}-{strat}", sweep_id=req.sweep_id,
                                 steps=req.steps)
            with session_scope(get_engine(url)) as s:
                prep = prepare(s, lreq, url)
            if outcome.stopped_by:  # stopped while registering: the run never starts
                with session_scope(get_engine(url)) as s:
                    cancel(s, prep.run_id)
                break
            if on_start:
                on_start(i, len(names), strat, prep.run_id)
            proc = start(prep, url, detach=False)
            current[:] = [proc]
            with session_scope(get_engine(url)) as s:
                record_process(s, prep.run_id, proc.pid)
            if outcome.stopped_by:  # a signal between start and now: pass it on
                proc.send_signal(signal.SIGTERM)
            code = proc.wait()
            current.clear()
            if outcome.stopped_by:
                _close_stopped(url, prep.run_id, outcome.stopped_by)
            outcome.runs.append({"strategy": strat, "run_id": prep.run_id, "exit_code": code})
            if progress:
                progress(len(outcome.runs), len(names))
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if outcome.stopped_by:
            _mark_stopped(url, req.sweep_id, outcome.stopped_by)
    if not outcome.stopped_by:
        outcome.calibration = calibrate_sweep(url, req.sweep_id)
    return outcome


def calibrate_sweep(url: str, sweep_id: str) -> dict[str, Any]:
    """A finished sweep calibrates the planner (``trainledger.runs.calibrate``): its calibrations, or why none."""
    from trainledger.runs.calibrate import calibrate
    from trainledger.store.db import get_engine, session_scope

    try:
        with session_scope(get_engine(url)) as s:
            return {"calibrations": [{k: v for k, v in c.items() if k != "runs"}
                                     for c in calibrate(s, sweep_id=sweep_id)]}
    except LedgerInputError as exc:
        return {"calibrations": [], "reason": str(exc)}


def _close_stopped(url: str, run_id: str, why: str) -> None:
    """After a stop signal: a run whose supervisor died before it could settle it (the signal came while it
    was starting) is cancelled here, and anything left in its process group is killed."""
    from trainledger.store.db import get_engine, session_scope
    from trainledger.store.types import utcnow

    with session_scope(get_engine(url)) as s:
        run = s.get(Run, run_id)
        if run is None or run.status not in (RunStatus.queued, RunStatus.running):
            return
        if run.pgid:
            try:
                os.killpg(run.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        run.status, run.ended_at = RunStatus.cancelled, utcnow()
        run.started_at = run.started_at or run.ended_at
        run.error = f"cancelled: the sweep was stopped ({why})"


# --- in the background ---------------------------------------------------------------

def start_background(url: str, req: SweepRequest, log_path: Optional[Path] = None) -> dict[str, Any]:
    """Start :func:`run_sweep` in a detached process (its own session); returns at once.

    The driver is ``python -m trainledger.runs.sweep run ...``, started as an argument
    list; the ledger URL travels in the environment. Its output goes to
    ``log_path`` (default: the runs' log directory, ``<sweep id>.log``). The
    plan is recorded before this returns, so the sweep shows up at once.
    """
    from trainledger.runs.launch import default_log_dir
    from trainledger.store.db import get_engine, session_scope

    log_path = Path(log_path or default_log_dir() / f"{req.sweep_id}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "trainledger.runs.sweep", "run", str(Path(req.config).resolve()),
            "--sweep-id", req.sweep_id, "--strategies", ",".join(req.strategies), "--steps", str(req.steps),
            "--nodes", str(req.nodes), "--launcher", req.launcher]
    for flag, value in (("--gpus-per-node", req.gpus_per_node), ("--hostfile", req.hostfile), ("--project", req.project),
                        ("--node-type", req.node_type)):
        if value is not None:
            argv += [flag, str(value)]
    env = {**os.environ, "TRAINLEDGER_DB_URL": url, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, env=env, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
    with session_scope(get_engine(url)) as s:
        record_plan(s, req, proc.pid, log_path)
    return {"sweep_id": req.sweep_id, "strategies": list(req.strategies), "steps": req.steps, "pid": proc.pid,
            "log": str(log_path)}


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m trainledger.runs.sweep", description="The driver of a background sweep "
                                     "(started by trainledger demo); the ledger URL comes from $TRAINLEDGER_DB_URL.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("config", type=Path)
    p.add_argument("--sweep-id", required=True)
    p.add_argument("--strategies", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int)
    p.add_argument("--hostfile", type=Path)
    p.add_argument("--launcher", default="torchrun")
    p.add_argument("--node-type", default=None)
    p.add_argument("--project")
    a = parser.parse_args(argv)
    url = os.environ["TRAINLEDGER_DB_URL"]
    req = SweepRequest(config=a.config, strategies=parse_strategies(a.strategies), steps=a.steps, nodes=a.nodes,
                       gpus_per_node=a.gpus_per_node, hostfile=a.hostfile, launcher=a.launcher,
                       node_type=a.node_type, project=a.project, sweep_id=a.sweep_id)
    try:
        outcome = run_sweep(url, req, record=False,
                            on_start=lambda i, n, strat, rid: print(f"[{i}/{n}] {strat}: run {rid}", flush=True))
    except LedgerInputError as exc:
        print(f"error: {str(exc).splitlines()[0]}", flush=True)
        _mark_stopped(url, req.sweep_id, "error")
        return 2
    done = ", ".join(f"{r['strategy']}={'ok' if r['exit_code'] == 0 else 'exit ' + str(r['exit_code'])}" for r in outcome.runs)
    print(f"sweep {req.sweep_id}: {done}" + (f"; stopped by {outcome.stopped_by}" if outcome.stopped_by else ""), flush=True)
    return 130 if outcome.stopped_by else 0


# --- progress ------------------------------------------------------------------------

def _driver_alive(plan: dict[str, Any]) -> Optional[bool]:
    """Whether the sweep's driver process still runs; None when it runs on another host."""
    if plan.get("host") != socket.gethostname() or not plan.get("pid"):
        return None
    pid = int(plan["pid"])
    if not _alive(pid):  # gone, or a zombie
        return False
    start_ticks = _pid_start(pid)
    if plan.get("pid_start") and start_ticks is not None and start_ticks != plan["pid_start"]:
        return False  # the pid was reused
    return True


def is_measured(status: RunStatus, tokens_per_s: Optional[float]) -> bool:
    """A run ``strategy_comparison`` puts in its table: succeeded with a throughput."""
    return status == RunStatus.succeeded and bool(tokens_per_s)


def sweep_progress(session: Session, sweep_id: str) -> dict[str, Any]:
    """How far a sweep has got: one slot per planned strategy, in order.

    Slot states: ``measured`` (succeeded with tokens/s: a row of the comparison),
    ``running`` (queued or running), ``not measured`` (failed, cancelled, crashed,
    or no throughput), ``waiting`` (not started yet). The sweep's ``state``:
    ``running`` while a run is active or its driver will start the next one,
    ``finished`` when every strategy has run, ``stopped`` when its driver is gone
    (signal, error, killed) with strategies left, ``unknown`` when the driver runs
    on another host and nothing is active. Without a recorded plan the slots are
    the sweep's runs.
    """
    from trainledger.runs.registry import reap_stale

    reap_stale(session)
    plan = sweep_plan(session, sweep_id)
    runs = session.exec(select(Run.id, Run.strategy, Run.status, Run.tokens_per_s, Run.error)
                        .where(Run.sweep_id == sweep_id).order_by(Run.created_at, Run.id)).all()
    strategies = list(plan["strategies"]) if plan else [r[1] or "?" for r in runs]
    slots = []
    for i, strat in enumerate(strategies):
        if i >= len(runs):
            slots.append({"strategy": strat, "run_id": None, "status": None, "state": "waiting", "error": None})
            continue
        rid, rstrat, status, tps, error = runs[i]
        state = ("measured" if is_measured(status, tps) else
                 "running" if status in (RunStatus.queued, RunStatus.running) else "not measured")
        slots.append({"strategy": rstrat or strat, "run_id": rid, "status": status.value, "state": state, "error": error})
    by_state = {k: [s for s in slots if s["state"] == k] for k in ("measured", "running", "not measured", "waiting")}
    alive = _driver_alive(plan) if plan else None
    if by_state["running"]:
        state = "running"
    elif not by_state["waiting"]:
        state = "finished"
    elif plan and plan.get("stopped"):
        state = "stopped"
    elif alive is None:
        state = "unknown"
    else:
        state = "running" if alive else "stopped"
    return {"sweep_id": sweep_id, "planned": plan is not None, "total": len(slots),
            "measured": len(by_state["measured"]), "slots": slots,
            "running": by_state["running"], "not_measured": by_state["not measured"], "waiting": by_state["waiting"],
            "state": state, "stopped_by": plan.get("stopped") if plan else None,
            "steps": plan.get("steps") if plan else None, "host": plan.get("host") if plan else None,
            "log": plan.get("log") if plan else None,
            "version": ";".join(f"{s['run_id']}:{s['status']}" for s in slots if s["run_id"])}


if __name__ == "__main__":
    from trainledger.process import tune_gc

    tune_gc()  # a process of trainledger's own (ledger/process.py)
    sys.exit(_main(sys.argv[1:]))


SWEEP_LIMIT = 50


def list_sweeps(session: Session, limit: int = SWEEP_LIMIT) -> list[dict[str, Any]]:
    """Sweeps (runs sharing a sweep id), newest first, aggregated in SQL; plus recorded sweep
    plans that have no run yet (a sweep that is just starting), with ``runs`` = 0."""
    rows = session.exec(
        select(Run.sweep_id, func.count(Run.id), func.min(Run.started_at), func.max(Run.nodes), func.max(Run.created_at))
        .where(Run.sweep_id.is_not(None))
        .group_by(Run.sweep_id)
        .order_by(func.max(Run.created_at).desc(), Run.sweep_id)
        .limit(limit)).all()
    tz = display_timezone(session)
    out = [{"sweep_id": sid, "runs": n, "started_at": started.astimezone(tz) if started else None, "nodes": nodes,
            "_created": created.replace(tzinfo=created.tzinfo or timezone.utc)}
           for sid, n, started, nodes, created in rows]
    plans = planned_sweeps(session)
    with_runs = set(session.exec(select(Run.sweep_id).where(Run.sweep_id.in_(list(plans))).distinct()).all()) if plans else set()
    for sid, plan in plans.items():
        if sid in with_runs:
            continue
        try:
            created = datetime.fromisoformat(plan.get("created_at") or "")
        except ValueError:
            continue
        out.append({"sweep_id": sid, "runs": 0, "started_at": None, "nodes": plan.get("nodes"), "_created": created})
    out.sort(key=lambda r: r.pop("_created"), reverse=True)
    return out[:limit]
