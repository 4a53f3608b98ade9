"""Rent vs own: one node-month at a utilization, break-even, 36-month cash, payback, and fleet sizing from real usage.

With the ledger's prices the figures are ``trainledger.money.account.compare.compare_node_type``
(``trainledger cost compare --node-type``). Edited assumptions are costed by
``trainledger.money.account.compare.compare_offers`` (which ``compare_node_type`` calls) on
detached copies, never saved. Fleet sizing uses ``monthly_report`` for the real usage.
"""

from __future__ import annotations

from decimal import Decimal

import altair as alt
import pandas as pd
import streamlit as st
from trainledger.app.queries import data, invoices, rentown
from trainledger.app.views import access, plain_words, ui
from trainledger.money.account.compare import compare_offers
from trainledger.money.rates import costs
from trainledger.reports.present import fmt_cell

access.team_only(access.page_gate(), "Rent vs own")  # team totals: not for a project-scoped user (docs/SCOPES.md)
url = data.ledger_url()
month = ui.month_picker(url)
currency = ui.currency_picker(url)
st.title("Rent vs own")

offers = data.offers(url, currency)
by_nt: dict[str, list] = {}
for o, nt_name in offers:
    by_nt.setdefault(nt_name, []).append(o)
comparable = sorted(nt for nt, os_ in by_nt.items()
                    if any(o.kind.value == "own" for o in os_) and any(o.kind.value == "rent_elastic" for o in os_))
if not comparable:
    ui.empty("No node type has both an `own` and a `rent_elastic` offer. Add one under Settings or with "
             "`trainledger pricing import FILE.toml`.")
    st.stop()

rep = data.report(url, month, currency=currency)
# the utilization to start from: never a month to date (3 days of a busy cluster are not its month);
# the last full month instead, and the page says which
seed_month = data.last_full_month(url, month)
seed = data.report(url, seed_month, currency=currency) if seed_month else None
used = [n.node_type for n in rep.node_types if n.node_type in comparable and n.node_hours]
c = st.columns(4)
node_type = c[0].selectbox("Node type", comparable, index=comparable.index(used[0]) if used else 0, key="rvo_nt")
own_offers = [o for o in by_nt[node_type] if o.kind.value == "own"]
rent_offers = [o for o in by_nt[node_type] if o.kind.value == "rent_elastic"]
own_o = next(o for o in own_offers if o.name == c[1].selectbox("Own offer", [o.name for o in own_offers], key="rvo_own"))
rent_o = next(o for o in rent_offers if o.name == c[2].selectbox("Rent offer (elastic)", [o.name for o in rent_offers], key="rvo_rent"))
month_util = seed.summary["time_utilization"] if seed is not None else None
if month_util is not None and 0 < month_util <= 1:
    default_u = float(round(month_util, 2))
    seeded = f"Starts at {seed_month}'s time utilization ({ui.pct(month_util)})"
else:
    default_u, seeded = 1.0, "Starts at 100% (no full month's time utilization to start from)"
if rep.is_partial:
    seeded += f"; {ui.period_text(month, rep.summary)} has not ended, so the last full month is used"
u_float = c[3].slider(ui.TIME_UTIL, 0.0, 1.0, default_u, 0.01, key="rvo_util",
                      help=f"Share of the month the node runs jobs. {seeded}.")
st.caption(seeded + ".")
basis = invoices.cost_basis_note(url, month, currency)
if basis:
    st.caption(basis)
u = Decimal(str(u_float))

with st.expander("Assumptions (try other prices; nothing is saved)"):
    a = st.columns(4)
    own_fields = [("capex_per_node", "Capex per node", 1000.0), ("depreciation_months", "Depreciation months", 1),
                  ("residual_value", "Residual value", 1000.0), ("power_kw_load", "Power at load, kW", 0.1),
                  ("power_kw_idle", "Power idle, kW", 0.1), ("electricity_price_per_kwh", "Electricity per kWh", 0.05),
                  ("pue", "PUE", 0.05), ("operations_per_node_month", "Operations per node-month", 10.0)]
    overrides_own = {}
    for i, (field, label, step) in enumerate(own_fields):
        orig = getattr(own_o, field)
        if orig is None:
            continue
        if field == "depreciation_months":
            v = a[i % 4].number_input(label, min_value=1, value=int(orig), step=1, key=f"rvo_{own_o.name}_{field}")
            if v != orig:
                overrides_own[field] = int(v)
        else:
            v = a[i % 4].number_input(label, min_value=0.0, value=float(orig), step=step, key=f"rvo_{own_o.name}_{field}")
            if Decimal(str(v)) != Decimal(orig):
                overrides_own[field] = Decimal(str(v))
    rent_field = "price_per_node_month" if rent_o.price_per_node_month is not None else "price_per_node_hour"
    orig = getattr(rent_o, rent_field)
    v = st.number_input(f"Elastic rent, {'per node-month' if rent_field == 'price_per_node_month' else 'per node-hour'}",
                        min_value=0.0, value=float(orig), step=10.0, key=f"rvo_{rent_o.name}_{rent_field}")
    overrides_rent = {rent_field: Decimal(str(v))} if Decimal(str(v)) != Decimal(orig) else {}

