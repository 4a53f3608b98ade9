"""How a tracked process stops: cancellation by signal, death with its parent, no orphans.

* SIGTERM/SIGINT cancel a run: :class:`StopSignals` raises :class:`RunCancelled`
  in the main thread (once); the run ends ``cancelled``.
* SIGUSR1 is the writer thread telling the main thread that the journal failed:
  the run stops ``failed`` (see :mod:`trainledger.sources.record.writer`).
* Once the final write has begun (``finishing``), signals no longer interrupt it.
* :func:`die_with_parent` / :func:`pdeathsig`: a process is SIGKILLed when its
  parent dies (Linux ``PR_SET_PDEATHSIG``), so a killed launcher leaves no orphans.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Any, Callable, Optional

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


class RunCancelled(KeyboardInterrupt):
    """Raised in the main thread when the run receives SIGTERM or SIGINT."""


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except OSError:
        return False


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies: no orphans."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def pdeathsig(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when its parent dies."""
    def set_it() -> None:  # runs in the child between fork and exec
        die_with_parent(sig)
    return set_it


def become_subreaper() -> bool:
    """Orphaned descendants of this process are re-parented to it (not to init), so it can stop them."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


class StopSignals:
    """SIGTERM/SIGINT → :class:`RunCancelled` (once); SIGUSR1 → ``failure()`` raised; restorable.

    ``polite``: take over a signal only where its handler is still Python's default
    (so a framework's own SIGTERM handling, e.g. Lightning's under Slurm, is kept).
    Handlers are installed only from the main thread.
    """

    def __init__(self, failure: Callable[[], BaseException], polite: bool = False):
        self.failure = failure
        self.polite = polite
        self.cancelling = False
        self.finishing = False  # the final write has begun: signals must not interrupt it
        self.received: Optional[int] = None
        self._prev: dict[int, Any] = {}

    def _cancel(self, signum, frame) -> None:
        if self.cancelling or self.finishing:  # one cancellation is enough; later signals must not interrupt the end
            return
        self.cancelling = True
        self.received = signum
        raise RunCancelled(f"received {signal.Signals(signum).name}")

    def _failed(self, signum, frame) -> None:
        if self.finishing:  # already writing the end: it is written past the broken journal
            return
        raise self.failure()

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler,
                    signal.SIGUSR1: signal.SIG_DFL}
        for sig, handler in ((signal.SIGTERM, self._cancel), (signal.SIGINT, self._cancel),
                             (signal.SIGUSR1, self._failed)):
            if self.polite and signal.getsignal(sig) not in (defaults[sig], None):
                continue
            self._prev[sig] = signal.signal(sig, handler)

    def restore(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self._prev.items():
            signal.signal(sig, handler)
        self._prev = {}


# --- the run wrapper: the job gets every signal it would get unwrapped ------------------------

#: signals ``trainledger run`` passes on to the command's process group. INT/TERM also cancel the run;
#: the others (Slurm's ``--signal USR1@60``, HUP, WINCH, CONT, ...) are only forwarded. Not here: KILL/STOP
#: (uncatchable), CHLD (the wrapper's own), PIPE/XFSZ/XCPU (the kernel's about the wrapper's own writes and
#: limits) and the terminal's TSTP/TTIN/TTOU (the job is in the terminal's foreground group itself).
FORWARDED = tuple(s for s in (getattr(signal, n, None) for n in (
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCONT", "SIGWINCH", "SIGPWR",
    "SIGURG", "SIGVTALRM", "SIGPROF")) if s is not None)


def inherited_ignored() -> frozenset:
    """The forwarded signals this process was started with ignored (``nohup`` ignores HUP, a shell's
    background job INT and QUIT): the command inherits them ignored, as it would unwrapped."""
    return frozenset(s for s in FORWARDED if signal.getsignal(s) == signal.SIG_IGN)


def controlling_tty() -> Optional[int]:
    """A descriptor of this process's controlling terminal when its process group is the terminal's
    foreground group (an interactive run), else None."""
    import os

    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def give_terminal(fd: int, pgid: int) -> bool:
    """Make ``pgid`` the terminal's foreground process group (SIGTTOU held off while doing it, as a shell does)."""
    import os

    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        os.tcsetpgrp(fd, pgid)
        return True
    except OSError:
        return False
    finally:
        if old is not None:
            signal.signal(signal.SIGTTOU, old)


