"""The fault tests' tally: what each test injected and what it found (see tests/faults/conftest.py)."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
SUMMARY = REPO / "test-artifacts" / "faults-summary.json"


@dataclass
class Case:
    name: str
    faults: int
    runs: int
    runs_lost: int = 0
    samples: int = 0
    samples_lost: int = 0
    samples_doubled: int = 0
    notes: dict = field(default_factory=dict)


class Tally:
    def __init__(self) -> None:
        self.cases: list[Case] = []
        self._lock = threading.Lock()

    def record(self, name: str, faults: int, audits: list[dict], runs_lost: int = 0, runs: Optional[int] = None,
               **notes) -> Case:
        """One test's figures: ``audits`` are :func:`audit_samples` results (one per run, unless ``runs``)."""
        case = Case(name, faults, len(audits) if runs is None else runs, runs_lost, sum(a["samples"] for a in audits),
                    sum(a["lost"] for a in audits), sum(a["doubled"] for a in audits), notes)
        with self._lock:
            self.cases.append(case)
        return case

    def summary(self) -> dict:
        total = {k: sum(getattr(c, k) for c in self.cases) for k in ("faults", "runs", "runs_lost", "samples",
                                                                      "samples_lost", "samples_doubled")}
        return {
            "faults_injected": total["faults"], "runs": total["runs"], "runs_lost": total["runs_lost"],
            "samples_checked": total["samples"], "samples_lost": total["samples_lost"],
            "samples_doubled": total["samples_doubled"],
            "line": (f"{total['faults']} faults injected, {total['runs_lost']} runs lost, "
                     f"{total['samples_lost']} samples lost, {total['samples_doubled']} doubled "
                     f"({total['runs']} runs, {total['samples']} samples checked)"),
            "cases": [asdict(c) for c in self.cases],
        }
