"""The Export page offers the chargeback statements: the table shows each project's total with its share of idle.

The ledger of tests/test_chargeback.py (November 2026: fleet ``own2`` of 2 rtx4090-own nodes, llm 80 and
vision 40 node-hours on it, vision 10 h rented), idle shared ``proportional``: llm takes 80/120 of the
1,320 idle node-hours' cost.
"""

from __future__ import annotations

from decimal import Decimal

from sqlmodel import Session

from tests.app.helpers import make_app, run_page
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
    assert D(table.loc["llm", "total (CNY)"]) == llm.quantize(cent)
    assert D(table.loc["vision", "total (CNY)"]) == vision.quantize(cent)
    assert D(table.loc["llm", "share of idle (CNY)"]) == (IDLE_COST * 80 / 120).quantize(cent)
    assert D(table.loc["spend", "total (CNY)"]) == SPEND.quantize(cent)
    labels = [b.label for b in at.get("download_button")]
    assert labels[3:] == ["Statement XLSX", "Statement HTML (printable)", "Summary CSV"]
