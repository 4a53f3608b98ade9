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
