"""The keeper: runs a wrapped command so that nothing it starts outlives it, even when its wrapper is killed.

``trainledger run`` forks a small keeper process before it starts any thread.
The keeper becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``: descendants
orphaned by their parent, such as torchrun's workers, which run in sessions of
their own, are re-parented to it) and starts the command from an argument list
(never a shell) in a process group of its own, with SIGINT/SIGTERM at their
defaults and ``PR_SET_PDEATHSIG`` so that the command dies with the keeper.

* The wrapper talks to the keeper over a pipe. End of file on it means the
  wrapper is gone (even after ``kill -9``): the keeper kills every descendant
  with SIGKILL and exits, so no orphan is left.
* ``K`` on the pipe (the wrapper's grace period after a cancel ran out): SIGKILL
  every descendant.
* When the command exits, descendants it left behind get SIGTERM, then SIGKILL
  after :data:`LEFTOVER_GRACE_S`, and the keeper reports the exit status.

* Held start (``hold=True``): the keeper is forked at once, before the wrapper
  touches the ledger, and starts the command on ``G`` (``A``: it never starts).
  The wrapper's checks never wait on a lock, so the command starts at once.
* Signals: the keeper ignores every signal the wrapper forwards (it must
  outlive a SIGUSR1 or SIGHUP meant for the job); the command starts with them
  at their defaults, except those the wrapper itself was started with ignored
  (``nohup``), which stay ignored, as they would unwrapped. The wrapper blocks
  the signals it forwards before the fork (one thread of it waits for them, to
  learn who sent each); the keeper sets them ignored, then restores the mask the
  wrapper was started with, which the command inherits.
* The terminal: when the wrapper runs in the terminal's foreground, the command's
  process group becomes the foreground group (a job that reads the terminal must
  not stop on SIGTTIN). A stop of the command (Ctrl-Z) is reported, so that the
  wrapper stops too and the shell gets the terminal back.

Messages from the keeper, one per line: ``pid <command pid>``, ``stopped <signal>``,
then ``exit <returncode>`` (negative: killed by that signal), or
``error <errno> <message>`` when the command could not be started.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from trainledger.sources.capture.signals import FORWARDED, become_subreaper, die_with_parent, give_terminal

LEFTOVER_GRACE_S = 5.0


@dataclass
class Kept:
    """The wrapper's end of a kept command."""

    keeper_pid: int
    control_fd: int  # write: "K" = kill the tree now; close = wrapper gone
    status_fd: int  # read: the keeper's messages
    stderr_fd: int  # read: the command's stderr

    def _send(self, what: bytes) -> None:
        try:
            os.write(self.control_fd, what)
        except OSError:
            pass

    def kill_tree(self) -> None:
        self._send(b"K")

    def go(self) -> None:
        """Start the held command."""
        self._send(b"G")

    def abort(self) -> None:
        """Never start the held command (the keeper exits)."""
        self._send(b"A")


@dataclass
class Start:
    """How the keeper starts the command."""

    ignored: frozenset = frozenset()  # forwarded signals the command starts with ignored (nohup's HUP)
    tty_fd: Optional[int] = None  # the terminal to give the command's process group (None: none)
    hold: bool = False  # wait for go()/abort() before starting it
    mask: Optional[frozenset] = None  # the signal mask to restore in the keeper (the wrapper blocks what it waits for)


def spawn(command: Sequence[str], env: Mapping[str, str], how: Optional[Start] = None) -> Kept:
    """Fork the keeper, which starts ``command``; call before starting any thread (fork copies one thread)."""
    how = how or Start()
    import psutil  # noqa: F401  (loaded once, before the fork: the keeper's end needs it and the wrapper samples with it)

    r_ctl, w_ctl = os.pipe()
    r_st, w_st = os.pipe()
    r_err, w_err = os.pipe()
    pid = os.fork()
    if pid == 0:  # the keeper: never returns into the caller's code
        code = 70
        try:
            for fd in (w_ctl, r_st, r_err):
                os.close(fd)
            code = _keep(list(command), dict(env), r_ctl, w_st, w_err, how)
        finally:
            os._exit(code)
    for fd in (r_ctl, w_st, w_err):
        os.close(fd)
    os.set_inheritable(w_ctl, False)
    return Kept(pid, w_ctl, r_st, r_err)


def _child_setup(how: Start) -> None:
    """In the command, between fork and exec: its own process group (the terminal's foreground one when the
    wrapper had the terminal), signals as they would be unwrapped, die with the keeper."""
    os.setpgid(0, 0)
    if how.tty_fd is not None:
        give_terminal(how.tty_fd, os.getpgrp())
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_IGN if sig in how.ignored else signal.SIG_DFL)
    die_with_parent(signal.SIGKILL)


def _held(control_fd: int) -> bool:
    """Wait for the wrapper's go (True) or abort / its end (False)."""
    while True:
        try:
            data = os.read(control_fd, 1)
        except InterruptedError:
            continue
        except OSError:
            return False
        return data == b"G"


def _say(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode() + b"\n")
    except OSError:  # the wrapper is gone; the control pipe tells us too
        pass


def _keep(command: list[str], env: dict, control_fd: int, status_fd: int, stderr_fd: int, how: Start) -> int:
    for sig in FORWARDED:  # the wrapper decides what a signal means; the command gets defaults
        signal.signal(sig, signal.SIG_DFL if sig == signal.SIGCONT else signal.SIG_IGN)
    if how.mask is not None:  # then the mask the wrapper was started with: what the command inherits, as unwrapped
        signal.pthread_sigmask(signal.SIG_SETMASK, how.mask)
    become_subreaper()
    if how.hold and not _held(control_fd):
        return 0
    try:
        proc = _start(command, env, stderr_fd, how)
    except OSError as exc:
        _say(status_fd, f"error {exc.errno or 0} {exc.strerror or exc}")
        return 0
    os.close(stderr_fd)
    _say(status_fd, f"pid {proc.pid}")
    wrapper_gone = _wait(proc, control_fd, status_fd)
    if wrapper_gone:
        kill_descendants(signal.SIGKILL)
        return 0
    code = proc.returncode
    stop_leftovers()
    _say(status_fd, f"exit {code}")
    return 0


