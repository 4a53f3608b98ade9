"""Benchmarks of trainledger: ``python -m bench [--quick] [--json FILE]`` (docs/PERFORMANCE.md).

Every figure is a ratio measured in the same run against its baseline, with
the absolute times beside it, and a pass/fail against the target of SPEC §11.
One module per benchmark (``bench.overhead``, ``bench.capture`` (the run wrapper and the
Python API), ``bench.ingest``, ``bench.ingest_pg``, ``bench.rollup``, ``bench.dashboard``, ``bench.runs_list``,
``bench.plan``, ``bench.exporter``, ``bench.mfu``, and ``bench.slurm`` for the three sacct import figures); the
synthetic ledgers come from ``bench.gen`` and are cached under ``bench/results/``.
Progress goes to stderr; the table to stdout.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"


def log(msg: str, progress: bool = False) -> None:
    """Progress on stderr (``progress``: overwrite the line when stderr is a terminal)."""
    if progress and sys.stderr.isatty():
        print(f"\r{msg}\033[K", end="", file=sys.stderr, flush=True)
    elif not progress:
        if sys.stderr.isatty():
            print("\r\033[K", end="", file=sys.stderr)
        print(msg, file=sys.stderr, flush=True)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


@dataclass
class Result:
    """One benchmark's figure: ``ratio`` (measured ÷ baseline) against ``target`` (``op`` "<=" or ">=")."""

    key: str
    title: str
    baseline: str
    target: Optional[float]  # None: the ratio is informational; extra_targets decide
    op: str  # "<=" | ">="
    ratio: Optional[float] = None
    measured: dict[str, Any] = field(default_factory=dict)  # absolute figures (seconds, rows/s …)
    extra_targets: list[dict[str, Any]] = field(default_factory=list)  # e.g. an absolute ≤ 1 s
    notes: list[str] = field(default_factory=list)
    absolute: str = ""  # the absolute figures beside the ratio, for the table
    target_text: str = ""  # the target as the table shows it
    error: Optional[str] = None
    seconds: Optional[float] = None  # wall time of the benchmark itself (setup included)

    @property
    def passed(self) -> Optional[bool]:
        if self.ratio is None:
            return None
        ok = True
        if self.target is not None:
            ok = self.ratio <= self.target if self.op == "<=" else self.ratio >= self.target
        for t in self.extra_targets:
            if t.get("value") is None:
                continue
            ok = ok and (t["value"] <= t["target"] if t["op"] == "<=" else t["value"] >= t["target"])
        return ok

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        return d
