"""``trainledger run -- COMMAND``: record any training command in the ledger, whatever trained it.

The wrapper registers the run (node 0) or adds its node to it (other nodes),
then runs the command through the keeper (:mod:`trainledger.sources.capture.keeper`: an
argument list, never a shell; no orphan survives the wrapper), heartbeats,
samples the node (:mod:`trainledger.sources.telemetry.sampling`: NVML for the GPUs the job
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
background thread applies it (:mod:`trainledger.sources.record.writer`): an unreachable
ledger never stops the command, and ``trainledger sync`` replays the rest.

The command's environment carries ``TRAINLEDGER_RUN_ID`` (and the ledger URL,
journal directory and node type), so that ``trainledger.track`` and the framework
callbacks inside it attach to this run instead of opening another.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from trainledger.errors import LedgerInputError
from trainledger.sources.capture import keeper
from trainledger.sources.capture.precheck import check_ledger
from trainledger.sources.capture.redact import redact_argv, redact_text
from trainledger.sources.capture.signals import (
    FORWARDED,
    controlling_tty,
    delivered_by_slurm,
    give_terminal,
    inherited_ignored,
)
from trainledger.sources.record.writer import LedgerWriter, utc_now
from trainledger.sources.telemetry.exporter import Exporter
from trainledger.sources.telemetry.sampling import UtilSampler, node_probe, process_tree, sample_rows
from trainledger.sources.telemetry.topology import ENV_RUN_ID, ENV_WRAPPED, Topology

ENV_DB_URL = "TRAINLEDGER_DB_URL"
ENV_JOURNAL_DIR = "TRAINLEDGER_JOURNAL_DIR"
ENV_NODE_TYPE = "TRAINLEDGER_NODE_TYPE"
ENV_NODE_RANK = "TRAINLEDGER_NODE_RANK"
STDERR_TAIL_LINES = 20
#: exit status of ``--require-ledger`` when the run cannot be recorded (EX_TEMPFAIL: try again later)
EXIT_NOT_RECORDED = 75


class RecordingImpossible(RuntimeError):
    """``--require-ledger``: the run cannot be recorded, so the command is not started."""


def say(text: str) -> None:
    """One line of ours on stderr; a closed or broken stderr is never an error (the job runs anyway)."""
    try:
        os.write(2, f"[trainledger] {text}\n".encode("utf-8", "replace"))
    except OSError:
        pass


@dataclass
class WrapRequest:
    """What ``trainledger run`` was asked to do (validated by the CLI and :func:`~trainledger.sources.capture.precheck.check_ledger`)."""

    command: list[str]
    topology: Topology
    db_url: str
    journal_dir: Path
    node_type: Optional[str] = None  # None: not costed (no default is assumed, ``trainledger.store.defaults``)
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
    require_ledger: bool = False
    share: Optional[tuple[Optional[str], Optional[str]]] = None  # (share, basis): set by check_ledger
    share_note: Optional[str] = None  # set by check_ledger: why the run is costed as the whole node (bad MIG/GPUs)
    costed: bool = True  # set by check_ledger: False when the node type has no offer (and none is given)


def redact_command(command: list[str]) -> list[str]:
    """The command line as recorded (:func:`trainledger.sources.capture.redact.redact_argv`: credentials become ``***``)."""
    return redact_argv(command)


def find_command(command: list[str], env: dict) -> str:
    """The program that would run, or a one-line :class:`LedgerInputError` (nothing registered, nothing started)."""
    prog = command[0]
    found = shutil.which(prog, path=env.get("PATH")) if os.sep not in prog else (
        prog if os.path.isfile(prog) and os.access(prog, os.X_OK) else None)
    if found is None:
        where = "on PATH" if os.sep not in prog else "(no such executable file)"
        raise LedgerInputError(f"COMMAND: {prog!r} not found {where}; nothing was registered or started")
    return found


def _count(text: Optional[str]) -> Optional[int]:
    """A positive process count from an environment value (``LOCAL_WORLD_SIZE``), else None."""
    try:
        n = int(text) if text is not None else 0
    except ValueError:
        return None
    return n if n > 0 else None


def local_processes(workers: dict[str, Any], topo: Topology) -> Optional[int]:
    """The training processes of this node: the ranks discovered (``workers``: ``local_ranks`` seen,
    ``local_world_size`` announced by the launcher), the more of the two (a short job's ranks may end before every
    one is seen; the launcher started as many as it announced); none discovered: the topology's count (a
    launcher's ``--nproc-per-node``), 1 for a plain ``python`` command, else unknown."""
    found = max(len(workers.get("local_ranks", ())), workers.get("local_world_size") or 0)
    return found or topo.processes_per_node or (1 if topo.launcher == "python" else None)


