"""The goodput account's identities on a generated ledger of a few thousand runs, on SQLite and PostgreSQL
(issue #25; the 100k/1M-run ledgers are the bench's, SQLite only): for every run and month the categories add up
to its cost exactly, and for every month goodput + badput + idle = spend exactly, idle = the monthly report's idle
less recovery (to the cent).

The ledger (seeded): 2,000 runs from September to 20 November 2026 on an owned fleet, a reserved fleet and elastic
rent; ~15% interrupted (failed, crashed, cancelled; most after a checkpoint), a third of those resumed after a gap
of up to 40 h (some gaps across a month edge), runs across month edges, a live run, phase rows on half the runs
(month-edge rows on some that cross a month, phases too long for the run on a few: clipped and reported).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.money.goodput.account import BADPUT, Category, on_grid
from trainledger.money.rates.months import month_bounds
from trainledger.store.lookup import get_or_create
from trainledger.store.models import Project, Run, RunPhase, RunStatus, User

from tests.helpers import add_fleet, month_account_identities, node_type, offer

pytestmark = pytest.mark.slow

D = Decimal
UTC = timezone.utc
N_RUNS = 2000
START = datetime(2026, 9, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 20, tzinfo=UTC)
MONTHS = ("2026-09", "2026-10", "2026-11")
INTERRUPTED = (RunStatus.failed, RunStatus.crashed, RunStatus.cancelled)


def _phases(rng: random.Random, run: Run, wall: float) -> list[RunPhase]:
    """Phase rows of one node: shares of the wall time (a few too long), the checkpoint's part, edge rows."""
    shares = {"startup": 0.03, "data": 0.05, "checkpoint_save": 0.02, "eval": 0.04, "straggler_wait": 0.03,
              "step": 0.8}
    scale = 1.3 if rng.random() < 0.02 else rng.uniform(0.7, 0.99)
    ck = rng.uniform(0.3, 0.9) if run.last_checkpoint_at is not None else None
    rows = [RunPhase(run_id=run.id, node="n0", phase=p, seconds=round(wall * s * scale, 6), count=10,
                     ckpt_seconds=None if ck is None else round(wall * s * scale * ck, 6), ckpt_count=5)
            for p, s in shares.items()]
    end = run.ended_at or NOW
    for m in MONTHS[1:] + ("2026-12",):
        edge = month_bounds(m, UTC)[0]
        if run.started_at < edge < end and rng.random() < 0.7:
            f = (edge - run.started_at) / (end - run.started_at)
            rows += [RunPhase(run_id=run.id, node="n0", phase=f"{r.phase}@{edge.isoformat()}",
                              seconds=round(r.seconds * f, 6), count=5,
                              ckpt_seconds=None if r.ckpt_seconds is None else round(r.ckpt_seconds * min(1.0, f), 6),
                              ckpt_count=None if r.ckpt_seconds is None else 5) for r in rows[:6]]
    return rows


def _generate(s: Session, seed: int = 25) -> None:
    rng = random.Random(seed)
    add_fleet(s, 48, name="own")
    add_fleet(s, 16, offer_name="rtx4090-reserved", name="reserved")
    nt = node_type(s).id
    offers = [offer(s, n).id for n in ("rtx4090-own", "rtx4090-reserved", "rtx4090-rent")]
    projects = [get_or_create(s, Project, f"p{i}") for i in range(8)]
    users = [get_or_create(s, User, f"u{i}") for i in range(20)]
    span = (NOW - START).total_seconds()
    runs, phases, interrupted = [], [], []
    for i in range(N_RUNS):
        start = START + timedelta(seconds=int(rng.random() * span))
        resume_of = None
        if interrupted and rng.random() < 0.3:  # resume a recent interruption after a gap
            prev = interrupted.pop(rng.randrange(len(interrupted)))
            start, resume_of = prev.ended_at + timedelta(minutes=rng.randint(0, 40 * 60)), prev.id
        hours = min(rng.lognormvariate(1.2, 1.3), 400.0)
        end = start + timedelta(seconds=int(hours * 3600) + 60)
        status = rng.choices([RunStatus.succeeded, *INTERRUPTED], [85, 7, 5, 3])[0]
        if end >= NOW:
            status, end = RunStatus.running, None
        ckpt = None
        if status in INTERRUPTED and rng.random() < 0.8:
            ckpt = start + (end - start) * rng.uniform(0.1, 0.95)
        nodes = rng.choice([1, 1, 2, 2, 4, 8])
        run = Run(id=f"g{i:05d}", name=f"g{i}", node_type_id=nt, offer_id=rng.choices(offers, [5, 2, 3])[0],
                  nodes=nodes, gpus_per_node=8, status=status, started_at=start, ended_at=end,
                  heartbeat_at=end or NOW - timedelta(seconds=30), last_checkpoint_at=ckpt, resume_of=resume_of,
                  project_id=rng.choice(projects), user_id=rng.choice(users))
        runs.append(run)
        if status in INTERRUPTED:
            interrupted.append(run)
        if rng.random() < 0.5:
            phases += _phases(rng, run, ((end or NOW) - start).total_seconds())
    s.add_all(runs)
    s.flush()
    s.add_all(phases)
    s.commit()


def test_the_identities_hold_for_every_run_and_month_of_a_generated_ledger(session):
    _generate(session)
    recovered = clipped = gaps_only = 0
    for month in MONTHS:
        rep, report, m, lines = month_account_identities(session, month, NOW)
        recovery = sum((r.recovery_cost for r in rep.runs), D(0))
        assert m.runs == len(lines) > 300
        for r in rep.runs:
            line = lines.get(r.run_id)
            own = on_grid(line.cost) if line is not None else D(0)  # no line: recovery of a run that starts later
            assert sum(r.cost.values()) == r.total_cost == own + r.recovery_cost
            assert r.cost[Category.lost_work] == (on_grid(line.lost_work_cost) if line is not None else 0)
            assert all(v >= 0 for v in r.cost.values()) and all(v >= 0 for v in r.seconds.values())
            clipped += any("exceeds" in q for q in r.data_quality)
            gaps_only += line is None
        assert {r.run_id for r in rep.runs} >= set(lines)
        recovered += recovery > 0
        assert m.by_category[Category.productive] > 0 and all(m.by_category[c] >= 0 for c in BADPUT)
    assert recovered == len(MONTHS) and clipped > 0 and gaps_only > 0  # the cases the ledger was made to have
