"""The Export page offers the chargeback statements: the table shows each project's total with its share of idle.

The ledger of tests/test_chargeback.py (November 2026: fleet ``own2`` of 2 rtx4090-own nodes, llm 80 and
vision 40 node-hours on it, vision 10 h rented), idle shared ``proportional``: llm takes 80/120 of the
1,320 idle node-hours' cost.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from urllib.parse import parse_qsl

import pytest
from sqlmodel import Session, select

from tests.app.helpers import make_app, plain, run_page
from tests.test_chargeback import BUSY, IDLE_COST, RENT, SPEND, _ledger

D = Decimal


def test_export_page_offers_the_statements(app_env, sqlite_url, monkeypatch):
    from trainledger.money.allocation.idle_share import set_fleet_policy
    from trainledger.store.db import make_engine

    engine = make_engine(sqlite_url)
    with Session(engine) as s:
        _ledger(s)
        set_fleet_policy(s, "own2", "proportional")
        s.commit()
    engine.dispose()
    monkeypatch.setenv("TRAINLEDGER_NOW", "2026-12-05T00:00:00Z")
    app_env(sqlite_url)
    at = run_page(make_app("2026-11"), "export")
    table = next(d.value for d in at.dataframe if "statement" in d.value.columns).set_index("statement")
    llm, vision = 80 * BUSY + IDLE_COST * 80 / 120, 40 * BUSY + 10 * RENT + IDLE_COST * 40 / 120
    cent = D("0.01")
    # each total rounded half-up on its own already adds up to the spend here, so no cent is moved between them
    assert llm.quantize(cent) + vision.quantize(cent) == SPEND.quantize(cent)
    # money as every figure shows it ("8,800.00"), no amount a dash and no count an empty cell (never "None")
    assert table.loc["llm", "total (CNY)"] == f"{llm.quantize(cent):,}"
    assert table.loc["vision", "total (CNY)"] == f"{vision.quantize(cent):,}"
    assert table.loc["llm", "share of idle (CNY)"] == f"{(IDLE_COST * 80 / 120).quantize(cent):,}"
    assert table.loc["spend", "total (CNY)"] == f"{SPEND.quantize(cent):,}"
    assert list(table.loc["spend"]) == ["", "", "—", "—", f"{SPEND.quantize(cent):,}", "—"]
    labels = [b.label for b in at.get("download_button")]
    assert labels[3:] == ["Statement XLSX", "Statement HTML (printable)", "Summary CSV"]


NOW = "2026-12-05T00:00:00Z"
#: each policy a lead can set, and each project's total under it (hand arithmetic: 1,320 idle node-hours' cost,
#: llm 80 and vision 40 busy node-hours on the fleet, vision 10 h rented)
POLICIES = {
    "none": (80 * BUSY, 40 * BUSY + 10 * RENT),
    "proportional": (80 * BUSY + IDLE_COST * 80 / 120, 40 * BUSY + 10 * RENT + IDLE_COST * 40 / 120),
    "even": (80 * BUSY + IDLE_COST / 2, 40 * BUSY + 10 * RENT + IDLE_COST / 2),
    "weights:llm=3,vision=1": (80 * BUSY + IDLE_COST * 3 / 4, 40 * BUSY + 10 * RENT + IDLE_COST / 4),
}


def _cli_table(url: str) -> dict[str, dict[str, str]]:
    """`trainledger report chargeback --month 2026-11`'s summary CSV, statement → row."""
    from trainledger.money.account.chargeback import chargeback
    from trainledger.reports.chargeback import files, presented
    from trainledger.store.db import make_engine
    from trainledger.store.types import report_clock

    engine = make_engine(url)
    with Session(engine) as s:
        raw = files(presented(chargeback(s, "2026-11", now=report_clock(NOW))))["2026-11-chargeback-summary.csv"]
    engine.dispose()
    return {r["statement"]: r for r in csv.DictReader(io.StringIO(raw.decode()))}


def _fleet_policy(url: str) -> str | None:
    from trainledger.store.db import make_engine
    from trainledger.store.models import Fleet

    engine = make_engine(url)
    with Session(engine) as s:
        policy = s.exec(select(Fleet.idle_share).where(Fleet.name == "own2")).one()
    engine.dispose()
    return policy


def _set_policy(at, policy: str):
    at.switch_page("pages/settings.py").run()
    at.selectbox(key="set_fleet_pick").select("own2").run()
    at.text_input(key="fleet_own2_share").input(policy)
    next(b for b in at.button if b.label == "Save fleet").click().run()
    return at


def _app_on(url: str, app_env, monkeypatch, policy: str | None = None):
    """The app (run once) on tests/test_chargeback.py's ledger at ``url``, fleet own2's idle policy ``policy``."""
    from trainledger.money.allocation.idle_share import set_fleet_policy
    from trainledger.store.db import make_engine

    engine = make_engine(url)
    with Session(engine) as s:
        _ledger(s)
        if policy:
            set_fleet_policy(s, "own2", policy)
        s.commit()
    engine.dispose()
    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(url)
    at = make_app("2026-11")
    at.run()
    return at


def test_a_lead_sets_each_idle_policy_in_settings_and_the_statements_follow(app_env, sqlite_url, monkeypatch):
    at = _app_on(sqlite_url, app_env, monkeypatch)
    cent = D("0.01")
    for policy, (llm, vision) in POLICIES.items():
        _set_policy(at, policy)
        assert [plain(x.value) for x in at.success] == ["Fleet own2 updated."], policy
        assert _fleet_policy(sqlite_url) == (None if policy == "none" else policy)
        at.switch_page("pages/export.py").run()
        assert not at.exception
        table = next(d.value for d in at.dataframe if "statement" in d.value.columns).set_index("statement")
        cli = _cli_table(sqlite_url)
        for project, want in (("llm", llm), ("vision", vision)):
            assert table.loc[project, "total (CNY)"] == f"{D(cli[project]['total']):,}", (policy, project)
            assert D(cli[project]["total"]) - want.quantize(cent) in (D(0), cent, -cent), (policy, project)
        assert any(policy in plain(c.value) for c in at.caption if "Idle charged back under" in c.value) \
            or policy == "none"
    # each statement links to its project's runs of the month
    links = {e.proto.label: dict(parse_qsl(e.proto.query_string)) for e in at.get("page_link")
             if e.proto.label.startswith("Runs of ")}
    assert links == {"Runs of llm": {"project": "llm", "month": "2026-11"},
                     "Runs of vision": {"project": "vision", "month": "2026-11"}}


@pytest.mark.parametrize("bad, error", [
    ("weights:nobody=1", "Idle charged back: unknown project 'nobody'; weights name projects of this ledger "
                            "(audio, llm, vision)"),
    ("fair", "Idle charged back: unknown policy 'fair'; use none | proportional | even | "
             "weights:<project=w,...> (e.g. weights:llm=3,vision=1)"),
])
def test_a_bad_policy_is_one_line_naming_the_field_and_writes_nothing(app_env, sqlite_url, monkeypatch, bad, error):
    at = _app_on(sqlite_url, app_env, monkeypatch, "even")
    _set_policy(at, bad)
    assert [plain(e.value) for e in at.error] == [error] and not at.success
    assert _fleet_policy(sqlite_url) == "even"  # nothing written, the node count and dates neither
