"""``trainledger launch`` and ``runs cancel``: tracked runs started from the ledger.

A launch validates the plan (before any process starts), registers the run
as ``queued``, and starts a small *supervisor* process in its own session.
The supervisor runs the launcher command (torchrun or the DeepSpeed
launcher) as an argument list — never a shell string — with the ledger URL
in the environment (so passwords never appear in ``ps``). When the launcher
exits, the supervisor replays the run's journal and settles a run that ended
without saying so (never started → failed; stopped heartbeating → crashed).

Process tree and signals::

    trainledger launch ──(waits, unless --detach)──▶ supervisor  [new session = run.pgid]
                                                       └─▶ torchrun / deepspeed  [dies with the supervisor]
                                                             └─▶ ranks           [die with their launcher]

``runs cancel`` sends SIGTERM to the supervisor, which forwards it once to
the launcher, which forwards it to the ranks: rank 0 records ``cancelled``.
After a grace period anything left in the session gets SIGKILL.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.sources.capture.signals import pdeathsig
from trainledger.sources.record import outcome
from trainledger.store.defaults import default_node_type, has_offer, warn_not_costed
from trainledger.store.files import write_output
from trainledger.store.ids import validate_run_id
from trainledger.store.models import NodeType, Offer, Run, RunStatus
from trainledger.store.types import utcnow

LAUNCHERS = ("torchrun", "deepspeed", "slurm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LaunchRequest:
    config: Path
    nodes: int = 1
    gpus_per_node: Optional[int] = None
    hostfile: Optional[Path] = None
    launcher: str = "torchrun"
    node_type: Optional[str] = None  # None: $TRAINLEDGER_NODE_TYPE, else recorded and not costed
    offer: Optional[str] = None
    project: Optional[str] = None
    user: Optional[str] = None
    name: Optional[str] = None
    sweep_id: Optional[str] = None
    steps: Optional[int] = None
    metrics_port: Optional[int] = None
    journal_dir: Optional[Path] = None
    log_dir: Optional[Path] = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # torchrun on several nodes, one launch per node (no ssh): see :func:`node_of_several`
    node_rank: Optional[int] = None
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    run_id: Optional[str] = None


@dataclass
class Prepared:
    run_id: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    script: Optional[Path] = None  # slurm


def default_log_dir() -> Path:
    """The ledger's own run directory on this host: launched runs' logs (``<run id>.log``) and sbatch scripts."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("trainledger", appauthor=False)) / "runs"


def _run_dir(log_dir: Optional[Path]) -> Path:
    """Where a launched run's log and sbatch script go: the ledger's run directory, nowhere else."""
    base = default_log_dir()
    base.mkdir(parents=True, exist_ok=True)
    if log_dir is not None and Path(log_dir).expanduser().resolve() != base.resolve():
        raise LedgerInputError(f"log_dir: {log_dir} is not the ledger's run directory {base}; run logs go there")
    return base


def run_log_file(run_id: str, log_path: Optional[str]) -> Optional[Path]:
    """The run's own log, if the ledger records exactly ``<run directory>/<run id>.log`` and it is a file there; else None.

    ``log_path`` is a value from the ledger, so it is trusted only this far: the
    run id must be valid (``trainledger.store.ids``), and the path, with every
    symlink resolved, must be that file inside :func:`default_log_dir`. Nothing
    else is ever opened as a run's log (the dashboard's Launch page shows it).
    """
    from trainledger.store.ids import validate_run_id

    if not log_path:
        return None
    try:
        validate_run_id(run_id)
        base = default_log_dir().resolve()
        expected = base / f"{run_id}.log"
        real = Path(log_path).resolve()
    except (LedgerInputError, OSError, RuntimeError, ValueError):
        return None
    if real != expected or not real.is_relative_to(base) or not real.is_file():
        return None
    return real


#: directories besides the shipped ``trainer/configs`` whose configs may be launched (``os.pathsep``-separated)
CONFIG_DIRS_ENV = "TRAINLEDGER_CONFIG_DIRS"


def shipped_config_dir() -> Path:
    from trainledger.trainer import configs  # a package of YAML files; imports no torch

    return Path(configs.__file__).resolve().parent


