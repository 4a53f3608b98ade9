"""Fault injection on real processes: kill -9, a database outage, a full disk, concurrent writers.

Every test records what it injected and what it found in the session's tally
(``fault_tally``), written to ``test-artifacts/faults-summary.json`` at the end
of the session and printed in pytest's terminal summary::

    {"faults_injected": 9, "runs": 13, "runs_lost": 0, "samples_checked": 1234,
     "samples_lost": 0, "samples_doubled": 0, "cases": [...]}

A run is *lost* when the ledger has no row for it, leaves it queued/running
after its processes are gone, or cannot cost it. Samples are audited per run
against the steps it ran: the trainer records loss, step time and cumulative
tokens at every step (runs here have at most 1,000 steps, so none is
downsampled), so the tokens samples must be exactly ``k × tokens_per_step``
for ``k = 1..n``, each once, and every metric must have one sample per step;
anything journaled must be in the ledger.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Optional

import pytest

from tests import summaries
from tests.faults.tally import SUMMARY, Case, Tally  # noqa: F401  (SUMMARY, Case: imported by the tests)
from tests.tracking.conftest import REPO, journal_samples, pg_cluster, shard_cache  # noqa: F401  (fixtures)

STEP_METRICS = ("loss", "step_seconds", "tokens")
#: zero2.yaml / dp.yaml: global batch 16 × seq len 128 (tiny)
TOKENS_PER_STEP = 16 * 128
ENDED = {"succeeded", "failed", "cancelled", "crashed"}


_TALLY: Optional[Tally] = None


@pytest.fixture(scope="session")
def fault_tally():
    """This process's tally; tests/summaries.py merges the tallies of every xdist worker and writes SUMMARY."""
    global _TALLY
    _TALLY = Tally()
    yield _TALLY


summaries.register("faults", lambda: [asdict(c) for c in _TALLY.cases] if _TALLY is not None else [])


# --- audits ----------------------------------------------------------------------------

def _utc(ts) -> datetime:
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    if ts.tzinfo is not None:
        ts = ts.astimezone(timezone.utc).replace(tzinfo=None)
    return ts


def audit_samples(engine, run_id: str, journal: Optional[Path] = None, steps: Optional[int] = None,
                  tokens_per_step: int = TOKENS_PER_STEP) -> dict:
    """Lost and doubled per-step samples of a run (see the module docstring).

    ``steps``: the number of steps the run is known to have completed (else the highest step
    recorded); ``journal``: its journal file, every sample of which must be in the ledger.
    """
    from sqlmodel import Session, select
    from trainledger.store.models import MetricSample

    with Session(engine) as s:
        rows = s.exec(select(MetricSample.metric, MetricSample.ts, MetricSample.value)
                      .where(MetricSample.run_id == run_id, MetricSample.metric.in_(STEP_METRICS))).all()
    by_metric = {m: [(_utc(ts), v) for metric, ts, v in rows if metric == m] for m in STEP_METRICS}
    # cumulative tokens name the step: k × tokens_per_step after step k
    done = [round(v / tokens_per_step) for _, v in by_metric["tokens"]]
    assert all(v == k * tokens_per_step for (_, v), k in zip(by_metric["tokens"], done)), "tokens not whole steps"
    n = max([steps or 0, *done])
    lost = n - len(set(done))  # steps without their tokens sample (gaps, or a missing tail)
    doubled = len(done) - len(set(done))  # steps recorded more than once
    for m in ("loss", "step_seconds"):  # one sample per step, at the step's time
        lost += max(0, n - len(by_metric[m]))
        doubled += max(0, len(by_metric[m]) - n)
    missing_from_journal = 0
    if journal is not None:
        ledger_keys = {(m, ts) for m, r in by_metric.items() for ts, _ in r}
        missing_from_journal = sum((r[2], _utc(r[3])) not in ledger_keys
                                   for r in journal_samples(journal) if r[2] in STEP_METRICS)
        lost += missing_from_journal
    return {"run_id": run_id, "steps": n, "samples": len(rows), "lost": lost, "doubled": doubled,
            "per_metric": {m: len(r) for m, r in by_metric.items()}, "journal_missing": missing_from_journal}


def run_lost(engine, run_id: str) -> Optional[str]:
    """Why a run counts as lost (None if it is not): no row, never ended, or no cost.

    The cost is what `trainledger runs show RUN --json` prints as ``cost_actual`` (the same
    function, called in this process to spare a CLI start per run).
    """
    from sqlmodel import Session
    from trainledger.runs.registry import show_run

    from tests.tracking.conftest import run_row

    run = run_row(engine, run_id)
    if run is None:
        return "no ledger row"
    if run.status.value not in ENDED or run.ended_at is None:
        return f"still {run.status.value} (ended_at {run.ended_at})"
    with Session(engine) as s:
        cost = show_run(s, run_id)["cost_actual"]
    if cost is None or Decimal(cost) <= 0:
        return f"not costed: cost_actual {cost!r}"
    return None


def log_of(run) -> str:
    return Path(run.log_path).read_text(errors="replace") if run.log_path and os.path.exists(run.log_path) else ""


def rank_pid(launcher_pid: int, rank: int) -> Optional[int]:
    """The pid of global rank ``rank`` among the launcher's (torchrun's) children."""
    from tests.tracking.conftest import children

    for pid in children(launcher_pid):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return pid
    return None


def training(engine, run_id: str, min_steps: int = 3) -> bool:
    """The run is running, heartbeating, and the ledger has at least ``min_steps`` of its steps."""
    from trainledger.store.models import RunStatus

    from tests.tracking.conftest import run_row, sample_counts

    run = run_row(engine, run_id)
    return (run is not None and run.status == RunStatus.running and run.heartbeat_at is not None
            and sample_counts(engine, run_id).get("loss", 0) >= min_steps)