def default_name(command: list[str]) -> str:
    """A run name from the command: the script (``train.py``) or module (``-m pkg``), else the program."""
    for i, arg in enumerate(command[1:], 1):
        if arg in ("-m", "--module") and i + 1 < len(command):
            return command[i + 1][:200]
        if arg.endswith(".py") and not arg.startswith("-"):
            return os.path.basename(arg)[:200]
    return os.path.basename(command[0])[:200]


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200]


# --- the run --------------------------------------------------------------------------------

class Wrapper:
    """One node's wrapper: start, watch, end. Use :func:`run_wrapped`.

    Raises at construction when the journal cannot be opened (a read-only or missing folder).
    """

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
        self.tty: Optional[int] = None  # the terminal whose foreground the command holds
        self.teeing = False
        self._grace: Optional[threading.Timer] = None
        self._prev: dict[int, Any] = {}
        self._mask: Optional[frozenset] = None  # the mask we were started with, while we block what we wait for
        self._waited: frozenset = frozenset()  # the signals the waiting thread takes (with their senders)
        self._waiting = False
        self._pending: list[int] = []  # signals that came before the command's pid was known
        self.writer = LedgerWriter(req.db_url, req.journal_dir, self.topo.run_id, req.flush_s, req.heartbeat_s,
                                   beats=self._beats, journal_name=self._journal_name())
        self.writer.on_error = lambda: None  # a journal that fails turns recording off; the job goes on
        self.writer.failure_note = "the job runs on; the run is written straight to the ledger at its end"

    def _journal_name(self) -> str:
        if self.topo.part:
            return f"{self.topo.run_id}.{self.topo.part}.node{self.topo.node_rank}"
        return self.topo.run_id if self.topo.owns_run else f"{self.topo.run_id}.node{self.topo.node_rank}"

    def _beats(self, ts: str) -> list[dict]:
        out = [{"type": "node_beat", "hostname": self.topo.node_key, "ts": ts}]
        return ([{"type": "heartbeat", "ts": ts}] + out) if self.topo.owns_run else out

    def _child_env(self) -> dict:
        env = dict(os.environ)
        env.update({ENV_RUN_ID: self.topo.run_id, ENV_WRAPPED: self.topo.run_id, ENV_DB_URL: self.req.db_url,
                    ENV_JOURNAL_DIR: str(self.req.journal_dir), ENV_NODE_RANK: str(self.topo.node_rank)})
        if self.req.node_type:
            env[ENV_NODE_TYPE] = self.req.node_type
        return env

    # -- start --
    def start(self) -> None:
        """Fork the keeper holding the command, check the ledger without waiting on it, start the command,
        then register (journal, then ledger) off the main thread: the command never waits on the ledger."""
        self.tty = controlling_tty()
        ignored = inherited_ignored()
        self._install_signals(ignored)
        self.kept = keeper.spawn(self.req.command, self._child_env(),
                                 keeper.Start(ignored, self.tty, hold=True, mask=self._mask))
        self._start_signal_thread()
        try:
            self._before_go()
        except BaseException:
            self.kept.abort()
            keeper.read_messages(self.kept)
            raise
        if not self.req.quiet:
            role = "registers" if self.topo.owns_run else "joins"
            say(f"node {self.topo.node_rank} of {self.topo.nodes} {role} run {self.topo.run_id}")
        self.kept.go()
        self._start_threads()

    def _before_go(self) -> None:
        """The checks (never waiting on a lock) and, with ``--require-ledger``, the registration itself."""
        warning = check_ledger(self.req)
        if warning:
            self.writer.ledger_ok = False  # said once here; the writer says when it is back
            if not self.req.quiet or self.req.require_ledger:
                say(("error: " if self.req.require_ledger else "warning: ") + warning)
        if self.req.require_ledger and warning:
            raise RecordingImpossible(warning)
        if self.req.share_note and self.topo.owns_run:
            say(f"warning: {self.req.share_note}")
        if self.topo.owns_run and not self.req.quiet and (not self.req.node_type or not self.req.costed):
            from trainledger.store.defaults import warn_not_costed

            warn_not_costed(self.topo.run_id, self.req.node_type, write=say)
        self._queue_registration()
        if self.req.require_ledger:
            from trainledger.sources.record.journal_file import JournalWriteError

            note, self.writer.failure_note = self.writer.failure_note, None  # the refusal is the one line
            try:
                self.writer.flush()
            except JournalWriteError as exc:
                raise RecordingImpossible(str(exc)) from None
            finally:
                self.writer.failure_note = note
            if not self.writer.ledger_ok:
                raise RecordingImpossible(f"run {self.topo.run_id} could not be registered in the ledger")

    def _queue_registration(self) -> None:
        if self.topo.owns_run:
            self.writer.put(self._start_event())
        self.writer.put({"type": "nodes", "rows": [{
            "hostname": self.topo.node_key, "node_rank": self.topo.node_rank, "status": "running",
            "heartbeat_at": self.started_at.isoformat(), "processes": self.topo.processes_per_node}]})

    def _start_threads(self) -> None:
        threading.Thread(target=self._register, daemon=True, name="trainledger-register").start()
        self._start_tee()
        self.sampler = UtilSampler(node_probe(os.environ, process_tree(self.kept.keeper_pid)), self.req.util_interval_s)
        self.sampler.start()
        if self.req.metrics_port is not None:
            self.exporter = Exporter(self.req.metrics_port, self.req.metrics_addr, self.topo.run_id,
                                     self.topo.node_name, "node", self.sampler.source)
            threading.Thread(target=self._export, daemon=True, name="trainledger-export").start()
        threading.Thread(target=self._discover, daemon=True, name="trainledger-workers").start()

    def _start_tee(self) -> None:
        if not self.teeing:
            self.teeing = True
            threading.Thread(target=self._tee, daemon=True, name="trainledger-stderr").start()

    def _register(self) -> None:
        """Journal and apply the registration now (not a flush period later), then keep the writer going.
        A journal that cannot be written has said so (the writer) and the end goes straight to the ledger."""
        try:
            self.writer.flush()
        except Exception:
            pass
        try:
            self.writer.start()
        except RuntimeError:
            pass

    def _start_event(self) -> dict:
        req, topo, now = self.req, self.topo, self.started_at.isoformat()
        world = topo.nodes * topo.processes_per_node if topo.processes_per_node else None
        return {"type": "run", "fields": {
            "name": req.name or default_name(req.command), "status": "running", "node_type": req.node_type,
            "offer": req.offer, "project": req.project, "user": req.user, "launcher": topo.launcher,
            "nodes": topo.nodes, "gpus_per_node": topo.gpus_per_node, "world_size": world,
            "resume_of": topo.resume_of, "started_at": now, "heartbeat_at": now, "ended_at": None,
            "error": None, "exit_code": None, "hostname": topo.node_name, "pid": os.getpid(),
            **({"share": req.share[0], "share_basis": req.share[1]} if req.share and req.share[1] else {}),
            "config": {"wrapper": {"command": redact_command(req.command), "cwd": os.getcwd(),
                                   "run_id_from": topo.run_id_from, "detected": topo.facts,
                                   **({"share_note": req.share_note} if req.share_note else {})},
                       "tags": req.tags}}}

    # -- while it runs --
    def _tee(self) -> None:
        """Copy the command's stderr to ours unchanged, keeping its last lines. Our stderr closed or broken:
        keep reading (and dropping), so that the command never blocks on a full pipe."""
        partial, ours = b"", True
        while True:
            try:
                chunk = os.read(self.kept.stderr_fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                break
            if not chunk:
                break
            view = memoryview(chunk)
            while view and ours:
                try:
                    view = view[os.write(2, view):]
                except InterruptedError:
                    continue
                except OSError:
                    ours = False
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
        many run on this node (the ranks seen, or ``LOCAL_WORLD_SIZE``, the count the launcher started, when it
        says more: a short job's ranks may end before all of them are seen) and the world size they were given.
        Polled every 0.25 s until a rank and every rank its ``LOCAL_WORLD_SIZE`` announces are seen, then every 5 s."""
        import psutil

        deadline = time.monotonic() + 600
        while self.sampler is not None and self.sampler.is_alive() and time.monotonic() < deadline:
            try:
                procs = psutil.Process(self.kept.keeper_pid).children(recursive=True)
            except psutil.Error:
                return
            ranks, world, local_world = set(), None, None
            for p in procs:
                try:
                    env = p.environ()
                except psutil.Error:
                    continue
                if "LOCAL_RANK" in env:
                    ranks.add(env["LOCAL_RANK"])
                    world = env.get("WORLD_SIZE", world)
                    local_world = _count(env.get("LOCAL_WORLD_SIZE")) or local_world
            if ranks and len(ranks) >= len(self.workers.get("local_ranks", ())):
                self.workers = {"local_ranks": sorted(ranks), "world_size": world,
                                "local_world_size": local_world or self.workers.get("local_world_size")}
            seen_all = ranks and len(ranks) >= (self.workers.get("local_world_size") or 0)
            time.sleep(5.0 if seen_all else 0.25)

    # -- signals --
    def _install_signals(self, ignored: frozenset) -> None:
        """Every forwarded signal the wrapper was not started with ignored: forwarded to the command.

        Blocked in every thread (before the keeper is forked and before any thread starts: threads inherit the
        mask, the keeper restores the one we were started with) and taken by one thread with
        ``sigtimedwait``, which tells who sent each (a handler cannot): a signal that slurmstepd already
        delivered to every process of the step is not forwarded again (:func:`delivered_by_slurm`). The
        handlers stay installed for what arrives while the mask is being restored at the end."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in FORWARDED:
            if sig not in ignored:
                self._prev[sig] = signal.signal(sig, self._on_signal)
        waited = frozenset(self._prev)  # never one started ignored: blocked, it would be queued, not dropped
        if waited and hasattr(signal, "sigtimedwait") and hasattr(signal, "pthread_sigmask"):
            self._mask = frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, waited))
            self._waited = waited

    def _start_signal_thread(self) -> None:
        if self._waited and not self._waiting:
            self._waiting = True
            threading.Thread(target=self._wait_signals, daemon=True, name="trainledger-signals").start()

    def _wait_signals(self) -> None:
        """Take each forwarded signal with its sender and act on it, until :meth:`_restore_signals`."""
        if hasattr(signal, "SIGTTOU"):  # give_terminal from this thread: no SIGTTOU stops us (as a shell does)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
        while self._waiting:
            try:
                info = signal.sigtimedwait(self._waited, 0.25)
            except Exception:  # never the end of the wrapper (nor a busy loop)
                time.sleep(0.25)
                continue
            if info is not None:
                self._on_signal(info.si_signo, None, sender=info.si_pid)

    def _restore_signals(self) -> None:
        """The mask we were started with (what arrived meanwhile runs the handlers), then the handlers."""
        self._waiting = False
        if self._mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            self._mask = None
        for sig, handler in self._prev.items():
            signal.signal(sig, handler)
        self._prev = {}

    def _on_signal(self, signum, frame, sender: Optional[int] = None) -> None:
        """SIGINT/SIGTERM cancel the run: forwarded, SIGKILL after the grace period (a second one: now).
        Every other signal is only forwarded; SIGCONT also gives the terminal back to the command. A signal
        slurmstepd sent to every process of the step (``sender``) reached the command already: not forwarded."""
        try:
            again = not delivered_by_slurm(sender)
            if signum not in (signal.SIGINT, signal.SIGTERM):
                if signum == signal.SIGCONT and self.tty is not None and self.command_pid is not None:
                    give_terminal(self.tty, self.command_pid)
                if again:
                    self._forward(signum)
                return
            if self.cancelled is not None:
                self._kill_now()
                return
            self.cancelled = signum
            if again:
                self._forward(signum)
            self._grace = threading.Timer(self.req.grace_s, self._kill_now)
            self._grace.daemon = True
            self._grace.start()
        except Exception:  # a signal handler must never end the wrapper
            pass

    def _forward(self, signum: int) -> None:
        if self.command_pid is None:
            self._pending.append(signum)  # forwarded as soon as the keeper reports the command's pid
            return
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
        pending, self._pending = self._pending, []
        for sig in pending:
            self._forward(sig)

    def _on_stop(self, signum: int) -> None:
        """The command stopped (Ctrl-Z): take the terminal back and stop, so that the shell sees the job
        stopped; its ``fg`` continues us (SIGCONT), and we continue the command."""
        if self.tty is None:
            return
        give_terminal(self.tty, os.getpgrp())
        os.killpg(os.getpgrp(), signal.SIGSTOP)

    # -- end --
    def wait(self) -> tuple[Optional[int], Optional[str]]:
        """Block until the command is done: ``(returncode, start error)``."""
        _, code, error = keeper.read_messages(self.kept, on_pid=self._on_pid, on_stop=self._on_stop)
        if self._grace is not None:
            self._grace.cancel()
        if self.tty is not None:
            give_terminal(self.tty, os.getpgrp())
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
        self.writer.put({"type": "samples", "rows": sample_rows(summary, self.topo.node_key)})
        processes = local_processes(self.workers, self.topo)
        self.writer.put({"type": "nodes", "rows": [{
            "hostname": self.topo.node_key, "node_rank": self.topo.node_rank, "status": status,
            "heartbeat_at": ended.isoformat(), "exit_code": exit_status, "processes": processes,
            "gpu_util_mean": summary["mean"], "gpu_util_p95": summary["p95"], "util_source": summary["source"],
            "mem_peak_bytes": summary["mem_peak_bytes"], "energy_kwh": summary["energy_kwh"]}]})
        if self.topo.owns_run:
            self.writer.put({"type": "run", "fields": self._end_fields(status, ended, exit_status, text, summary,
                                                                        processes)})
        ok = self.writer.close(self.req.ledger_wait_s)
        self._restore_signals()
        if not self.req.quiet:
            where = "" if ok else " (kept in the journal; `trainledger sync` applies it)"
            say(f"run {self.topo.run_id} node {self.topo.node_rank}: {status} (exit {exit_status}){where}")
        return exit_status

    def _end_fields(self, status: str, ended, exit_status: int, text: Optional[str], summary: dict,
                    processes: Optional[int]) -> dict:
        world = self.workers.get("world_size")
        fields = {"status": status, "ended_at": ended.isoformat(), "heartbeat_at": ended.isoformat(),
                  "exit_code": exit_status, "error": text, "peak_mem_bytes": summary["mem_peak_bytes"],
                  "mem_kind": "nvml_used" if summary["source"] == "nvml" else "cpu_rss_tree"}
        if self.topo.nodes == 1:  # several nodes: the ledger averages their RunNodes (journal._run_util_from_nodes)
            fields.update(gpu_util_mean=summary["mean"], gpu_util_p95=summary["p95"], util_source=summary["source"])
        if world or processes:
            fields["world_size"] = int(world) if world else self.topo.nodes * processes
        return fields

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
        if code == -signal.SIGINT and self.tty is not None:  # Ctrl-C at the terminal the command held
            return "cancelled", exit_status, "cancelled by SIGINT from the terminal"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = redact_text(b"\n".join(self.stderr_tail).decode("utf-8", errors="replace").strip())
        return "failed", exit_status, (f"{how}" + (f"; stderr:\n{tail}" if tail else ""))[-4000:]

    def degrade(self, exc: BaseException) -> int:
        """The last resort after an unexpected error of ours once the keeper exists: the command runs (or goes
        on running) unrecorded, and its exit status is ours."""
        say(f"warning: internal error ({type(exc).__name__}: {str(exc)[:200]}); the command runs unrecorded")
        self.kept.go()  # a second go is ignored by a keeper that started the command
        self._start_tee()
        _, code, error = keeper.read_messages(self.kept, on_pid=self._on_pid, on_stop=self._on_stop)
        if error is not None:
            return 127
        return 128 + signal.SIGKILL if code is None else (code if code >= 0 else 128 - code)


