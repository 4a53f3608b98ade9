"""Phases captured by real runs: Hugging Face and Lightning callbacks (durations from their own hook times,
read from the ledger callback by a callback that runs right after it)
and a ``trainledger.track`` run killed after a checkpoint and resumed (lost work, restore, recovery)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session, select
from trainledger.money.goodput.account import Category, goodput_account, phase_timeline
from trainledger.money.rates.months import month_of
from trainledger.store.db import make_engine
from trainledger.store.models import Run, RunPhase, RunStatus
from trainledger.store.settings import display_timezone

from tests.capture.conftest import HERE, REPO, all_runs
from tests.helpers import add_fleet

pytestmark = pytest.mark.slow
#: One backend per framework run, alternating (see tests/capture/test_frameworks.py: issue 38).


def _python(script: str, *args, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HERE / script), *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def _stamps(path) -> list[tuple[str, float]]:
    return [tuple(json.loads(line)) for line in path.read_text().splitlines()]


def _phases(url: str, run_id: str) -> dict[str, RunPhase]:
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return {r.phase: r for r in s.exec(select(RunPhase).where(RunPhase.run_id == run_id)).all()}
    finally:
        engine.dispose()


def _account(url: str, run: Run):
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            now = run.ended_at + timedelta(minutes=1)
            rep = goodput_account(s, month=month_of(run.started_at, display_timezone(s)), run_id=run.id, now=now)
            return rep, phase_timeline(s, run.id)
    finally:
        engine.dispose()


def _spans(stamps, ends: str, starts: tuple[str, ...]) -> list[float]:
    """Durations from the latest stamp in ``starts`` to each ``ends`` stamp."""
    out, last = [], None
    for hook, t in stamps:
        if hook == ends and last is not None:
            out.append(t - last)
        if hook in starts or hook == ends:
            last = t
    return out


@pytest.mark.parametrize("ledger_url", ["postgresql"], indirect=True)
def test_hf_run_with_a_save_and_an_eval_records_both_at_the_callbacks_times(ledger_url, capture_env, tmp_path):
    stamps = tmp_path / "stamps.jsonl"
    env = {**capture_env, "TRAINLEDGER_DB_URL": ledger_url, "TL_EVAL_STEPS": "3", "TL_STAMPS": str(stamps)}
    out = _python("hf_train.py", tmp_path / "out", 6, 3, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = all_runs(ledger_url)
    rows = _phases(ledger_url, run.id)
    st = _stamps(stamps)
    evals = _spans(st, "evaluate", ("step_end", "save"))
    saves = _spans(st, "save", ("step_end", "evaluate"))
    assert (rows["eval"].count, rows["checkpoint_save"].count, rows["step"].count) == (2, 2, 6)
    assert rows["eval"].seconds == pytest.approx(sum(evals), abs=1e-5) and rows["eval"].seconds > 0
    assert rows["checkpoint_save"].seconds == pytest.approx(sum(saves), abs=1e-5) and rows["checkpoint_save"].seconds > 0
    rep, timeline = _account(ledger_url, run)
    (acct,) = rep.runs
    assert acct.cost[Category.eval] > 0 and acct.cost[Category.checkpoint_save] > 0
    assert sum(acct.cost.values()) == acct.total_cost == acct.run_cost
    assert {r["phase"] for r in timeline} >= {"startup", "step", "eval", "checkpoint_save"}


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_lightning_run_with_a_save_and_validation_records_both_at_the_callbacks_times(ledger_url, capture_env, tmp_path):
    stamps = tmp_path / "stamps.jsonl"
    env = {**capture_env, "TRAINLEDGER_DB_URL": ledger_url, "TL_VAL_STEPS": "3", "TL_STAMPS": str(stamps)}
    out = _python("lightning_train.py", tmp_path / "out", 6, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = all_runs(ledger_url)
    rows = _phases(ledger_url, run.id)
    st = _stamps(stamps)
    evals = [b[1] - a[1] for a, b in zip(st, st[1:]) if a[0] == "validation_start" and b[0] == "validation_end"]
    saves = []
    for i, (hook, t) in enumerate(st):
        if hook == "save_checkpoint":
            nxt = next(u for h, u in st[i + 1:] if h in ("train_batch_start", "validation_start", "train_end",
                                                          "save_checkpoint"))
            saves.append(nxt - t)
    assert len(evals) == rows["eval"].count == 2 and len(saves) == rows["checkpoint_save"].count >= 2
    assert rows["eval"].seconds == pytest.approx(sum(evals), abs=1e-5) and rows["eval"].seconds > 0
    assert rows["checkpoint_save"].seconds == pytest.approx(sum(saves), abs=1e-5) and rows["checkpoint_save"].seconds > 0
    rep, _ = _account(ledger_url, run)
    (acct,) = rep.runs
    assert acct.cost[Category.eval] > 0 and acct.cost[Category.checkpoint_save] > 0
    assert sum(acct.cost.values()) == acct.total_cost


@pytest.mark.parametrize("ledger_url", ["postgresql"], indirect=True)
def test_lightning_resumed_from_a_checkpoint_records_its_restore(ledger_url, capture_env, tmp_path):
    env = {**capture_env, "TRAINLEDGER_DB_URL": ledger_url, "TL_VAL_STEPS": "3"}
    assert _python("lightning_train.py", tmp_path / "out", 3, env=env).returncode == 0
    (ckpt,) = sorted((tmp_path / "out").glob("*step=3*.ckpt"))
    stamps = tmp_path / "stamps.jsonl"
    out = _python("lightning_train.py", tmp_path / "out2", 6, env={**env, "TL_RESUME": str(ckpt),
                                                                   "TL_STAMPS": str(stamps)})
    assert out.returncode == 0, out.stderr[-3000:]
    first, resumed = sorted(all_runs(ledger_url), key=lambda r: r.started_at)
    st = dict(_stamps(stamps))  # one load and one train start
    rows = _phases(ledger_url, resumed.id)
    assert rows["checkpoint_restore"].count == 1 and rows["checkpoint_restore"].seconds > 0
    assert rows["checkpoint_restore"].seconds == pytest.approx(st["train_start"] - st["load_checkpoint"], abs=1e-5)
    assert "checkpoint_restore" not in _phases(ledger_url, first.id)


def test_hf_run_resumed_from_its_checkpoint_records_the_restore_as_recovery(sqlite_url, capture_env, tmp_path):
    """The Trainer restores before ``on_train_begin``: the callback links the run to the one that saved the
    checkpoint, and the gap between them (the restore inside it) is the chain's recovery."""
    engine = make_engine(sqlite_url)
    with Session(engine) as s:
        add_fleet(s, 8)  # an owned fleet: recovery is held capacity, priced at its idle rate
        s.commit()
    env = {**capture_env, "TRAINLEDGER_DB_URL": sqlite_url}
    failed = _python("hf_train.py", tmp_path / "out", 6, 3, 4, env=env)  # saves at step 3, fails at step 4
    assert failed.returncode != 0 and "injected failure at step 4" in failed.stderr
    assert (tmp_path / "out" / "checkpoint-3" / "trainledger-run.json").is_file()
    stamps = tmp_path / "stamps.jsonl"
    out = _python("hf_train.py", tmp_path / "out", 6, 3, env={**env, "TL_RESUME": str(stamps)})
    assert out.returncode == 0, out.stderr[-3000:]
    first, resumed = sorted(all_runs(sqlite_url), key=lambda r: r.started_at)
    assert (first.status, resumed.status, resumed.resume_of) == (RunStatus.failed, RunStatus.succeeded, first.id)
    st = {h: (t, step) for h, t, step in (json.loads(line) for line in stamps.read_text().splitlines())}
    call, (restored, step) = st["train_call"][0], st["restored"]
    assert step == 3  # the Trainer had restored checkpoint-3 before on_train_begin
    utc = timezone.utc
    # the restore lies between train() and on_train_begin, inside the gap between the two runs
    assert first.ended_at <= datetime.fromtimestamp(call, utc) < datetime.fromtimestamp(restored, utc) \
        <= resumed.started_at
    with Session(engine) as s:
        rep = goodput_account(s, month=month_of(resumed.started_at, display_timezone(s)),
                              now=resumed.ended_at + timedelta(minutes=1))
        phases = {r.phase for r in s.exec(select(RunPhase).where(RunPhase.run_id == resumed.id)).all()}
    engine.dispose()
    acct = {a.run_id: a for a in rep.runs}[resumed.id]
    gap = Decimal(str((resumed.started_at - first.ended_at) / timedelta(microseconds=1))) / 1_000_000
    assert abs(acct.seconds[Category.recovery] - gap * resumed.nodes) < Decimal("1e-9")  # hours × 3,600
    assert gap >= Decimal(str(restored - call)) > 0
    assert acct.cost[Category.recovery] == acct.recovery_cost > 0 and acct.chain == first.id
    assert "checkpoint_restore" not in phases  # before the run's start: recovery, never counted twice
    assert sum(acct.cost.values()) == acct.total_cost