edited = bool(overrides_own or overrides_rent)
if edited:
    own_a = rentown.assumed_offer(own_o, **overrides_own)
    rent_a = rentown.assumed_offer(rent_o, **overrides_rent)
    r = compare_offers(own_a, rent_a, u, node_type)
    st.caption(":orange[Edited assumptions]: these figures differ from the ledger's prices (nothing was saved).")
else:
    own_a, rent_a = own_o, rent_o
    r = data.compare(url, node_type, u, own_o.name, rent_o.name, currency)
    st.caption(f"The ledger's prices: the same as trainledger cost compare --node-type {ui.md(node_type)} "
               f"--utilization {u_float:g} --own {ui.md(own_o.name)} --rent {ui.md(rent_o.name)} --currency {ui.md(currency)}.")
cur = ui.md(r["currency"])  # a currency code; escaped like every ledger value shown in Markdown

c = st.columns(3)
c[0].metric(f"Own per node-month ({cur})", fmt_cell("own_per_node_month", r["own_per_node_month"]), border=True,
            help="Depreciation + operations + power (load kW when running, idle kW when idle), 730 h.")
c[1].metric(f"Rent per node-month ({cur})", fmt_cell("rent_per_node_month", r["rent_per_node_month"]), border=True,
            help="Utilization × a full 730 h node-month of elastic rent (idle is not billed).")
c[2].metric(f"Savings ({r['cheaper']} cheaper)" if r["cheaper"] != "equal" else "Savings",
            fmt_cell("savings_pct", r["savings_pct"]), border=True,
            help="|own − rent| ÷ the dearer option.")
c = st.columns(3)
c[0].metric("Break-even utilization", plain_words.break_even(r["break_even_utilization"]), border=True,
            help="Own cost per node-month at full load ÷ a full node-month of rent "
                 f"(here {ui.pct(r['break_even_utilization'])}). At or above 100%, renting always wins.")
c[1].metric("Break-even with idle power", plain_words.break_even(r["break_even_utilization_power_adjusted"]), border=True,
            help="The exact crossover when an owned node draws idle power while idle.")
c[2].metric("Payback", plain_words.payback(r), border=True, help=plain_words.payback_help(r))

full_own = costs.own_cost_per_node_month(own_a)
full_rent = costs.elastic_full_month(rent_a)
payback = plain_words.payback_sentence(r)
if r["renting_always_cheaper"]:
    st.warning(f"**Renting ({ui.md(rent_a.name)}) is cheaper at every utilization.** Owning costs "
               f"{fmt_cell('cost', full_own)} {cur} per node-month even at full use, against "
               f"{fmt_cell('cost', full_rent)} {cur} to rent a full node-month "
               f"({fmt_cell('savings_pct', costs.savings(full_own, full_rent)[2])} cheaper to rent).{payback}")
else:
    st.success(f"**Owning ({ui.md(own_a.name)}) wins above a time utilization of {ui.pct(r['break_even_utilization'])}**"
               + f" (with idle power when idle: {plain_words.break_even(r['break_even_utilization_power_adjusted'])})."
               + payback)

# --- break-even chart ------------------------------------------------------------------
st.subheader("Monthly cost of one node vs utilization", help=ui.RESERVED_RULE)
others = [o for o in by_nt[node_type] if o.name not in (own_o.name, rent_o.name)]
reserved = [o for o in others if o.kind.value == "rent_reserved"]
if reserved:
    st.caption("Reserved: " + "; ".join(f"{ui.md(o.name)} {fmt_cell('cost', costs.reserved_term_cost(o, 1, costs.HOURS_PER_MONTH))} "
                                        f"{cur} per node-month, at any utilization" for o in reserved)
               + ". " + ui.md(ui.RESERVED_RULE))
curve = pd.DataFrame(rentown.cost_curve([own_a, rent_a, *others]))
chart = ui.lines(curve, "utilization", "cost", "offer", x_title=ui.TIME_UTIL, y_title=f"{cur} per node-month")
rules = [{"utilization": u_float, "what": "selected"}]
if r["break_even_utilization"] < 1:
    rules.append({"utilization": float(r["break_even_utilization"]), "what": "break-even"})
rule = alt.Chart(pd.DataFrame(rules)).mark_rule(strokeDash=[4, 4]).encode(
    x="utilization:Q", tooltip=["what", alt.Tooltip("utilization:Q", format=".0%")])
