"""A run's end settled from every report of it, whatever order they arrive in (issue 37).

Who reports a run's end:

* **own**: the run's own process (rank 0 of the bundled trainer, ``trainledger.track``, the wrapper) journals
  its status, error, exit code and end time (``run`` event, applied by ``journal_apply``);
* **launcher**: the supervisor of ``trainledger launch`` after torchrun exited: its exit code, every rank
  torchrun's report lists as failed, whether someone asked to cancel, whether training ever started;
* **reaper**: ``runs reap`` ends a ``running`` run whose heartbeat stopped (``crashed`` at its last heartbeat).
  It only touches running rows, so it is the answer when nobody else reported, and no report here.

Every writer adds its report to the row's reports under the row's lock and sets status, error, exit code and
end from :func:`settle_reports`, a pure function of the set of reports (the row's ``config["end_reports"]``
once the launcher reported; before, the row itself is the run's own report): the root cause
of a failed run wins over its consequences, ranked (:func:`tier`)

====  =================================================================================================
tier  report
====  =================================================================================================
6     the run recorded its own success
5     the launcher reports a rank killed by a signal (SIGKILL, SIGSEGV, …; not a stop: SIGTERM, SIGINT)
4     a rank's own exception: rank 0's error, or a rank the launcher reports exited non-zero
3     rank 0 failed with a communication error (gloo/NCCL "Read error", "Connection reset", a timeout):
      the echo of another rank's death
2     rank 0 stopped by a signal (``cancelled``)
1     the launcher exited without a final status (or someone asked it to cancel): ``crashed`` at the
      last heartbeat; ``failed`` when training never started
====  =================================================================================================

ties go to the run's own report. The launcher's account of rank 0 counts only while rank 0 recorded nothing.
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from trainledger.store.models import Run, RunStatus

KEY = "end_reports"
#: exit codes of a rank stopped because someone (the launcher, a user) asked it to stop: not a cause
STOP_CODES = frozenset({130, 143, -signal.SIGTERM, -signal.SIGINT})
#: an error that is the consequence of another rank's end: the collective lost its peer
COMM_ERROR = re.compile(r"read error|write error|connection (?:reset|closed|refused)|broken pipe|timed out|"
                        r"timeout|DistNetworkError|DistBackendError|ncclRemoteError|ncclSystemError|"
                        r"communicator was aborted|peer closed", re.IGNORECASE)
ENDED = (RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled, RunStatus.crashed)
REAPED_ERROR = "heartbeat stopped; marked crashed at the last heartbeat"
ERROR_MAX = 4000


@dataclass(frozen=True)
class Outcome:
    """What the run row says of its end."""

    status: RunStatus
    error: Optional[str]
    exit_code: Optional[int]
    ended_at: Optional[datetime]


def _iso(ts: Any) -> Optional[str]:
    return ts.isoformat() if isinstance(ts, datetime) else ts


def _ts(value: Any) -> Optional[datetime]:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def own_report(status: Any, error: Optional[str], exit_code: Optional[int], ended_at: Any) -> dict:
    """The run's own account of its end."""
    return {"by": "own", "status": RunStatus(status).value, "error": error, "exit_code": exit_code,
            "ended_at": _iso(ended_at)}


def launcher_report(exit_code: int, failures: list[dict], at: datetime, *, cancel_requested: bool = False,
                    started: bool = True, log_path: Optional[str] = None) -> dict:
    """The supervisor's account: the launcher's exit code and the ranks its report lists as failed
    (``{"rank", "local_rank", "exit_code", "root"}``), at ``at`` (when it let go of the nodes)."""
    return {"by": "launcher", "exit_code": exit_code, "failures": failures, "at": _iso(at),
            "cancel_requested": cancel_requested, "started": started, "log_path": log_path}


def describe(failure: dict) -> str:
    """``rank 1 (local_rank 1) was killed by SIGKILL`` / ``… exited with 1``."""
    code = failure["exit_code"]
    try:
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
    except ValueError:
        how = f"exited with {code}"
    return f"rank {failure['rank']} (local_rank {failure['local_rank']}) {how}"


def _failure_tier(failure: dict) -> int:
    code = failure["exit_code"]
    if code in STOP_CODES or code == 0:
        return 1
    return 5 if code < 0 else 4


def _cause(report: dict, own: bool) -> Optional[dict]:
    """The launcher's root cause: its best-ranked failure (torchrun's own root cause, then the lowest rank,
    among equals); rank 0 counts only when rank 0 recorded nothing of its own."""
    failures = [f for f in report["failures"] if not (own and f["rank"] == 0)]
    if not failures:
        return None
    return min(failures, key=lambda f: (-_failure_tier(f), not f.get("root"), f["rank"]))