def allowed_config_dirs() -> list[Path]:
    """The shipped config directory, then each existing directory of ``$TRAINLEDGER_CONFIG_DIRS`` (resolved)."""
    dirs = [shipped_config_dir()]
    for part in os.environ.get(CONFIG_DIRS_ENV, "").split(os.pathsep):
        if not part.strip():
            continue
        d = Path(part.strip()).expanduser().resolve()
        if d.is_dir() and d not in dirs:
            dirs.append(d)
    return dirs


def check_config_allowed(path: Path, flag: str = "CONFIG") -> Path:
    """The config's real path if it lies in an allowed directory (symlinks resolved); else a one-line error."""
    try:
        real = Path(path).resolve(strict=True)
    except (OSError, RuntimeError):
        raise LedgerInputError(f"{flag}: {path} does not exist") from None
    if not any(real.is_relative_to(d) for d in allowed_config_dirs()):
        raise LedgerInputError(f"{flag}: {path} is outside the allowed config directories; copy it into "
                               f"trainer/configs or add its directory to ${CONFIG_DIRS_ENV}")
    return real


def _load_plan(req: LaunchRequest):
    """Validate the config and plan before anything starts; returns (config, plan)."""
    from trainledger.trainer.config import ConfigError, load_config
    from trainledger.trainer.parallel import PlanError, resolve_plan

    if not req.config.is_file():
        raise LedgerInputError(f"CONFIG: {req.config} does not exist")
    if req.launcher not in LAUNCHERS:
        raise LedgerInputError(f"--launcher: expected one of {', '.join(LAUNCHERS)}, got {req.launcher!r}")
    if req.nodes < 1:
        raise LedgerInputError(f"--nodes: must be at least 1, got {req.nodes}")
    try:
        cfg = load_config(req.config)
        if req.steps is not None:
            from dataclasses import replace

            if req.steps < 1:
                raise LedgerInputError(f"--steps: must be at least 1, got {req.steps}")
            cfg = replace(cfg, steps=req.steps)
        gpn = req.gpus_per_node or _hostfile_slots(req.hostfile) or default_processes_per_node(cfg)
        plan = resolve_plan(cfg, world_size=req.nodes * gpn, nodes=req.nodes, gpus_per_node=gpn,
                            hostfile=req.hostfile)
    except (ConfigError, PlanError) as exc:
        raise LedgerInputError(f"{req.config.name}: {exc}") from None
    if req.launcher == "torchrun" and req.nodes > 1:
        node_of_several(req)
    elif req.node_rank not in (None, 0) or req.master_addr or req.master_port:
        raise LedgerInputError("--node-rank/--master-addr/--master-port: only for --launcher torchrun with --nodes > 1")
    return cfg, plan, gpn


#: set for the supervisor of node 1.. of a multi-node torchrun launch: its node rank
ENV_MEMBER = "TRAINLEDGER_LAUNCH_NODE_RANK"
#: how long the supervisor of node 1.. that failed waits for node 0 to record the run's end
MEMBER_WAIT_S = 60.0

#: torchrun's default rendezvous port on the master node
MASTER_PORT = 29500


def node_of_several(req: LaunchRequest) -> None:
    """Fill in this node of a multi-node torchrun launch (one ``trainledger launch`` per node, as torchrun itself).

    Every node is given the same ``--nodes``, ``--run-id`` and master (host 0, whose torchrun holds the
    rendezvous store); ``--node-rank`` and ``--master-addr`` default from ``--hostfile``: this host's line
    (its hostname) is its rank, the first line the master. Node 0 registers the run; the others join it.
    """
    if not req.run_id:
        raise LedgerInputError(f"--run-id: a {req.nodes}-node torchrun launch runs `trainledger launch` on every node "
                               "with one shared run id; pass --run-id ID to each")
    validate_run_id(req.run_id, "--run-id")
    hosts: list[str] = []
    if req.hostfile is not None:
        from trainledger.trainer.parallel import PlanError, parse_hostfile

        try:
            hosts = [h for h, _ in parse_hostfile(req.hostfile)]
        except PlanError as exc:
            raise LedgerInputError(f"--hostfile: {exc}") from None
    if req.node_rank is None:
        me = socket.gethostname()
        if me not in hosts:
            raise LedgerInputError(f"--node-rank: this host ({me}) is not in the hostfile; pass --node-rank R "
                                   "(0 on the master node)" if hosts else
                                   "--node-rank: pass this node's rank (0 on the master) or a --hostfile naming it")
        req.node_rank = hosts.index(me)
    if not 0 <= req.node_rank < req.nodes:
        raise LedgerInputError(f"--node-rank: {req.node_rank} is not a node of a {req.nodes}-node run (0 to {req.nodes - 1})")
    if not req.master_addr:
        if not hosts:
            raise LedgerInputError("--master-addr: pass the address of node 0 (or a --hostfile whose first host is it)")
        req.master_addr = hosts[0]
    if req.master_port is None:
        req.master_port = MASTER_PORT