def _start(command: list[str], env: dict, stderr_fd: int, how: Start) -> subprocess.Popen:
    """Start the command; a script without a ``#!`` line (ENOEXEC) runs under ``/bin/sh``, as a shell runs it
    unwrapped (issue 37: bare it ran, wrapped it failed with "Exec format error")."""
    def popen(argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, env=env, stderr=stderr_fd, preexec_fn=lambda: _child_setup(how), close_fds=True)

    try:
        return popen(command)
    except OSError as exc:
        if exc.errno != errno.ENOEXEC:
            raise
    import shutil

    path = command[0] if os.sep in command[0] else shutil.which(command[0], path=env.get("PATH")) or command[0]
    return popen(["/bin/sh", path, *command[1:]])


def _wait(proc: subprocess.Popen, control_fd: int, status_fd: int) -> bool:
    """Wait for the command to exit; True if the wrapper went away first (the tree has then been killed)."""
    pidfd = _pidfd(proc.pid)
    watch = [control_fd] + ([pidfd] if pidfd is not None else [])
    while True:
        ready, _, _ = select.select(watch, [], [], 0.5)
        if control_fd in ready:
            try:
                data = os.read(control_fd, 64)
            except OSError:
                data = b""
            if not data:
                return True
            if b"K" in data:
                kill_descendants(signal.SIGKILL, keep=proc.pid)
        if proc.poll() is not None:
            return False
        _report_stop(proc.pid, status_fd)


def _report_stop(pid: int, status_fd: int) -> None:
    """Tell the wrapper when the command stopped (Ctrl-Z at the terminal it has): the wrapper stops too."""
    try:
        info = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG)
    except (ChildProcessError, OSError):
        return
    if info is not None and info.si_code == os.CLD_STOPPED:
        _say(status_fd, f"stopped {info.si_status}")


def _pidfd(pid: int) -> Optional[int]:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _descendants() -> list:
    """Live descendants of this process (zombies are dead: they only wait to be reaped)."""
    import psutil

    try:
        procs = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _reap(keep: Optional[int] = None) -> None:
    """Reap exited children, except ``keep`` (the command: ``Popen`` reads its exit status itself)."""
    import psutil

    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for p in children:
        if p.pid == keep:
            continue
        try:
            os.waitpid(p.pid, os.WNOHANG)
        except ChildProcessError:
            pass


def kill_descendants(sig: int, keep: Optional[int] = None, timeout_s: float = 10.0) -> None:
    """Send ``sig`` to every live descendant (reaping all but ``keep``) until none is left or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        procs = _descendants()
        if not procs:
            _reap(keep)
            return
        for p in procs:
            try:
                p.send_signal(sig)
            except Exception:
                pass
        time.sleep(0.05)
        _reap(keep)
        if time.monotonic() > deadline:
            return


def stop_leftovers(grace_s: float = LEFTOVER_GRACE_S) -> None:
    """Processes the command left behind: SIGTERM, then SIGKILL after ``grace_s``."""
    _reap()
    procs = _descendants()
    if not procs:
        return
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except Exception:
            pass
    deadline = time.monotonic() + grace_s
    while _descendants() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.1)
    kill_descendants(signal.SIGKILL)


def read_messages(kept: Kept, on_pid=None, on_stop=None) -> tuple[Optional[int], Optional[int], Optional[str]]:
    """Block until the keeper is done: ``(command pid, returncode, start error)``; ``on_pid`` is called as soon
    as the command runs, ``on_stop`` when it stopped. The wait wakes up for every signal (``set_wakeup_fd``):
    a signal the kernel hands to another thread of ours must still run its handler (forwarding) at once."""
    buf, pid, code, error = b"", None, None, None
    wake, old = _wakeup_pipe()
    try:
        while True:
            watch = [kept.status_fd] + ([wake] if wake is not None else [])
            try:
                ready, _, _ = select.select(watch, [], [], 1.0)
            except InterruptedError:
                continue
            if wake is not None and wake in ready:
                _drain(wake)
            if kept.status_fd not in ready:
                continue
            try:
                chunk = os.read(kept.status_fd, 4096)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                kind, _, rest = line.decode(errors="replace").partition(" ")
                if kind == "pid":
                    pid = int(rest)
                    if on_pid is not None:
                        on_pid(pid)
                elif kind == "stopped" and on_stop is not None:
                    on_stop(int(rest))
                elif kind == "exit":
                    code = int(rest)
                elif kind == "error":
                    error = rest
    finally:
        _close_wakeup(wake, old)
    try:
        os.waitpid(kept.keeper_pid, 0)
    except ChildProcessError:
        pass
    return pid, code, error


def _wakeup_pipe() -> tuple[Optional[int], Optional[int]]:
    """A pipe that signals wake (the main thread only); ``(read end, previous wakeup fd)``."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None, None
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r)
        os.close(w)
        return None, None
    _WAKE_W[r] = w
    return r, old


_WAKE_W: dict[int, int] = {}


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except OSError:
        pass


def _close_wakeup(r: Optional[int], old: Optional[int]) -> None:
    if r is None:
        return
    try:
        signal.set_wakeup_fd(old if old is not None else -1)
    except (ValueError, OSError):
        pass
    for fd in (r, _WAKE_W.pop(r, None)):
        if fd is not None:
            os.close(fd)
