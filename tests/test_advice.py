"""Checkpoint advice (trainledger.money.outlook.advice): on a generated history with a known MTBI and save time, the
suggested interval is Young/Daly's sqrt(2 · MTBI · δ), and the replayed costs follow from the runs as written."""

from __future__ import annotations

import json
import math
import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from trainledger.money.outlook.advice import advise, replay, young_daly_interval_hours
from trainledger.money.rates.costs import cents
from trainledger.store.models import RunPhase, RunStatus

from tests.helpers import add_run

D = Decimal
UTC = timezone.utc
NOW = datetime(2026, 12, 1, tzinfo=UTC)
RATE = D(3600) / 730  # rtx4090-rent per node-hour (whole hours: billed = used)
SAVE_S = 90
MONTHS = ("2026-09", "2026-10", "2026-11")


def _phase(session, run_id: str, saves: int, nodes: int = 2, seconds: float = SAVE_S) -> None:
    for n in range(nodes):
        session.add(RunPhase(run_id=run_id, node=f"node{n}", phase="checkpoint_save", seconds=seconds * saves,
                             count=saves, ckpt_seconds=seconds * saves, ckpt_count=saves))


def _history(session) -> None:
    """Per month: 7 runs of 24 h that succeed with 12 saves, 3 of 23 h that crash 1 h after their 11th save; on
    2 rented nodes. Plus one 4-node run (another family) that never fails."""
    for i, month in enumerate(MONTHS):
        start = datetime(2026, 9 + i, 2, tzinfo=UTC)
        for j in range(10):
            crash = j >= 7
            r = add_run(session, f"{month}-{j}", start + timedelta(days=2 * j), 23 if crash else 24, nodes=2,
                        offer_name="rtx4090-rent", status=RunStatus.crashed if crash else RunStatus.succeeded)
            if crash:
                r.last_checkpoint_at = r.started_at + timedelta(hours=22)
            _phase(session, r.id, 11 if crash else 12)
    add_run(session, "big", datetime(2026, 10, 5, tzinfo=UTC), 10, nodes=4, offer_name="rtx4090-rent")
    session.flush()


def test_advice_returns_the_analytic_interval_and_its_costs(session):
    _history(session)
    out = advise(session, "2026-11", now=NOW)
    assert out["months"] == list(MONTHS) and out["currency"] == "CNY"
    fam, other = out["families"]
    assert (fam["node_type"], fam["nodes"], other["nodes"]) == ("rtx4090-8x", 2, 4)
    exposure = 21 * 24 + 9 * 23
    assert (fam["runs"], fam["interruptions"], fam["exposure_hours"]) == (30, 9, exposure)
    mtbi = D(exposure) / 9
    assert fam["mtbi_hours"] == mtbi and fam["save_seconds"] == SAVE_S and fam["save_seconds_basis"] == "measured"
    assert fam["current_interval_hours"] == D(exposure) / (21 * 12 + 9 * 11)
    tau = fam["suggested_interval_hours"]
    assert tau == (2 * mtbi * D(SAVE_S) / 3600).sqrt()  # exact: the same Decimal arithmetic
    assert abs(float(tau) - math.sqrt(2 * (711 / 9) * (90 / 3600))) < 1e-12  # and the formula in floats
    for row in fam["months"]:
        assert (row["runs"], row["interruptions"]) == (10, 3)
        assert abs(row["cost_per_node_hour"] - RATE) < D("1e-20")  # Σ cost ÷ Σ node-hours, at 28 digits
        # the monthly report's lost work: 3 crashes × 2 nodes × the hour after their last checkpoint
        assert cents(row["measured_lost_work_cost"]) == cents(3 * 2 * RATE)
        lost = 23 - tau * int(23 // tau)  # each crash had run 23 h: lost since its last save at the interval
        assert cents(row["suggested_lost_work_cost"]) == cents(3 * lost * 2 * RATE)
        saves = 7 * int(24 // tau) + 3 * int(23 // tau)
        assert cents(row["suggested_checkpoint_cost"]) == cents(saves * D(SAVE_S) / 3600 * 2 * RATE)
    assert other["interruptions"] == 0 and other["suggested_interval_hours"] is None and "no interruption" in other["note"]


def test_an_assumed_save_time_replaces_the_measured_one(session):
    _history(session)
    out = advise(session, "2026-11", now=NOW, save_seconds=D(360))
    fam = out["families"][0]
    assert fam["save_seconds"] == 360 and fam["save_seconds_basis"] == "assumed"
    assert fam["suggested_interval_hours"] == young_daly_interval_hours(D(711) / 9, D("0.1"))


def test_exponential_interruptions_give_the_true_interval_within_the_estimates_error(session):
    """Interruptions drawn from an exponential with a known MTBI (runs capped at 48 h: the survivors are censored
    exposure): the suggested interval is within 4 standard errors of sqrt(2 · MTBI · δ). The MLE of the MTBI has
    a relative standard error of 1/sqrt(k) for k interruptions, the interval (∝ sqrt(MTBI)) half that."""
    true_mtbi, cap, rng = 60.0, 48.0, random.Random(25)
    t = datetime(2026, 9, 1, tzinfo=UTC)
    for i in range(300):
        life = rng.expovariate(1 / true_mtbi)
        hours = round(min(life, cap), 6)
        r = add_run(session, f"x{i}", t, hours, nodes=2, offer_name="rtx4090-rent",
                    status=RunStatus.failed if life < cap else RunStatus.succeeded)
        _phase(session, r.id, max(1, int(hours)))
        t += timedelta(hours=7)  # overlapping runs: exposure counts each
    session.flush()
    fam = advise(session, "2026-11", now=NOW)["families"][0]
    k = fam["interruptions"]
    assert k > 150
    truth = math.sqrt(2 * true_mtbi * SAVE_S / 3600)
    assert abs(float(fam["suggested_interval_hours"]) / truth - 1) <= 4 * 0.5 / math.sqrt(k)


def test_replay():
    assert replay([D(10), D(5)], [True, False], D(3)) == (D(1), 4)
    assert replay([D(10)], [True], None) == (D(10), 0)


def test_cli_goodput_advise(cli, session):
    _history(session)
    session.commit()
    r = cli("goodput", "advise", "--month", "2026-11", "--json", "--now", NOW.isoformat())
    assert r.exit_code == 0, r.output
    fam = json.loads(r.stdout)["families"][0]
    assert fam["interruptions"] == 9 and fam["suggested_interval_hours"] == round(math.sqrt(2 * 711 / 9 * 0.025), 3)
    text = cli("goodput", "advise", "--month", "2026-11", "--now", NOW.isoformat())
    assert text.exit_code == 0 and "rtx4090-8x" in text.stdout and "sqrt(2" in text.stdout


@pytest.mark.parametrize("args, flag", [(("--save-seconds", "-5"), "--save-seconds"), (("--months", "0"), "--months"),
                                        (("--save-seconds", "x"), "--save-seconds")])
def test_cli_goodput_advise_bad_input(cli, args, flag):
    r = cli("goodput", "advise", "--month", "2026-11", *args)
    assert r.exit_code == 2 and r.output.count("\n") == 1 and flag in r.output, r.output