def tier(report: dict, own: bool) -> int:
    """How strongly ``report`` explains the run's end (the module's table); ``own``: rank 0 reported too."""
    if report["by"] == "own":
        status = RunStatus(report["status"])
        if status == RunStatus.succeeded:
            return 6
        if status == RunStatus.cancelled:
            return 2
        if status == RunStatus.crashed:  # a row a writer without reports ended at the last heartbeat
            return 1
        return 3 if status == RunStatus.failed and COMM_ERROR.search(report.get("error") or "") else 4
    cause = _cause(report, own)
    if report.get("cancel_requested") or cause is None:
        return 1
    return _failure_tier(cause)


def _key(report: dict) -> str:
    return json.dumps(report, sort_keys=True, default=str)


def settle_reports(reports: list[dict], heartbeat_at: Optional[datetime]) -> Optional[Outcome]:
    """The run's end from its reports (None: no report); the same whatever order they came in."""
    if not reports:
        return None
    owns = [r for r in reports if r["by"] == "own"]
    best_own = max(owns, key=lambda r: (tier(r, True), _key(r))) if owns else None
    launchers = [r for r in reports if r["by"] == "launcher"]
    launcher = max(launchers, key=lambda r: (tier(r, bool(owns)), _key(r))) if launchers else None
    if launcher is None or (best_own is not None and tier(best_own, True) >= tier(launcher, True)):
        return Outcome(RunStatus(best_own["status"]), best_own["error"],
                       best_own["exit_code"] if best_own["exit_code"] is not None
                       else (launcher or {}).get("exit_code"), _ts(best_own["ended_at"]))
    return _launcher_outcome(launcher, best_own, heartbeat_at)


def _launcher_outcome(report: dict, own: Optional[dict], heartbeat_at: Optional[datetime]) -> Outcome:
    code, at = report["exit_code"], _ts(report["at"])
    cause = _cause(report, own is not None)
    if tier(report, own is not None) == 1 and not report.get("started", True):
        return Outcome(RunStatus.failed, f"the launcher exited with {code} before training started; "
                       f"see {report.get('log_path')}", code, at)
    if tier(report, own is not None) == 1 or cause["rank"] == 0:
        error = f"the launcher exited with {code} without a final status; ended at the last heartbeat"
        if cause is not None or report["failures"]:
            first = cause or min(report["failures"], key=lambda f: (not f.get("root"), f["rank"]))
            error += f" (first failure: {describe(first)})"
        return Outcome(RunStatus.crashed, error, code, heartbeat_at or at)
    text = describe(cause)
    if own is None:
        return Outcome(RunStatus.failed, f"{text}; the launcher then stopped the other ranks before rank 0 "
                       "recorded its end", code, at)
    if RunStatus(own["status"]) == RunStatus.cancelled:
        error = f"{text}; the launcher then stopped the other ranks"
    else:
        error = f"{text}; rank 0 then failed" + (f": {own['error']}" if own.get("error") else "")
    return Outcome(RunStatus.failed, error[:ERROR_MAX], code, _ts(own["ended_at"]))


# --- the row --------------------------------------------------------------------------

def lock_run(session, run: Run) -> None:
    """Re-read ``run`` under its row lock (PostgreSQL ``FOR UPDATE``; SQLite's writers are serialised by
    ``BEGIN IMMEDIATE``), so that a writer merges with what the others committed instead of overwriting it."""
    session.flush()
    session.refresh(run, with_for_update=True)


def reports_of(run: Run) -> list[dict]:
    """The reports the row holds."""
    return list((run.config or {}).get(KEY) or [])


def _unreported_end(run: Run) -> Optional[dict]:
    """A row ended by a writer that keeps no reports (an older version, ``runs cancel``): its end counts as the
    run's own; the reaper's mark is no report."""
    if run.status not in ENDED or (run.status == RunStatus.crashed and run.error == REAPED_ERROR):
        return None
    return own_report(run.status, run.error, run.exit_code, run.ended_at)


def record_report(session, run: Run, report: dict) -> None:
    """Add ``report`` to the run's reports and settle the row from all of them (the caller holds the row's lock:
    :func:`lock_run`)."""
    reports = reports_of(run)
    if not reports and (earlier := _unreported_end(run)) is not None:
        reports.append(earlier)
    if _key(report) not in {_key(r) for r in reports}:
        reports.append(report)
    if any(r["by"] != "own" for r in reports):  # with the run's own reports only, the best of them is the row
        run.config = {**(run.config or {}), KEY: reports}
    _set(run, settle_reports(reports, run.heartbeat_at))


def apply_outcome(run: Run) -> None:
    """Status, error, exit code and end of ``run`` from the reports it holds (nothing when it holds none)."""
    _set(run, settle_reports(reports_of(run), run.heartbeat_at))


def _set(run: Run, outcome: Optional[Outcome]) -> None:
    if outcome is not None:
        run.status, run.error, run.exit_code = outcome.status, outcome.error, outcome.exit_code
        run.ended_at = outcome.ended_at or run.ended_at


__all__ = ["Outcome", "KEY", "STOP_CODES", "COMM_ERROR", "REAPED_ERROR", "own_report", "launcher_report", "describe",
           "tier", "settle_reports", "lock_run", "reports_of", "record_report", "apply_outcome"]