ui.show_chart(chart.encode(x=alt.X("utilization:Q", axis=alt.Axis(format="%"), title=ui.TIME_UTIL)) + rule)

# --- 36-month cumulative cost -----------------------------------------------------------
st.subheader("Cumulative cash over 36 months")
fleet_nodes = next((f["node_count"] for f in data.fleets(url) if f["offer"] == own_o.name), 8)
nodes = st.number_input("Nodes", min_value=1, value=int(fleet_nodes), step=1, key="rvo_nodes")
cum = pd.DataFrame(rentown.cumulative_costs(own_a, rent_a, u, int(nodes)))
ui.show_chart(ui.lines(cum, "month", "cost", "option", x_title="months", y_title=cur))
st.caption(f"Buying pays the capex up front, then power and operations at {ui.pct(u)} utilization; renting pays "
           "only the used node-hours"
           + "".join(f"; reserving {int(nodes)} nodes of {ui.md(o.name)} costs "
                     f"{fmt_cell('cost', costs.reserved_term_cost(o, int(nodes), costs.HOURS_PER_MONTH))} {cur} a month"
                     for o in reserved)
           + ". Residual value"
           + (f" ({fmt_cell('residual_value', own_a.residual_value)} {cur} per node)" if own_a.residual_value else "")
           + " is not credited.")

# --- fleet sizing from real usage ----------------------------------------------------------
st.subheader("Fleet sizing from real usage")
months = data.trend_months(url, month)
trend = data.trend(url, tuple(months), currency, own_o.name)
sizing = rentown.peak_sizing([t["report"] for t in trend if t["report"] is not None], node_type,
                             own_a if overrides_own else None)
if not sizing["peak_nodes"]:
    ui.empty(f"No {ui.md(node_type)} runs from {months[0]} to {months[-1]}: nothing to size.")
    st.stop()
rows = sizing["months"]
rent_label = f"rent elastic ({', '.join(sizing['elastic_offers'])})" if sizing["elastic_offers"] else "rent elastic"
own_label = f"own {sizing['peak_nodes']} nodes" if overrides_own else f"if owned ({own_o.name})"  # a column label: plain
if overrides_own:
    st.caption(f"The owned fleet is sized once, to the most nodes in use at the same time ({sizing['peak_nodes']}), "
               f"and costed with {ui.md(own_a.name)} (edited: the prices entered above, nominal power), idle included; "
               "renting elastic is what the monthly report bills for the same runs, each month at its exchange rate.")
else:
    st.caption(f"Owning: the monthly report's \"if owned\" cost under {ui.md(own_o.name)} (the fleet held, else the "
               "month's peak; idle included, measured power where collected); renting elastic: what the monthly report "
               f"bills for the same runs. Both in {cur}, each charge period at its own exchange rate "
               f"(`trainledger report monthly --own {ui.code(own_o.name)} --currency {ui.code(r['currency'])}`).")
st.dataframe(ui.frame(rows, ["month", "node_hours", "peak_nodes", "own_nodes", "time_utilization", "own_for_peak_cost",
                             "elastic_cost"],
                      {"node_hours": "node-hours", "peak_nodes": "peak nodes", "own_nodes": "nodes owned",
                       "time_utilization": f"{ui.TIME_UTIL} of the nodes owned",
                       "own_for_peak_cost": own_label, "elastic_cost": rent_label}),
             hide_index=True, key="rvo_sizing")
bars = [{"month": m["month"], "option": label, "cost": float(m[key])}
        for m in rows for label, key in ((own_label, "own_for_peak_cost"),
                                         (rent_label, "elastic_cost")) if m[key] is not None]
ui.show_chart(ui.grouped_bars(pd.DataFrame(bars), "month", "cost", "option", y_title=cur))
own_total, rent_total = sizing["own_for_peak_cost"], sizing["elastic_cost"]
if rent_total is not None and own_total is not None:
    cheaper, saving, pct_ = costs.savings(own_total, rent_total)
    span = f"{months[0]} to {months[-1]}"
    if cheaper == "b":
        st.markdown(f"Owning ({ui.md(own_label)}) would have cost "
                    f"**{fmt_cell('cost', own_total)} {cur}** from {span}; renting elastic "
                    f"**{fmt_cell('cost', rent_total)} {cur}**: **renting saves {fmt_cell('savings', saving)} {cur} "
                    f"({fmt_cell('savings_pct', pct_)})**.")
    else:
        st.markdown(f"Owning ({ui.md(own_label)}) would have cost "
                    f"**{fmt_cell('cost', own_total)} {cur}** from {span}; renting elastic "
                    f"**{fmt_cell('cost', rent_total)} {cur}**: **owning saves {fmt_cell('savings', saving)} {cur} "
                    f"({fmt_cell('savings_pct', pct_)})**.")