def _hostfile_slots(hostfile: Optional[Path]) -> Optional[int]:
    """The slots per host of a hostfile (its first host's; the plan checks that they agree), else None."""
    if hostfile is None:
        return None
    from trainledger.trainer.parallel import parse_hostfile

    return parse_hostfile(hostfile)[0][1]


def default_processes_per_node(cfg) -> int:
    """GPUs visible here, else (CPU) enough processes for the config's tp × pp, at least 2."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return len([d for d in visible.split(",") if d.strip()])
    par = cfg.parallel
    return max(2, (par.tp or 1) * (par.pp or 1))


def prepare(session: Session, req: LaunchRequest, db_url: str) -> Prepared:
    """Validate, register the run as queued, and build the launcher command (nothing started yet)."""
    from trainledger.store.ids import new_run_id

    cfg, plan, gpn = _load_plan(req)
    nt, offer_id = _node_type_and_offer(session, req)
    from trainledger.store.lookup import get_or_create
    from trainledger.store.models import Project, User

    run_id = validate_run_id(req.run_id or new_run_id(), "--run-id")
    if req.sweep_id:
        validate_run_id(req.sweep_id, "sweep id")
    log_dir = _run_dir(req.log_dir)
    member = bool(req.node_rank)  # node 1.. of a multi-node torchrun launch: node 0 registers the run
    log_path = log_dir / (f"{run_id}.node{req.node_rank}.log" if member else f"{run_id}.log")
    name = req.name or f"{plan.strategy}-{cfg.shape.name}"
    if req.run_id and not member and session.get(Run, run_id) is not None:
        raise LedgerInputError(f"--run-id: run {run_id} already exists; every launch is a new run")
    if member:
        return _command(req, run_id, nt.name if nt else None, name, gpn, log_path, db_url)
    if nt is None or (offer_id is None and not has_offer(session, nt.name)):
        warn_not_costed(run_id, nt.name if nt else None)  # recorded all the same, never priced as another
    session.add(Run(
        id=run_id, name=name, project_id=get_or_create(session, Project, req.project),
        user_id=get_or_create(session, User, req.user or os.environ.get("USER") or None), launcher=req.launcher,
        node_type_id=nt.id if nt else None, offer_id=offer_id, nodes=req.nodes, gpus_per_node=gpn, world_size=plan.world_size,
        strategy=plan.strategy, dp=plan.dp, tp=plan.tp, pp=plan.pp, zero_stage=plan.zero_stage,
        micro_batch=plan.micro_batch, grad_accum=plan.grad_accum, model_shape=cfg.shape.name,
        n_layers=cfg.shape.n_layers, hidden=cfg.shape.d_model, heads=cfg.shape.n_heads, seq_len=cfg.shape.seq_len,
        sweep_id=req.sweep_id, config={"path": str(req.config), "train": cfg.to_dict()}, status=RunStatus.queued,
        hostname=socket.gethostname(), log_path=str(log_path)))
    session.flush()
    from trainledger.runs.predictions import store_prediction

    store_prediction(session, session.get(Run, run_id), req.steps)  # planned vs measured (docs/PLANNER.md)
    return _command(req, run_id, nt.name if nt else None, name, gpn, log_path, db_url)


def _node_type_and_offer(session: Session, req: LaunchRequest) -> tuple[Optional[NodeType], Optional[int]]:
    """The run's node type (``--node-type``, else the configured default, else the offer's; None: not costed)
    and offer id, or a one-line error for an unknown node type or an offer of another one."""
    name = req.node_type or default_node_type()
    off = session.exec(select(Offer).where(Offer.name == req.offer)).first() if req.offer else None
    if name is None and off is not None:  # the offer names the node type it pays for
        return session.get(NodeType, off.node_type_id), off.id
    if name is None:
        if req.offer:
            raise LedgerInputError(f"--offer: no offer {req.offer!r} (see `trainledger pricing list`)")
        return None, None
    nt = session.exec(select(NodeType).where(NodeType.name == name)).first()
    if nt is None:
        names = session.exec(select(NodeType.name)).all()
        raise LedgerInputError(f"--node-type: unknown {name!r}; use one of {', '.join(sorted(names))}")
    if req.offer and (off is None or off.node_type_id != nt.id):
        names = session.exec(select(Offer.name).where(Offer.node_type_id == nt.id)).all()
        raise LedgerInputError(f"--offer: {req.offer!r} is not an offer for {nt.name}; use one of {', '.join(sorted(names))}")
    return nt, off.id if off else None


def _command(req: LaunchRequest, run_id: str, node_type: Optional[str], name: str, gpn: int, log_path: Path,
             db_url: str) -> Prepared:
    """The launcher command of a prepared run (its sbatch script for Slurm)."""
    train_args = ["--config", str(req.config.resolve()), "--track", "--run-id", run_id,
                  *(["--node-type", node_type] if node_type else []), "--launcher", req.launcher, "--name", name,
                  "--gpus-per-node", str(gpn)]
    for flag, value in (("--offer", req.offer), ("--project", req.project), ("--user", req.user),
                        ("--sweep-id", req.sweep_id), ("--steps", req.steps), ("--metrics-port", req.metrics_port),
                        ("--journal-dir", req.journal_dir)):
        if value is not None:
            train_args += [flag, str(value)]
    env = {**os.environ, **req.extra_env, "TRAINLEDGER_DB_URL": db_url, "TRAINLEDGER_RUN_ID": run_id,
           "PYTHONUNBUFFERED": "1"}
    if req.node_rank:
        env[ENV_MEMBER] = str(req.node_rank)  # the supervisor settles this node only (node 0 owns the run)
    if req.launcher == "torchrun":
        # several nodes: this node's torchrun meets the others at node 0's (static rendezvous, its TCP store).
        # One node: --standalone, whose store listens on a port the kernel picks as it binds; a port picked
        # here and passed on could be taken by another launch in between (seen with eight concurrent launches).
        where = (["--nnodes", str(req.nodes), "--node-rank", str(req.node_rank), "--master-addr", req.master_addr,
                  "--master-port", str(req.master_port)] if req.nodes > 1 else
                 ["--standalone", "--nnodes", "1", "--local-addr", "127.0.0.1"])
        cmd = [sys.executable, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(gpn),
               "--max-restarts", "0", "-m", "trainledger.trainer.train", *train_args]
        return Prepared(run_id, cmd, env, log_path)
    if req.launcher == "deepspeed":
        ds = shutil.which("deepspeed") or str(Path(sys.executable).with_name("deepspeed"))
        # DeepSpeed's launcher takes no port 0: a free one, picked here (another launch could take it first)
        cmd = [ds, "--num_nodes", str(req.nodes), "--num_gpus", str(gpn), "--master_port", str(_free_port())]
        if req.hostfile:
            cmd += ["--hostfile", str(req.hostfile)]
        cmd += ["--module", "trainledger.trainer.train", *train_args]
        return Prepared(run_id, cmd, env, log_path)
    script = log_path.parent / f"{run_id}.sbatch"
    write_output(script, slurm_script(run_id, req, gpn, train_args, log_path).encode("utf-8"), flag="sbatch script")
    return Prepared(run_id, ["sbatch", str(script)], env, log_path, script=script)


def slurm_script(run_id: str, req: LaunchRequest, gpn: int, train_args: list[str], log_path: Path) -> str:
    """An sbatch script: one srun task per node, each running torchrun with c10d rendezvous."""
    q = shlex.quote
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(req.nodes), "--nproc-per-node", str(gpn),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", "$head:29500", "--rdzv-id", "$SLURM_JOB_ID",
                "-m", "trainledger.trainer.train", *train_args]
    # only our own two placeholders are left for the shell to expand; every other argument
    # (run names, projects, users: user input) is quoted
    line = " ".join({"$SLURM_JOB_ID": '"$SLURM_JOB_ID"', "$head:29500": '"$head:29500"'}.get(a) or q(a) for a in torchrun)
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={q('trainledger-' + run_id)}",
        f"#SBATCH --nodes={req.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpn}",
        f"#SBATCH --output={q(str(log_path))}",
        "set -euo pipefail",
        f"export TRAINLEDGER_RUN_ID={q(run_id)}",
        "# TRAINLEDGER_DB_URL must be set in the submitting environment (sbatch exports it); never written here",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"srun {line}",
        "",
    ])


def submit(session: Session, prepared: Prepared, sbatch: str) -> dict[str, str]:
    """Submit a prepared Slurm run (``sbatch --parsable SCRIPT``, an argument list) and record its job id.

    The job id (and cluster, on a federation) goes into ``config["slurm"]`` of
    the run: ``trainledger slurm sync`` recognises the job's sacct record by
    its name (``trainledger-<run id>``) *and* this id, and updates this run
    rather than adding a second one. If sbatch refuses the job, the run is
    recorded as failed with sbatch's reason (it never started: nothing to cost).
    """
    argv = [sbatch, "--parsable", str(prepared.script)]
    try:
        out = subprocess.run(argv, env=prepared.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
        code, stdout, stderr = out.returncode, out.stdout, out.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        code, stdout, stderr = 1, "", str(exc)
    run = session.get(Run, prepared.run_id)
    if code != 0:
        lines = [x.strip() for x in stderr.splitlines() if x.strip()]
        reason = (lines[-1] if lines else f"exit {code}")[:500]
        run.status, run.ended_at, run.error = RunStatus.failed, utcnow(), f"sbatch refused the job: {reason}"
        session.flush()
        session.commit()
        raise LedgerInputError(f"sbatch: {reason}")
    job, _, cluster = stdout.strip().splitlines()[-1].partition(";")
    run.config = {**(run.config or {}), "slurm": {"job_id": job.strip(), "cluster": cluster.strip()}}
    session.flush()
    return {"job_id": job.strip(), "cluster": cluster.strip()}


# --- supervisor -------------------------------------------------------------------

def supervise(run_id: str, command: list[str], log_path: Path, db_url: str) -> int:
    """Run the launcher, forward one SIGTERM/SIGINT to it, then settle the run in the ledger."""
    launched_at = utcnow()
    with open(log_path, "ab", buffering=0) as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 preexec_fn=pdeathsig(signal.SIGKILL))
        forwarded = []

        def forward(signum, frame):
            if not forwarded:
                forwarded.append(signum)
                try:
                    child.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        code = child.wait()
    try:
        if os.environ.get(ENV_MEMBER):
            settle_member(run_id, db_url, code, int(os.environ[ENV_MEMBER]), log_path=log_path)
        else:
            settle(run_id, db_url, code, cancel_requested=bool(forwarded), log_path=log_path, launched_at=launched_at)
    except Exception as exc:  # the ledger went away between the launcher's exit and here
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        _notice(f"could not settle run {run_id} in the ledger ({reason}); run `trainledger sync` later", log_path)
    return code


def _notice(message: str, log_path: Optional[Path]) -> None:
    """A line for whoever watches: stderr (attached launches) and the run's log (detached ones)."""
    line = f"[trainledger] {message}"
    print(line, file=sys.stderr, flush=True)
    if log_path is not None:
        try:
            with open(log_path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError:
            pass


def launcher_failures(log_path: Optional[Path]) -> list[dict]:
    """Every rank torchrun's last failure report in the run log lists (``rank``, ``local_rank``, ``exit_code``;
    ``root``: its "Root Cause (first observed failure)", which is only the earliest by whole seconds: under load
    rank 0's echo of a broken collective can come before the rank that died)."""
    import re

    if log_path is None:
        return []
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    root_at = tail.rfind("Root Cause (first observed failure)")
    if root_at < 0:
        return []
    begin = tail.rfind("Failures:", 0, root_at)
    block = tail[begin if begin >= 0 else root_at:root_at + 4000]
    entry = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.M)
    root = root_at - (begin if begin >= 0 else root_at)
    return [{"rank": int(m.group(1)), "local_rank": int(m.group(2)), "exit_code": int(m.group(3)),
             "root": m.start() > root} for m in entry.finditer(block)]


