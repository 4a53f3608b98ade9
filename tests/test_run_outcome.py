"""A run's end is settled from every report of it, whatever order they arrive in (issue 37, item 5).

Each scenario replays every arrival order of its reports into a real ledger (SQLite and PostgreSQL): rank 0's
own end (a journal ``run`` event), the launch supervisor's ``settle`` with torchrun's failure report, and
``runs reap``. Every order must leave the same status, error, exit code and end.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlmodel import Session
from trainledger.runs.launch import launcher_failures, settle
from trainledger.runs.registry import reap_stale
from trainledger.sources.record.journal_apply import apply_events
from trainledger.sources.record.outcome import launcher_report, own_report, settle_reports
from trainledger.store.db import make_engine
from trainledger.store.models import Run, RunStatus

from tests.helpers import add_run

STARTED = datetime(2025, 3, 4, 10, 0, tzinfo=timezone.utc)
BEAT = STARTED + timedelta(minutes=20)
FAILED_AT = STARTED + timedelta(minutes=20, seconds=3)
READ_ERROR = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
              "[127.0.0.1]:29500: Connection reset by peer")


def torchrun_report(failures: list[tuple[int, int]], root: tuple[int, int]) -> str:
    """torchrun's failure report (torch.distributed.elastic ChildFailedError.format_msg) for (rank, exit code)."""
    def entry(i: int, rank: int, code: int) -> str:
        return (f"[{i}]:\n  time      : 2025-03-04_10:20:03\n  host      : node-a\n"
                f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: {4000 + rank})\n"
                "  error_file: <N/A>\n  traceback : Signal 9 (SIGKILL) received by PID 4001")
    others = "\n".join(entry(i + 1, r, c) for i, (r, c) in enumerate(failures)) or "  <NO_OTHER_FAILURES>"
    return ("[rank0]: " + READ_ERROR + "\n" + "=" * 60 + "\ntrainledger.trainer.train FAILED\n" + "-" * 60 +
            f"\nFailures:\n{others}\n" + "-" * 60 + f"\nRoot Cause (first observed failure):\n{entry(0, *root)}\n"
            + "=" * 60 + "\n")


def _naive(ts):
    return ts.astimezone(timezone.utc).replace(tzinfo=None) if ts.tzinfo else ts


#: name → (rank 0's own end or None, launcher's exit code, torchrun's report, the settled end)
SCENARIOS = {
    # rank 1 is SIGKILLed; rank 0's gloo Read error came first and torchrun even calls it the root cause
    "rank1-killed": (("failed", READ_ERROR, 1), 1, ([(1, -9)], (0, 1)),
                     (RunStatus.failed, f"rank 1 (local_rank 1) was killed by SIGKILL; rank 0 then failed: {READ_ERROR}",
                      1, FAILED_AT)),
    # torchrun stopped rank 0 (SIGTERM) after rank 1 died; nobody asked to cancel
    "stopped-by-launcher": (("cancelled", "cancelled by signal", 130), 1, ([(0, -15)], (1, -9)),
                            (RunStatus.failed, "rank 1 (local_rank 1) was killed by SIGKILL; the launcher then "
                             "stopped the other ranks", 1, FAILED_AT)),
    # rank 0 itself is SIGKILLed: nothing of its own, the run crashed at its last heartbeat
    "rank0-killed": (None, 1, ([(0, -9)], (1, 1)),
                     (RunStatus.crashed, "the launcher exited with 1 without a final status; ended at the last "
                      "heartbeat (first failure: rank 0 (local_rank 0) was killed by SIGKILL)", 1, BEAT)),
    # rank 0's own exception is the cause; the launcher only reports it and the SIGTERM of rank 1
    "rank0-exception": (("failed", "ValueError: bad batch at step 7", 1), 1, ([(1, -15)], (0, 1)),
                        (RunStatus.failed, "ValueError: bad batch at step 7", 1, FAILED_AT)),
}


def _arrive(event: str, url: str, rid: str, own, launcher_code: int, log: Path) -> None:
    engine = make_engine(url)
    try:
        if event == "own":
            status, error, code = own
            with Session(engine) as s:
                apply_events(s, [{"type": "run", "run_id": rid, "fields": {
                    "status": status, "error": error, "exit_code": code, "ended_at": FAILED_AT.isoformat()}}])
                s.commit()
        elif event == "launcher":
            settle(rid, url, launcher_code, log_path=log)
        else:
            with Session(engine) as s:
                reap_stale(s, now=datetime.now(timezone.utc))
                s.commit()
    finally:
        engine.dispose()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_arrival_order_settles_the_same_end(ledger_url, tmp_path, monkeypatch, scenario):
    monkeypatch.setenv("TRAINLEDGER_JOURNAL_DIR", str(tmp_path / "journal"))
    own, code, (failures, root), expected = SCENARIOS[scenario]
    log = tmp_path / "run.log"
    log.write_text(torchrun_report(failures, root))
    events = ("own", "launcher", "reaper") if own else ("launcher", "reaper")
    engine = make_engine(ledger_url)
    settled = {}
    for n, order in enumerate(itertools.permutations(events)):
        rid = f"order-{n}"
        with Session(engine) as s:
            add_run(s, rid, STARTED, 1.0, nodes=1, offer_name=None, status=RunStatus.running)
            run = s.get(Run, rid)
            run.ended_at, run.heartbeat_at = None, BEAT
            s.commit()
        for event in order:
            _arrive(event, ledger_url, rid, own, code, log)
        with Session(engine) as s:
            run = s.get(Run, rid)
            settled[order] = (run.status, run.error, run.exit_code, _naive(run.ended_at))
    engine.dispose()
    status, error, exit_code, ended = expected
    assert set(settled.values()) == {(status, error, exit_code, _naive(ended))}, settled


def test_the_launchers_report_lists_every_failed_rank(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("old run\n" + torchrun_report([(7, 1)], (3, 1)) + torchrun_report([(1, -9), (2, -15)], (0, 1)))
    assert launcher_failures(log) == [
        {"rank": 1, "local_rank": 1, "exit_code": -9, "root": False},
        {"rank": 2, "local_rank": 2, "exit_code": -15, "root": False},
        {"rank": 0, "local_rank": 0, "exit_code": 1, "root": True},
    ]
    assert launcher_failures(tmp_path / "absent.log") == []


def test_a_cancel_someone_asked_for_is_not_a_failure():
    """Asked to cancel, the launcher's kills are the cancel's doing: rank 0's own ``cancelled`` stands."""
    own = own_report("cancelled", "cancelled by signal", 130, FAILED_AT)
    killed = launcher_report(1, [{"rank": 1, "local_rank": 1, "exit_code": -9, "root": True}], FAILED_AT,
                             cancel_requested=True)
    for reports in itertools.permutations([own, killed]):
        outcome = settle_reports(list(reports), BEAT)
        assert (outcome.status, outcome.error, outcome.exit_code) == (RunStatus.cancelled, "cancelled by signal", 130)


def test_a_run_that_recorded_its_success_succeeded():
    ok = own_report("succeeded", None, 0, FAILED_AT)
    killed = launcher_report(-9, [{"rank": 1, "local_rank": 1, "exit_code": -9, "root": True}], FAILED_AT)
    for reports in itertools.permutations([ok, killed]):
        outcome = settle_reports(list(reports), BEAT)
        assert (outcome.status, outcome.error, outcome.exit_code, outcome.ended_at) == (
            RunStatus.succeeded, None, 0, FAILED_AT)
