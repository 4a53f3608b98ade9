"""A test-only hold: a run pauses after chosen steps until a file exists.

Tests that need a run *still running* at some point (a database outage mid-run, a
cancel) hold it there instead of racing its step count against the clock::

    TRAINLEDGER_TEST_HOLD="10:/tmp/t/go1,49:/tmp/t/go2"

Every rank, after finishing step 10, waits until ``/tmp/t/go1`` exists; after step 49,
until ``/tmp/t/go2`` exists. The test sees the run held (the ledger or the journal has
exactly 10 steps), does what it must, then creates the file. Inert when the variable is
unset (the trainer's tracker reads it once at start); a malformed value is an error
naming the variable, so a test never silently stops holding. Heartbeats and the
journal writer keep running during a hold (their own threads); SIGTERM still cancels.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Optional

ENV = "TRAINLEDGER_TEST_HOLD"


def parse_holds(value: Optional[str]) -> dict[int, Path]:
    """``"N:PATH[,N:PATH...]"`` → {steps done: gate file}; {} for None or ""."""
    holds: dict[int, Path] = {}
    for part in filter(None, (value or "").split(",")):
        steps, sep, path = part.partition(":")
        if not sep or not steps.strip().isdigit() or not path:
            raise ValueError(f"{ENV}: expected STEPS:PATH[,STEPS:PATH...], got {part!r}")
        holds[int(steps)] = Path(path)
    return holds


class Holds:
    """The holds of this process, read from the environment once."""

    def __init__(self, value: Optional[str] = None):
        self.holds = parse_holds(os.environ.get(ENV) if value is None else value)

    def after(self, steps_done: int, before_wait: Optional[Callable[[], None]] = None, poll_s: float = 0.05) -> None:
        """Wait until the gate file of ``steps_done`` exists (no-op without one); ``before_wait`` runs first
        (e.g. hand pending samples to the journal, so the test can see where the run stands)."""
        gate = self.holds.get(steps_done)
        if gate is None:
            return
        if before_wait is not None:
            before_wait()
        while not gate.exists():
            time.sleep(poll_s)