def settle(run_id: str, db_url: str, exit_code: int, cancel_requested: bool = False,
           log_path: Optional[Path] = None, launched_at: Optional[datetime] = None) -> None:
    """After the launcher exits: replay the journal, then add the launcher's report of the run's end to the
    run's reports and settle it from all of them (:mod:`trainledger.sources.record.outcome`: a rank killed by a
    signal wins over rank 0's echo of it, a stop nobody asked for is a failure, whichever report came first).
    """
    from trainledger.sources.record.journal import (
        Journal,
        JournalWriteError,
        default_journal_dir,
        sync_journal,
    )
    from trainledger.store.db import make_engine

    try:
        engine = make_engine(db_url)
    except Exception as exc:
        _notice(f"ledger unreachable after the run ({exc.__class__.__name__}); run `trainledger sync` later", log_path)
        return
    journal_dir = Path(os.environ.get("TRAINLEDGER_JOURNAL_DIR") or default_journal_dir())
    try:
        if (journal_dir / f"{run_id}.jsonl").exists():
            try:
                sync_journal(engine, Journal(journal_dir, run_id))
            except JournalWriteError as exc:  # applied; only the journal's applied mark could not be written
                _notice(str(exc), log_path)
        with Session(engine) as s:
            run = s.get(Run, run_id)
            if run is None:
                return
            outcome.lock_run(s, run)
            now = utcnow()
            failures = launcher_failures(log_path or run_log_file(run.id, run.log_path))
            if run.status == RunStatus.queued:  # it held its nodes from the launch
                run.started_at = run.started_at or min(launched_at or now, now)
            outcome.record_report(s, run, outcome.launcher_report(
                exit_code, failures, now, cancel_requested=cancel_requested,
                started=run.status != RunStatus.queued, log_path=run.log_path))
            if run.status != RunStatus.succeeded:
                _lost_nodes(s, run)
            s.flush()  # flush before commit: session hooks that run before commit (the rollup) see the change
            s.commit()
    finally:
        engine.dispose()