def run_wrapped(req: WrapRequest) -> int:
    """Run the command under a wrapper that records this node; returns the exit status to exit with.

    Whatever goes wrong on the recording side, the command runs: a journal that cannot be opened runs it
    unrecorded (:func:`run_bare`), and an unexpected error of ours after the keeper exists lets it run on
    (:meth:`Wrapper.degrade`). Only bad input (:class:`LedgerInputError`) and ``--require-ledger``
    (:class:`RecordingImpossible`) keep it from starting.
    """
    try:
        w = Wrapper(req)
    except Exception as exc:
        why = f"cannot open the run journal in {req.journal_dir} ({_reason(exc)})"
        if req.require_ledger:
            raise RecordingImpossible(why) from None
        run_bare(req.command, f"{why}; the command runs unrecorded")
    try:
        w.start()
    except (LedgerInputError, RecordingImpossible):
        w._restore_signals()
        raise
    except Exception as exc:
        if w.kept is None:
            w._restore_signals()  # exec'ed bare: with the mask and handlers we were started with
            run_bare(req.command, f"internal error ({type(exc).__name__}: {str(exc)[:200]}); the command runs unrecorded")
        return w.degrade(exc)
    try:
        code, error = w.wait()
    except Exception as exc:
        return w.degrade(exc)
    try:
        return w.finish(code, error)
    except Exception as exc:
        say(f"warning: the end of run {req.topology.run_id} was not recorded ({type(exc).__name__}: {str(exc)[:200]})")
        return w._outcome(code, error)[1]


def run_bare(command: list[str], why: Optional[str]) -> None:
    """Run the command in place of this process (``exec``): nothing is recorded; says ``why`` once."""
    import sys

    if why:
        say(f"not recording: {why}")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        os.execvp(command[0], command)
    except OSError as exc:  # a script without a #! line: as a shell runs it, under /bin/sh (keeper._start too)
        if exc.errno != errno.ENOEXEC:
            raise
        os.execv("/bin/sh", ["/bin/sh", shutil.which(command[0]) or command[0], *command[1:]])


def run_passive(command: list[str], why: str, quiet: bool) -> None:
    """Run the command in place of this process (``exec``): nothing is recorded here."""
    run_bare(command, None if quiet else why)
