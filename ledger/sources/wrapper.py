"""``trainledger run -- COMMAND``: record any training command in the ledger, whatever trained it.

The wrapper registers the run (node 0) or adds its node to it (other nodes),
then runs the command through the keeper (:mod:`ledger.sources.keeper`: an
argument list, never a shell; no orphan survives the wrapper), heartbeats,
samples the node (:mod:`ledger.sources.sampling`: NVML for the GPUs the job
owns, else the CPU share of the command's process tree, labelled ``cpu``),
and ends the run:

* ``succeeded``: the command exited 0;
* ``failed``: it exited non-zero or was killed by a signal the wrapper did not
  send; ``exit_code`` and the last lines of its stderr (in ``error``) are kept;
* ``cancelled``: the wrapper got SIGINT/SIGTERM, forwarded it to the command's
  process group, and SIGKILLed what was left after the grace period;
* ``crashed``: the wrapper itself died (``kill -9``): its heartbeat stops and
  ``trainledger runs reap`` ends the run at its last heartbeat.

The command's stdout and stderr pass through (stderr through a pipe, so that
its tail can be kept), and its exit status is the wrapper's (128 + N when it
was killed by signal N). Every event goes to the run journal first and a
background thread applies it (:mod:`ledger.sources.writer`): an unreachable
ledger never stops the command, and ``trainledger sync`` replays the rest.

The command's environment carries ``TRAINLEDGER_RUN_ID`` (and the ledger URL,
journal directory and node type), so that ``ledger.track`` and the framework
callbacks inside it attach to this run instead of opening another.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ledger.errors import LedgerInputError
from ledger.sources import keeper
from ledger.sources.exporter import Exporter
from ledger.sources.sampling import UtilSampler, node_probe, process_tree, sample_rows
from ledger.sources.topology import ENV_RUN_ID, ENV_WRAPPED, Topology
from ledger.sources.writer import LedgerWriter, utc_now

ENV_DB_URL = "TRAINLEDGER_DB_URL"
ENV_JOURNAL_DIR = "TRAINLEDGER_JOURNAL_DIR"
ENV_NODE_TYPE = "TRAINLEDGER_NODE_TYPE"
ENV_NODE_RANK = "TRAINLEDGER_NODE_RANK"
STDERR_TAIL_LINES = 20
#: option names whose value is not recorded with the command line
SECRET_OPTION = re.compile(r"(token|secret|password|passwd|api[-_]?key|credential)", re.I)


@dataclass
class WrapRequest:
    """What ``trainledger run`` was asked to do (validated by the CLI and :func:`check_ledger`)."""

    command: list[str]
    topology: Topology
    db_url: str
    journal_dir: Path
    node_type: str = "rtx4090-8x"
    offer: Optional[str] = None
    project: Optional[str] = None
    user: Optional[str] = None
    name: Optional[str] = None
    tags: dict[str, str] = field(default_factory=dict)
    grace_s: float = 30.0
    metrics_port: Optional[int] = None
    metrics_addr: str = "127.0.0.1"
    flush_s: float = 2.0
    heartbeat_s: float = 5.0
    ledger_wait_s: float = 30.0
    util_interval_s: float = 1.0
    quiet: bool = False


def redact_command(command: list[str]) -> list[str]:
    """The command line as recorded: values of options named like a secret (``--hf-token X``,
    ``--api_key=X``) become ``***``."""
    out, hide_next = [], False
    for arg in command:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        if arg.startswith("-") and SECRET_OPTION.search(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=***")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def find_command(command: list[str], env: dict) -> str:
    """The program that would run, or a one-line :class:`LedgerInputError` (nothing registered, nothing started)."""
    prog = command[0]
    found = shutil.which(prog, path=env.get("PATH")) if os.sep not in prog else (
        prog if os.path.isfile(prog) and os.access(prog, os.X_OK) else None)
    if found is None:
        where = "on PATH" if os.sep not in prog else "(no such executable file)"
        raise LedgerInputError(f"COMMAND: {prog!r} not found {where}; nothing was registered or started")
    return found


def default_name(command: list[str]) -> str:
    """A run name from the command: the script (``train.py``) or module (``-m pkg``), else the program."""
    for i, arg in enumerate(command[1:], 1):
        if arg in ("-m", "--module") and i + 1 < len(command):
            return command[i + 1][:200]
        if arg.endswith(".py") and not arg.startswith("-"):
            return os.path.basename(arg)[:200]
    return os.path.basename(command[0])[:200]


# --- before anything starts: what the ledger must agree to -------------------------------

def check_ledger(req: WrapRequest) -> Optional[str]:
    """Refuse an unknown node type or offer, an unknown ``--resume-of``, or a run id that already ended.

    Returns a warning when the ledger cannot be reached (the run then starts anyway
    and its events wait in the journal); raises :class:`LedgerInputError` otherwise.
    """
    from sqlalchemy.exc import OperationalError
    from sqlmodel import Session, select

    from ledger.store.db import make_engine, redact_url
    from ledger.store.models import LIVE_STATUSES, NodeType, Offer, Run

    try:
        engine = make_engine(req.db_url)
    except OperationalError as exc:
        return f"ledger {redact_url(req.db_url)} unreachable ({_reason(exc)}); the run starts and its events wait in the journal"
    try:
        with Session(engine) as s:
            nt = s.exec(select(NodeType).where(NodeType.name == req.node_type)).first()
            if nt is None:
                names = ", ".join(s.exec(select(NodeType.name).order_by(NodeType.name)).all())
                raise LedgerInputError(f"--node-type: unknown node type {req.node_type!r}; known: {names} "
                                       "(add one with `trainledger pricing import`)")
            if req.offer:
                off = s.exec(select(Offer).where(Offer.name == req.offer)).first()
                if off is None or off.node_type_id != nt.id:
                    raise LedgerInputError(f"--offer: {req.offer!r} is not an offer for node type {req.node_type} "
                                           "(see `trainledger pricing list`)")
            if req.topology.resume_of and s.get(Run, req.topology.resume_of) is None \
                    and req.topology.run_id_from != "slurm":
                raise LedgerInputError(f"--resume-of: no run {req.topology.resume_of!r} in the ledger")
            existing = s.get(Run, req.topology.run_id)
            if existing is not None and req.topology.owns_run and existing.status not in LIVE_STATUSES:
                raise LedgerInputError(f"--run-id: run {existing.id} already ended ({existing.status.value}); "
                                       f"a restart is a new run: --resume-of {existing.id}")
    except OperationalError as exc:
        return f"ledger {redact_url(req.db_url)} unreachable ({_reason(exc)}); the run starts and its events wait in the journal"
    finally:
        engine.dispose()
    return None


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200]


# --- the run --------------------------------------------------------------------------------

class Wrapper:
    """One node's wrapper: start, watch, end. Use :func:`run_wrapped`."""

    def __init__(self, req: WrapRequest):
        self.req = req
        self.topo = req.topology
        self.kept: Optional[keeper.Kept] = None
        self.command_pid: Optional[int] = None
        self.cancelled: Optional[int] = None  # the signal that cancelled the run
        self.killed_after_grace = False
        self.stderr_tail: deque[bytes] = deque(maxlen=STDERR_TAIL_LINES)
        self.workers: dict[str, Any] = {}
        self.sampler: Optional[UtilSampler] = None
        self.exporter: Optional[Exporter] = None
        self.started_at = utc_now()
        self._grace: Optional[threading.Timer] = None
        self._prev: dict[int, Any] = {}
        self.writer = LedgerWriter(req.db_url, req.journal_dir, self.topo.run_id, req.flush_s, req.heartbeat_s,
                                   beats=self._beats, journal_name=self._journal_name())

    def _journal_name(self) -> str:
        return self.topo.run_id if self.topo.owns_run else f"{self.topo.run_id}.node{self.topo.node_rank}"

    def _beats(self, ts: str) -> list[dict]:
        out = [{"type": "node_beat", "hostname": self.topo.node_name, "ts": ts}]
        return ([{"type": "heartbeat", "ts": ts}] + out) if self.topo.owns_run else out

    def _child_env(self) -> dict:
        env = dict(os.environ)
        env.update({ENV_RUN_ID: self.topo.run_id, ENV_WRAPPED: self.topo.run_id, ENV_DB_URL: self.req.db_url,
                    ENV_JOURNAL_DIR: str(self.req.journal_dir), ENV_NODE_TYPE: self.req.node_type,
                    ENV_NODE_RANK: str(self.topo.node_rank)})
        return env

    # -- start --
    def start(self) -> None:
        """Register (journal + ledger, before the command starts), fork the keeper, then start the threads."""
        if self.topo.owns_run:
            self.writer.put(self._start_event())
        self.writer.put({"type": "nodes", "rows": [{
            "hostname": self.topo.node_name, "node_rank": self.topo.node_rank, "status": "running",
            "heartbeat_at": self.started_at.isoformat(), "processes": self.topo.processes_per_node}]})
        self.writer.flush()
        self.writer.release()  # the keeper must not inherit open ledger connections
        self._install_signals()
        self.kept = keeper.spawn(self.req.command, self._child_env())
        self.writer.start()
        threading.Thread(target=self._tee, daemon=True, name="trainledger-stderr").start()
        self.sampler = UtilSampler(node_probe(os.environ, process_tree(self.kept.keeper_pid)), self.req.util_interval_s)
        self.sampler.start()
        if self.req.metrics_port is not None:
            self.exporter = Exporter(self.req.metrics_port, self.req.metrics_addr, self.topo.run_id,
                                     self.topo.node_name, "node", self.sampler.source)
            threading.Thread(target=self._export, daemon=True, name="trainledger-export").start()
        threading.Thread(target=self._discover, daemon=True, name="trainledger-workers").start()

    def _start_event(self) -> dict:
        req, topo, now = self.req, self.topo, self.started_at.isoformat()
        world = topo.nodes * topo.processes_per_node if topo.processes_per_node else None
        return {"type": "run", "fields": {
            "name": req.name or default_name(req.command), "status": "running", "node_type": req.node_type,
            "offer": req.offer, "project": req.project, "user": req.user, "launcher": topo.launcher,
            "nodes": topo.nodes, "gpus_per_node": topo.gpus_per_node, "world_size": world,
            "resume_of": topo.resume_of, "started_at": now, "heartbeat_at": now, "ended_at": None,
            "error": None, "exit_code": None, "hostname": topo.node_name, "pid": os.getpid(),
            "config": {"wrapper": {"command": redact_command(req.command), "cwd": os.getcwd(),
                                   "run_id_from": topo.run_id_from, "detected": topo.facts},
                       "tags": req.tags}}}

    # -- while it runs --
    def _tee(self) -> None:
        """Copy the command's stderr to ours unchanged, keeping its last lines."""
        partial = b""
        while True:
            try:
                chunk = os.read(self.kept.stderr_fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                try:
                    view = view[os.write(2, view):]
                except OSError:
                    break
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()[-4096:]
            self.stderr_tail.extend(line[-1000:] for line in lines)
        if partial:
            self.stderr_tail.append(partial)

    def _export(self) -> None:
        while self.sampler is not None and self.sampler.is_alive() and self.exporter is not None:
            self.exporter.on_sample(self.sampler.last(), self.sampler.memory_bytes)
            time.sleep(self.req.util_interval_s)

    def _discover(self) -> None:
        """Find the training processes (they carry ``LOCAL_RANK``) among the command's descendants: how
        many run on this node and the world size they were given."""
        import psutil

        deadline = time.monotonic() + 600
        while self.sampler is not None and self.sampler.is_alive() and time.monotonic() < deadline:
            try:
                procs = psutil.Process(self.kept.keeper_pid).children(recursive=True)
            except psutil.Error:
                return
            ranks, world = set(), None
            for p in procs:
                try:
                    env = p.environ()
                except psutil.Error:
                    continue
                if "LOCAL_RANK" in env:
                    ranks.add(env["LOCAL_RANK"])
                    world = env.get("WORLD_SIZE", world)
            if ranks and len(ranks) >= len(self.workers.get("local_ranks", ())):
                self.workers = {"local_ranks": sorted(ranks), "world_size": world}
            time.sleep(1.0 if not ranks else 5.0)

    # -- signals --
    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._prev[sig] = signal.signal(sig, self._on_signal)

    def _restore_signals(self) -> None:
        for sig, handler in self._prev.items():
            signal.signal(sig, handler)
        self._prev = {}

    def _on_signal(self, signum, frame) -> None:
        """First SIGINT/SIGTERM: cancel (forward to the command's group, SIGKILL after the grace period);
        a second one: SIGKILL now."""
        if self.cancelled is not None:
            self._kill_now()
            return
        self.cancelled = signum
        self._forward(signum)
        self._grace = threading.Timer(self.req.grace_s, self._kill_now)
        self._grace.daemon = True
        self._grace.start()

    def _forward(self, signum: int) -> None:
        if self.command_pid is None:
            return  # not running yet: forwarded as soon as the keeper reports its pid
        try:
            os.killpg(self.command_pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_now(self) -> None:
        self.killed_after_grace = True
        if self.kept is not None:
            self.kept.kill_tree()

    def _on_pid(self, pid: int) -> None:
        self.command_pid = pid
        if self.cancelled is not None:
            self._forward(self.cancelled)

    # -- end --
    def wait(self) -> tuple[Optional[int], Optional[str]]:
        """Block until the command is done: ``(returncode, start error)``."""
        _, code, error = keeper.read_messages(self.kept, on_pid=self._on_pid)
        if self._grace is not None:
            self._grace.cancel()
        return code, error

    def finish(self, code: Optional[int], error: Optional[str]) -> int:
        """Record the end (the node; the run too on node 0) and return the wrapper's exit status."""
        ended = utc_now()
        self.sampler.stop()
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        status, exit_status, text = self._outcome(code, error)
        summary = self.sampler.summary()
        self.writer.put({"type": "samples", "rows": sample_rows(summary, self.topo.node_name)})
        processes = (len(self.workers.get("local_ranks", ())) or self.topo.processes_per_node
                     or (1 if self.topo.launcher == "python" else None))
        self.writer.put({"type": "nodes", "rows": [{
            "hostname": self.topo.node_name, "node_rank": self.topo.node_rank, "status": status,
            "heartbeat_at": ended.isoformat(), "exit_code": exit_status, "processes": processes,
            "gpu_util_mean": summary["mean"], "gpu_util_p95": summary["p95"], "util_source": summary["source"],
            "mem_peak_bytes": summary["mem_peak_bytes"], "energy_kwh": summary["energy_kwh"]}]})
        if self.topo.owns_run:
            world = self.workers.get("world_size")
            fields = {"status": status, "ended_at": ended.isoformat(), "heartbeat_at": ended.isoformat(),
                      "exit_code": exit_status, "error": text, "peak_mem_bytes": summary["mem_peak_bytes"],
                      "mem_kind": "nvml_used" if summary["source"] == "nvml" else "cpu_rss_tree"}
            if self.topo.nodes == 1:  # several nodes: the ledger averages their RunNodes (journal._run_util_from_nodes)
                fields.update(gpu_util_mean=summary["mean"], gpu_util_p95=summary["p95"], util_source=summary["source"])
            if world or processes:
                fields["world_size"] = int(world) if world else self.topo.nodes * processes
            self.writer.put({"type": "run", "fields": fields})
        ok = self.writer.close(self.req.ledger_wait_s)
        self._restore_signals()
        if not self.req.quiet:
            where = "" if ok else " (kept in the journal; `trainledger sync` applies it)"
            print(f"[trainledger] run {self.topo.run_id} node {self.topo.node_rank}: {status} (exit {exit_status}){where}",
                  file=sys.stderr, flush=True)
        return exit_status

    def _outcome(self, code: Optional[int], error: Optional[str]) -> tuple[str, int, Optional[str]]:
        """``(status, exit status, error text)`` from the command's return code (negative: killed by a signal)."""
        if error is not None:  # the keeper could not start it (a race with the check before the start)
            return "failed", 127, f"the command could not be started: {error}"[:4000]
        if code is None:  # the keeper itself was killed: the tree is gone with it
            code = -signal.SIGKILL
        exit_status = code if code >= 0 else 128 - code
        if self.cancelled is not None:
            how = f"cancelled by {signal.Signals(self.cancelled).name}"
            return "cancelled", exit_status, how + ("; processes were killed after the grace period"
                                                     if self.killed_after_grace else "")
        if code == 0:
            return "succeeded", 0, None
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = b"\n".join(self.stderr_tail).decode("utf-8", errors="replace").strip()
        return "failed", exit_status, (f"{how}" + (f"; stderr:\n{tail}" if tail else ""))[-4000:]


def run_wrapped(req: WrapRequest) -> int:
    """Run the command under a wrapper that records this node; returns the exit status to exit with."""
    w = Wrapper(req)
    if not req.quiet:
        role = "registers" if req.topology.owns_run else "joins"
        print(f"[trainledger] node {req.topology.node_rank} of {req.topology.nodes} {role} run {req.topology.run_id}",
              file=sys.stderr, flush=True)
    w.start()
    code, error = w.wait()
    return w.finish(code, error)


def run_passive(command: list[str], why: str, quiet: bool) -> None:
    """Run the command in place of this process (``exec``): nothing is recorded here."""
    if not quiet:
        print(f"[trainledger] not recording: {why}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(command[0], command)