def _lost_nodes(s: Session, run: Run) -> None:
    """Nodes of an ended run that never reported their end (their host died, or cannot reach the ledger):
    ``crashed`` at their last heartbeat. A node that is still alive reports its own end later."""
    from trainledger.store.models import RunNode

    for node in s.exec(select(RunNode).where(RunNode.run_id == run.id, RunNode.status == "running")).all():
        node.status = "crashed"


def settle_member(run_id: str, db_url: str, exit_code: int, node_rank: int, log_path: Optional[Path] = None,
                  wait_s: float = MEMBER_WAIT_S, poll_s: float = 0.5, stale_s: float = MEMBER_WAIT_S) -> None:
    """After node ``node_rank`` (> 0) of a multi-node torchrun launch exits: record this node's end.

    Node 0's rank 0 records the run; this node only says how it ended (``failed`` with its exit code, or
    ``succeeded``). When it failed and the run is still running after ``wait_s``, without a heartbeat for
    ``stale_s`` (node 0 is gone too), the run is ended here as ``crashed`` at its last heartbeat.
    """
    from datetime import timedelta

    from trainledger.store.db import make_engine
    from trainledger.store.models import RunNode

    host = socket.gethostname()
    try:
        engine = make_engine(db_url, upgrade=False)
    except Exception as exc:
        _notice(f"ledger unreachable after the run ({exc.__class__.__name__}); node {node_rank} not recorded", log_path)
        return
    try:
        deadline = time.monotonic() + (wait_s if exit_code != 0 else 0.0)
        while True:
            with Session(engine) as s:
                run = s.get(Run, run_id)
                live = run is not None and run.status in (RunStatus.queued, RunStatus.running)
                if not live or time.monotonic() >= deadline:
                    break
            time.sleep(poll_s)
        with Session(engine) as s:
            run = s.get(Run, run_id)
            if run is None:
                return
            node = s.exec(select(RunNode).where(RunNode.run_id == run_id, RunNode.hostname == host)).first()
            if node is None:
                node = RunNode(run_id=run_id, hostname=host, node_rank=node_rank)
                s.add(node)
            node.exit_code = exit_code
            if node.status in (None, "running", "crashed"):  # alive after all: node 0 marked it crashed first
                node.status = "succeeded" if exit_code == 0 else ("cancelled" if exit_code in outcome.STOP_CODES else "failed")
            now = utcnow()
            beat = run.heartbeat_at
            if exit_code != 0 and run.status == RunStatus.running and (beat is None or now - _aware(beat) >= timedelta(seconds=stale_s)):
                failures = launcher_failures(log_path)
                first = min(failures, key=lambda f: (not f["root"], f["rank"])) if failures else None
                run.status, run.ended_at, run.exit_code = RunStatus.crashed, beat or now, exit_code
                run.error = (f"node {node_rank} ({host}): the launcher exited with {exit_code} and node 0 stopped "
                             "heartbeating; ended at its last heartbeat"
                             + (f" (first failure: {outcome.describe(first)})" if first else ""))
                _lost_nodes(s, run)
            s.flush()
            s.commit()
    finally:
        engine.dispose()


