"""A job that probes what the wrapper does to it (tests/capture/test_wrapper_never_hurts.py).

    python hostile_job.py [--started FILE] [--signals FILE] [--report-ignored FILE] [--read-line FILE]
                          [--fill PATH] [--filled FILE] [--wait-for FILE] [--err-lines N] [--out TEXT]
                          [--count FILE] [--exit CODE] [ANY OTHER ARGUMENTS, ignored]

``--signals``: append the name of every USR1/USR2/HUP/WINCH/QUIT/ALRM/CONT it gets to FILE (one a line).
``--report-ignored``: write the names of the signals it started with ignored. ``--read-line``: read one line
from stdin (the terminal) into FILE. ``--fill``: write PATH until the disk is full, then touch ``--filled``.
``--wait-for``: wait until FILE exists. ``--count``: append one line to FILE (how many times it ran).
"""

import argparse
import os
import signal
import sys
import time

NAMES = ("SIGUSR1", "SIGUSR2", "SIGHUP", "SIGWINCH", "SIGQUIT", "SIGALRM", "SIGCONT")


def _note(path: str, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text + "\n")


def _note_whole(path: str, text: str) -> None:
    """Write a one-shot FILE whole: the test waits for it to exist and then reads it, so it must never see it
    empty (an appended file exists from its open, before its line is written)."""
    with open(path + ".part", "w") as fh:
        fh.write(text + "\n")
    os.replace(path + ".part", path)


def _fill(path: str) -> None:
    block = b"x" * 4096
    try:
        with open(path, "wb", buffering=0) as fh:
            while True:
                fh.write(block)
    except OSError:
        pass


def main() -> int:
    p = argparse.ArgumentParser()
    for opt in ("--started", "--signals", "--report-ignored", "--read-line", "--fill", "--filled", "--wait-for",
                "--count", "--out"):
        p.add_argument(opt)
    p.add_argument("--err-lines", type=int, default=0)
    p.add_argument("--exit", type=int, default=0)
    a, _unknown = p.parse_known_args()
    if a.count:
        _note(a.count, str(os.getpid()))
    if a.report_ignored:
        ignored = [n for n in NAMES + ("SIGINT", "SIGTERM") if signal.getsignal(getattr(signal, n)) == signal.SIG_IGN]
        _note_whole(a.report_ignored, " ".join(ignored) or "-")
    if a.signals:
        for name in NAMES:
            signal.signal(getattr(signal, name), lambda signum, frame: _note(a.signals, signal.Signals(signum).name))
    if a.started:
        _note_whole(a.started, str(os.getpid()))
    if a.read_line:
        _note_whole(a.read_line, sys.stdin.readline().strip())
    if a.fill:
        _fill(a.fill)
        _note(a.filled, "full")
    for i in range(a.err_lines):
        print(f"stderr line {i}", file=sys.stderr)
    if a.out:
        sys.stdout.write(a.out)
        sys.stdout.flush()
    while a.wait_for and not os.path.exists(a.wait_for):
        time.sleep(0.05)
    return a.exit


if __name__ == "__main__":
    sys.exit(main())
