"""Reserved capacity is priced one way everywhere: whole committed months per node (``costs.reserved_term_cost``).

One scenario, the demo ledger's 8-node rtx4090 fleet in 2026-11 (an ended month): the monthly report's "if rented
reserved", the Planner's best plan under the reserved offer (a job shorter than a month on 8 nodes), Rent vs own's
reserved line for 8 nodes and the Export summary all show the same figure, to the cent, and each page states the rule.
"""

from __future__ import annotations

import math

from sqlmodel import Session, select
from trainledger.app.queries import rentown
from trainledger.app.views import ui
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates import costs
from trainledger.reports.present import fmt_cell
from trainledger.runs import plan
from trainledger.store.db import make_engine
from trainledger.store.models import Fleet, Offer

from tests.app.helpers import MONTH, make_app, plain, run_page

RESERVED = "rtx4090-reserved"
MODEL, TOKENS_B, NODES = "small", 5.0, 8  # a job of well under a month on the fleet's 8 nodes


def _ledger(url: str) -> dict:
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            offer = s.exec(select(Offer).where(Offer.name == RESERVED)).one()
            fleet = s.exec(select(Fleet).where(Fleet.name == "demo-cluster")).one()
            req = plan.RecommendRequest(model=MODEL, tokens=TOKENS_B * 1e9, node_types=["rtx4090-8x"], nodes=[NODES])
            long = plan.RecommendRequest(model="1b", tokens=2e12, node_types=["rtx4090-8x"], nodes=[NODES])
            return {"offer": offer, "fleet": fleet.node_count, "report": monthly_report(s, MONTH),
                    "plan": plan.recommend(s, req), "long": plan.recommend(s, long)}
    finally:
        engine.dispose()


def _reserved_row(result: dict) -> dict:
    return next(r for r in result["best_per_offer"] if r["offer"] == RESERVED)


def test_the_functions_agree(demo_url):
    d = _ledger(demo_url)
    offer, nodes = d["offer"], d["fleet"]
    assert nodes == NODES
    month = offer.price_per_node_month * nodes  # 8 nodes × the monthly price, used or not
    assert costs.reserved_term_cost(offer, nodes, costs.HOURS_PER_MONTH) == month
    assert d["report"].summary["reserved_cost"] == month  # the monthly report bills the whole month
    short = _reserved_row(d["plan"])
    assert short["hours"] < 730 and short["reserved_months"] == 1
    assert short["cost"] == month  # the Planner: a job of days still pays the month
    long = _reserved_row(d["long"])
    months = math.ceil(long["hours"] / 730)  # every month begun
    assert long["reserved_months"] == months > 1 and long["cost"] == month * months
    per_node = {r["cost"] for r in rentown.cost_curve([offer])}  # Rent vs own: flat at the monthly price
    assert per_node == {float(costs.cents(month / nodes))}


def test_the_pages_agree_to_the_cent(demo_url, app_env):
    d = _ledger(demo_url)
    want = fmt_cell("reserved_cost", d["report"].summary["reserved_cost"])
    rule = ui.RESERVED_RULE
    app_env(demo_url)

    at = run_page(make_app(), "planner")
    at.selectbox(key="plan_model").set_value(MODEL)
    at.number_input(key="plan_tokens_b").set_value(TOKENS_B)
    at.multiselect(key="plan_node_types").set_value(["rtx4090-8x"])
    at.slider(key="plan_nodes").set_value((NODES, NODES)).run()
    assert not at.exception
    per_offer = next(df.value for df in at.dataframe if "months reserved" in df.value.columns).set_index("offer")
    assert per_offer.loc[RESERVED, "cost (CNY)"] == want  # money headed with its currency
    assert per_offer.loc[RESERVED, "months reserved"] == "1"  # a column with gaps is shown as text (ui.frame)
    assert any(rule in plain(c.value) for c in at.caption)

    at = run_page(make_app(), "rent_vs_own")
    assert at.number_input(key="rvo_nodes").value == NODES
    captions = [plain(c.value) for c in at.caption]
    assert any(f"reserving {NODES} nodes of {RESERVED} costs {want} CNY a month" in c for c in captions)
    assert any(f"{RESERVED} {fmt_cell('cost', d['offer'].price_per_node_month)} CNY per node-month" in c for c in captions)
    assert any(rule in c for c in captions)

    at = run_page(make_app(), "export")
    summary = at.table[0].value
    assert summary.loc["If rented reserved (CNY)", "value"] == want
    assert any(rule in plain(c.value) for c in at.caption)