# --- under Slurm: a signal slurmstepd already delivered to every process of the step (issue 37) --------------

#: Slurm's process tracking plugins that signal every process of a step (``scancel --signal``, ``--signal
#: USR1@60``, a time limit's SIGTERM): the wrapped command got the signal from slurmstepd itself, as the wrapper
#: did. ``proctrack/pgid`` signals the task's process group only (the wrapper's, not the command's own).
STEP_WIDE_PROCTRACK = ("proctrack/cgroup", "proctrack/linuxproc")
#: where a node's slurm.conf is, after ``$SLURM_CONF`` (packaged paths; slurmd's cache in configless mode)
SLURM_CONF_PATHS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/run/slurm/conf/slurm.conf",
                    "/var/spool/slurmd/conf-cache/slurm.conf")
_PROCTRACK: dict[str, Optional[str]] = {}


def _proc_text(pid: int, name: str, limit: int = 4096) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _parent_of(pid: int) -> Optional[int]:
    stat = _proc_text(pid, "stat")
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def is_ancestor(pid: int, limit: int = 64) -> bool:
    """Whether ``pid`` is this process's parent, grandparent, ... (at most ``limit`` levels up)."""
    here = os.getppid()
    for _ in range(limit):
        if here == pid:
            return True
        if here is None or here <= 1:
            return False
        here = _parent_of(here)
    return False


def slurm_proctrack(env: Optional[dict] = None) -> Optional[str]:
    """``ProctrackType`` of the node's Slurm (``$SLURM_CONF``, else the packaged and configless paths), lower
    case (Slurm's default ``proctrack/cgroup`` when the file does not set it); None when no slurm.conf can be
    read or it may be set in an ``Include``d file (read once, at most 1 MiB)."""
    env = os.environ if env is None else env
    paths = ((env["SLURM_CONF"],) if env.get("SLURM_CONF") else ()) + SLURM_CONF_PATHS
    key = "\0".join(paths)
    if key not in _PROCTRACK:
        found = None
        for path in paths:
            try:
                with open(path, "rb") as fh:
                    text = fh.read(1 << 20).decode("utf-8", "replace")
            except OSError:
                continue
            found, included = "proctrack/cgroup", False  # Slurm's default when slurm.conf does not say
            for line in text.splitlines():
                name, eq, value = line.split("#", 1)[0].strip().partition("=")
                if eq and name.strip().lower() == "proctracktype":
                    found, included = value.strip().lower(), False
                elif name.strip().lower().startswith("include"):
                    included = True  # it may be set in the included file: unknown
            found = None if included else found
            break
        _PROCTRACK[key] = found
    return _PROCTRACK[key]


def delivered_by_slurm(sender: Optional[int], env: Optional[dict] = None) -> bool:
    """True when a signal from ``sender`` was already delivered by Slurm to every process of this step, the
    wrapped command included, so that forwarding it would deliver it twice.

    That is: under a Slurm job (``SLURM_JOB_ID``), ``sender`` is the slurmstepd of the step this process runs
    in (an ancestor whose ``comm`` is ``slurmstepd``) and the step is a job step (``slurmstepd: [JOB.N]``, an
    ``srun``), not the batch step (``[JOB.batch]``: ``scancel --batch`` and ``--signal B:…`` signal the batch
    shell alone, ``--full`` its process group: the command, in a group of its own, is not signalled), and the
    node's ``ProctrackType`` signals every process of a step (:data:`STEP_WIDE_PROCTRACK`; checked on the real
    Slurm of tests/slurm). Anything unknown (no slurm.conf to read, another plugin, no /proc): False, the
    signal is forwarded: twice rather than never.
    """
    env = os.environ if env is None else env
    if not sender or sender <= 1 or not env.get("SLURM_JOB_ID") or sender == os.getpid():
        return False
    if (_proc_text(sender, "comm") or "").strip() != "slurmstepd":
        return False
    title = (_proc_text(sender, "cmdline") or "").replace("\0", " ")
    step = title.partition("[")[2].partition("]")[0].rpartition(".")[2]
    if not step.isdigit() or not is_ancestor(sender):
        return False
    return slurm_proctrack(env) in STEP_WIDE_PROCTRACK