def _aware(ts: datetime) -> datetime:
    from datetime import timezone

    return ts if ts.tzinfo is not None else ts.replace(tzinfo=timezone.utc)


def start(prepared: Prepared, db_url: str, detach: bool) -> subprocess.Popen:
    """Start the supervisor in its own session (its pid is the run's process group)."""
    cmd = [sys.executable, "-m", "trainledger.runs.launch", "supervise", prepared.run_id, str(prepared.log_path), "--", *prepared.command]
    return subprocess.Popen(cmd, env=prepared.env, start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL if detach else None, stderr=subprocess.DEVNULL if detach else None,
                            preexec_fn=None if detach else pdeathsig(signal.SIGKILL))


def record_process(session: Session, run_id: str, pid: int) -> None:
    run = session.get(Run, run_id)
    run.pid = pid
    run.pgid = pid


def wait_attached(proc: subprocess.Popen) -> int:
    """Wait for an attached supervisor; Ctrl-C / SIGTERM are passed on to it once."""
    sent = []

    def forward(signum, frame):
        if not sent:
            sent.append(signum)
            proc.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# --- cancel ------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cancel(session: Session, run_id: str, grace_s: float = 30.0) -> dict[str, Any]:
    """Stop a launched run and its whole process group (a ``trainledger run`` wrapper: SIGTERM to the wrapper,
    which cancels its command, then SIGKILL to it after the grace period); returns what happened."""
    from trainledger.runs.registry import get_run

    run = get_run(session, run_id)
    if run.status not in (RunStatus.queued, RunStatus.running):
        raise LedgerInputError(f"RUN_ID: run {run.id} is already {run.status.value}")
    wrapped = run.pgid is None and run.pid is not None and "wrapper" in (run.config or {})  # `trainledger run`
    if run.pgid is None and not wrapped:
        if run.status == RunStatus.queued:
            run.status, run.ended_at, run.error = RunStatus.cancelled, utcnow(), "cancelled before it started"
            run.started_at = run.started_at or run.ended_at
            session.flush()
            session.commit()
            return {"run_id": run.id, "status": "cancelled", "signalled": False}
        raise LedgerInputError(f"RUN_ID: run {run.id} was not started by `trainledger launch`; stop it with its own launcher")
    if run.hostname and run.hostname != socket.gethostname():
        raise LedgerInputError(f"RUN_ID: run {run.id} was launched on {run.hostname}; cancel it there")
    session.commit()  # release the ledger while we wait
    killed = False
    if _alive(run.pid):
        os.kill(run.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while _alive(run.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    if wrapped and _alive(run.pid):  # its keeper SIGKILLs everything the command started
        os.kill(run.pid, signal.SIGKILL)
        killed = True
    elif not wrapped and _group_alive(run.pgid):
        os.killpg(run.pgid, signal.SIGKILL)
        killed = True
        for _ in range(50):
            if not _group_alive(run.pgid):
                break
            time.sleep(0.1)
    session.expire_all()
    run = session.get(Run, run.id)
    if run.status in (RunStatus.queued, RunStatus.running):
        run.status = RunStatus.cancelled
        run.ended_at = utcnow()
        run.started_at = run.started_at or run.ended_at
        run.error = "cancelled (`trainledger runs cancel`)" + ("; processes were killed after the grace period" if killed else "")
        session.flush()
        session.commit()
    return {"run_id": run.id, "status": run.status.value, "signalled": True, "killed_after_grace": killed}


def _main(argv: list[str]) -> int:
    # python -m trainledger.runs.launch supervise RUN_ID LOG -- COMMAND...
    if len(argv) < 4 or argv[0] != "supervise" or "--" not in argv:
        print("usage: python -m trainledger.runs.launch supervise RUN_ID LOG -- COMMAND...", file=sys.stderr)
        return 2
    sep = argv.index("--")
    run_id, log = argv[1], Path(argv[2])
    return supervise(run_id, argv[sep + 1:], log, os.environ["TRAINLEDGER_DB_URL"])


if __name__ == "__main__":
    from trainledger.process import tune_gc

    tune_gc()  # a process of trainledger's own (ledger/process.py)
    sys.exit(_main(sys.argv[1:]))
