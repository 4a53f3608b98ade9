"""Runs compared side by side (issue 39 item 2): ``trainledger.runs.compare.compare_runs``, ``trainledger runs compare``
and the Runs page's Compare section read one function; its figures are ``runs show``'s, its series the samples."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates.costs import cents
from trainledger.runs.compare import check_ids, compare_runs
from trainledger.runs.registry import show_run
from trainledger.store.models import MetricSample

from tests.helpers import add_run

UTC = timezone.utc
START = datetime(2026, 10, 31, 20, 0, tzinfo=UTC)  # 4 hours in October, 6 in November
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _ledger(session: Session) -> None:
    a = add_run(session, "cmp-a", START, 10, nodes=1, offer_name="rtx4090-rent", tokens=9000)
    a.strategy, a.dp, a.zero_stage = "zero2", 2, 2
    b = add_run(session, "cmp-b", START + timedelta(days=2), 3, nodes=2, offer_name="rtx4090-rent", tokens=4000)
    b.strategy, b.dp, b.zero_stage = "zero2", 4, 2
    at = lambda h: START + timedelta(hours=h)  # noqa: E731
    session.add_all([
        MetricSample(run_id="cmp-a", metric="loss", ts=at(1), value=3.0),
        MetricSample(run_id="cmp-a", metric="loss", ts=at(2), value=2.5),
        MetricSample(run_id="cmp-a", metric="tokens", ts=at(1), value=1000),
        MetricSample(run_id="cmp-a", metric="tokens", ts=at(3), value=9000),
        MetricSample(run_id="cmp-a", metric="step_seconds", ts=at(2), value=1.25),
        # GPU-Util on two nodes at one instant (and one GPU's own series): the mean at that instant
        MetricSample(run_id="cmp-a", node="n1", metric="gpu_util", ts=at(1), value=0.5),
        MetricSample(run_id="cmp-a", node="n2", metric="gpu_util", ts=at(1), value=0.9),
        MetricSample(run_id="cmp-a", node="n1", gpu=0, metric="gpu_util", ts=at(2), value=0.4),
        MetricSample(run_id="cmp-a", metric="gpu_util", ts=at(4), value=None),  # missing: never drawn as zero
    ])
    session.commit()


def test_the_comparison_is_runs_show_and_the_samples(session):
    _ledger(session)
    d = compare_runs(session, ["cmp-a", "cmp-b"], now=NOW)
    a, b = d["runs"]
    assert (a["id"], b["id"]) == ("cmp-a", "cmp-b") and d["differs"] == ["dp", "nodes"]  # same strategy, ZeRO stage
    for r in (a, b):  # the figures are runs show's, to the cent
        shown = show_run(session, r["id"], now=NOW)
        assert r["figures"]["cost_actual"] == shown["cost_actual"] > 0
        assert r["figures"]["cost_per_1m_tokens"] == shown["cost_per_1m_tokens"]
        assert r["figures"]["node_hours"] == shown["node_hours"]
    # the run's cost is its monthly report lines summed: October's 4 hours and November's 6
    octo, nov = (next(x.cost for x in monthly_report(session, m, lines=True, now=NOW).runs if x.run_id == "cmp-a")
                 for m in ("2026-10", "2026-11"))
    assert a["figures"]["cost_actual"] == octo + nov
    assert a["series"]["cumulative"] == [{"hours": 0.0, "cost": Decimal(0)}, {"hours": 4.0, "cost": octo},
                                         {"hours": 10.0, "cost": octo + nov}]
    assert a["series"]["loss"] == [{"hours": 1.0, "loss": 3.0}, {"hours": 2.0, "loss": 2.5}]
    assert a["series"]["step_seconds"] == [{"hours": 2.0, "step_seconds": 1.25}]
    assert a["series"]["tokens_per_s"] == [{"hours": 3.0, "tokens_per_s": 8000 / 7200}]
    assert a["series"]["utilization"] == [{"hours": 1.0, "utilization": pytest.approx(0.7)},
                                          {"hours": 2.0, "utilization": 0.4}]
    assert a["utilization_metric"] == "gpu_util" and b["utilization_metric"] == "gpu_util"
    assert b["series"]["loss"] == [] and len(b["series"]["cumulative"]) == 2  # one month: start and end
    assert b["series"]["cumulative"][-1] == {"hours": 3.0, "cost": b["figures"]["cost_actual"]}


def test_bad_ids_are_one_line(session):
    _ledger(session)
    with pytest.raises(LedgerInputError, match="^RUN_IDS: give at least 2 run ids to compare, got 1$"):
        compare_runs(session, ["cmp-a", "cmp-a"], now=NOW)
    with pytest.raises(LedgerInputError, match="at most 8 runs in one comparison, got 9"):
        check_ids(",".join(f"r{i}" for i in range(9)))
    with pytest.raises(LedgerInputError, match="no run 'nope-12' in this ledger"):
        compare_runs(session, ["cmp-a", "nope-12"], now=NOW)
    assert check_ids(" a, b ,a,,c") == ["a", "b", "c"]


def test_the_cli_prints_the_same(cli, session):
    _ledger(session)
    out = cli("runs", "compare", "cmp-a", "cmp-b", "--json", "--now", NOW.isoformat())
    assert out.exit_code == 0, out.output
    d = json.loads(out.stdout)
    want = compare_runs(session, ["cmp-a", "cmp-b"], now=NOW)
    session.commit()  # runs show reaps stale runs first: end the test's write transaction before the CLI's
    assert [r["figures"]["cost_actual"] for r in d["runs"]] == [str(cents(r["figures"]["cost_actual"]))
                                                                 for r in want["runs"]]
    assert d["runs"][0]["series"]["cumulative"][1] == {"hours": 4.0, "cost": str(cents(want["runs"][0]["series"]["cumulative"][1]["cost"]))}
    assert d["differs"] == want["differs"]
    text = cli("runs", "compare", "cmp-a", "cmp-b", "--now", NOW.isoformat())
    assert text.exit_code == 0, (text.output, text.exception)
    lines = text.stdout.splitlines()
    assert any(line.startswith("* dp ") for line in lines) and any(line.startswith("  strategy ") for line in lines)
    cost_line = next(line for line in lines if line.startswith("cost_actual"))
    assert cost_line.split()[1:] == [f"{cents(r['figures']['cost_actual']):,}" for r in want["runs"]]
    bad = cli("runs", "compare", "cmp-a", "--now", NOW.isoformat())
    assert bad.exit_code == 2 and bad.stderr == "error: RUN_IDS: give at least 2 run ids to compare, got 1\n"