def _wait_checkpoint(url: str, run_id: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Poll the ledger until the run's checkpoint is there and a heartbeat after it (work to lose), or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        engine = make_engine(url)
        try:
            with Session(engine) as s:
                run = s.get(Run, run_id)
                if run is not None and run.last_checkpoint_step == 3 and run.heartbeat_at > run.last_checkpoint_at:
                    return
        finally:
            engine.dispose()
        time.sleep(0.2)
    raise AssertionError("the run never recorded its checkpoint")


def test_a_run_killed_after_a_checkpoint_and_resumed_shows_lost_work_restore_and_recovery(ledger_url, capture_env,
                                                                                          tmp_path):
    from trainledger.runs.registry import reap_stale
    from trainledger.sources.record.journal import sync_all

    engine = make_engine(ledger_url)
    with Session(engine) as s:
        add_fleet(s, 8)  # an owned fleet: the recovery gap is held capacity, priced at its idle rate
        s.commit()
    env = {**capture_env, "TRAINLEDGER_DB_URL": ledger_url}
    (tmp_path / "ckpt").mkdir()
    first = subprocess.Popen([sys.executable, str(HERE / "phase_job.py"), "gp-1", str(tmp_path / "ckpt"), "6",
                              "--hang-after-checkpoint"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        _wait_checkpoint(ledger_url, "gp-1", first)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    sync_all(engine, tmp_path / "journal")  # what the killed writer journaled but had not applied
    with Session(engine) as s:
        assert reap_stale(s, now=s.get(Run, "gp-1").heartbeat_at + timedelta(hours=1)) == 1
        s.commit()
    out = _python("phase_job.py", "gp-2", tmp_path / "ckpt", 8, "--resume-of", "gp-1", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    with Session(engine) as s:
        runs = {r.id: r for r in s.exec(select(Run)).all()}
        assert runs["gp-1"].status == RunStatus.crashed and runs["gp-2"].status == RunStatus.succeeded
        rep = goodput_account(s, month=month_of(runs["gp-2"].started_at, display_timezone(s)),
                              now=runs["gp-2"].ended_at + timedelta(minutes=1))
    engine.dispose()
    acct = {a.run_id: a for a in rep.runs}
    killed, resumed = acct["gp-1"], acct["gp-2"]
    assert killed.cost[Category.lost_work] > 0 and killed.seconds[Category.lost_work] > 0
    assert killed.cost[Category.lost_work] == next(r for r in rep.runs if r.run_id == "gp-1").cost[Category.lost_work]
    assert resumed.seconds[Category.checkpoint_restore] > 0 and resumed.cost[Category.checkpoint_restore] > 0
    gap = (runs["gp-2"].started_at - runs["gp-1"].ended_at).total_seconds()
    assert gap > 0 and float(resumed.seconds[Category.recovery]) == pytest.approx(gap * runs["gp-2"].nodes, abs=1e-6)
    assert resumed.cost[Category.recovery] == resumed.recovery_cost > 0
    assert resumed.chain == "gp-1" and killed.chain == "gp-1"
    (month,) = rep.months
    assert month.goodput + month.badput + month.idle == month.spend
    assert abs(month.identity_residual) < 1e-9
