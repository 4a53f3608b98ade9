"""Goodput sections of the dashboard (issue #25): the idle heat map, ...

Every figure is the presented JSON of the ledger function ``trainledger goodput`` prints
(:mod:`trainledger.app.queries.goodput_data`), so a page shows the CLI's numbers to the cent.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Optional

import altair as alt
import pandas as pd
import streamlit as st
from trainledger.app.queries import goodput_data
from trainledger.app.views import ui


def idle_heat_map(url: str, month: str, currency: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Where the month's idle sits: metrics, a day × hour heat map of idle cost and the per-day table."""
    occ = goodput_data.idle_occupancy(url, month, currency)
    cur = ui.md(occ["currency"])
    st.subheader(f"Where idle sits, {month}")
    st.caption(f"Owned and reserved fleets' node-hours held vs used, hour by hour in {ui.md(occ['timezone'])}; the hours' "
               f"idle cost adds up to the month's idle cost. The same figures as `trainledger goodput idle --month {month}`.")
    c = st.columns(4)
    c[0].metric(ui.card("idle_cost", cur, summary), ui.money("idle_cost", occ["idle_cost"]), border=True,
                help=ui.help_of("idle_cost") + " The monthly report's idle cost.")
    c[1].metric(ui.to_date("of which " + ui.column("recovery_cost", cur), summary),
                ui.money("recovery_cost", occ["recovery_cost"]), border=True,
                help=ui.help_of("recovery_cost") + " Idle that has an owner.")
    c[2].metric(ui.card("idle_node_hours", summary=summary), ui.number("idle_node_hours", occ["idle_node_hours"]), border=True)
    c[3].metric(ui.to_date("Held node-hours", summary), ui.number("held_node_hours", occ["held_node_hours"]), border=True,
                help=f"Used: {ui.number('used_node_hours', occ['used_node_hours'])} node-hours.")
    if not occ["fleets"]:
        st.caption(f"No owned or reserved fleet in {month}: nothing was held idle.")
        return occ
    ui.show_chart(heat_chart(occ["hours"], cur))
    if occ["recovery"]:
        st.markdown("**Idle with an owner**: the gaps between an interruption and the resumed run of its chain")
        st.dataframe(ui.frame(occ["recovery"], ["chain", "run_id", "nodes", "start", "end", "recovery_cost"],
                              {"run_id": "resumed run", "recovery_cost": f"recovery ({occ['currency']})"}),
                     hide_index=True)
    st.dataframe(ui.frame(occ["days"], ["day", "held_node_hours", "used_node_hours", "idle_node_hours", "idle_cost",
                                        "recovery_cost", "costliest_hour"],
                          {"held_node_hours": "held node-hours", "costliest_hour": "costliest hour"},
                          currency=occ["currency"]),
                 hide_index=True, key="idle_days")
    return occ


def heat_chart(hours: list[dict[str, Any]], cur: str) -> alt.Chart:
    """Day (rows) × hour of the day (columns), coloured by idle cost; a DST-repeated hour added into one cell."""
    df = pd.DataFrame([{"day": h["day"], "hour": h["hour"], "idle": float(Decimal(h["idle_cost"])),
                        "recovery": float(Decimal(h["recovery_cost"])), "held": h["held_node_hours"],
                        "used": h["used_node_hours"]} for h in hours])
    df = df.groupby(["day", "hour"], as_index=False).sum()
    return (alt.Chart(df).mark_rect()
            .encode(x=alt.X("hour:O", title="hour of the day"), y=alt.Y("day:O", title=None),
                    color=alt.Color("idle:Q", title=f"idle ({cur})", scale=alt.Scale(scheme="orangered")),
                    tooltip=["day", "hour", alt.Tooltip("idle:Q", title=f"idle ({cur})", format=",.2f"),
                             alt.Tooltip("recovery:Q", title=f"of which recovery ({cur})", format=",.2f"),
                             alt.Tooltip("held:Q", title="held node-hours", format=",.3f"),
                             alt.Tooltip("used:Q", title="used node-hours", format=",.3f")])
            .properties(height=max(ui.MIN_CHART_HEIGHT, 14 * df["day"].nunique())))


def phase_timeline(url: str, run_id: str, scope: Optional[tuple[str, ...]] = None) -> list[dict[str, Any]]:
    """A run's phases per node (``trainledger goodput --run ID``'s timeline): when each phase ran, from its
    first start to its last end, and how long it took in all; the table lists the figures."""
    rows = goodput_data.timeline(url, run_id, scope)
    st.markdown("**Phases per node**")
    if not rows:
        st.caption("No phases recorded for this run (a run seen only by the wrapper or a Slurm import): its time is "
                   "unattributed in the goodput account.")
        return rows
    spans = pd.DataFrame([{"node": r["node"] or "(node)", "phase": r["phase"], "from": pd.Timestamp(r["first_at"]),
                           "to": pd.Timestamp(r["last_at"]), "seconds": float(r["seconds"]), "count": r["count"]}
                          for r in rows if r.get("first_at") is not None and r.get("last_at") is not None])
    if not spans.empty:
        ui.show_chart(alt.Chart(spans).mark_bar(opacity=0.7).encode(
            x=alt.X("from:T", title="time (UTC)"), x2="to:T", y=alt.Y("node:N", title=None),
            color=alt.Color("phase:N", legend=alt.Legend(orient="bottom", labelLimit=ui.LEGEND_LABEL_LIMIT)),
            yOffset="phase:N",
            tooltip=["node", "phase", alt.Tooltip("from:T", format="%Y-%m-%d %H:%M:%S"),
                     alt.Tooltip("to:T", format="%Y-%m-%d %H:%M:%S"), alt.Tooltip("seconds:Q", format=",.3f"), "count"])
            .properties(height=max(ui.MIN_CHART_HEIGHT, 40 * spans["node"].nunique())))
    tz = ui.display_tz()  # times YYYY-MM-DD HH:MM in the display time zone, never microseconds
    st.dataframe(pd.DataFrame([{"node": r["node"], "phase": r["phase"], "seconds": r["seconds"], "count": r["count"],
                                "first": ui.when(r.get("first_at"), tz), "last": ui.when(r.get("last_at"), tz)}
                               for r in rows]),
                 hide_index=True)
    return rows


# --- the goodput account (trainledger.money.goodput.account) -----------------------------------------

def _label(cat: Any) -> str:
    return str(getattr(cat, "value", cat)).replace("_", " ")


def month_account(url: str, month: str, currency: str) -> Any:
    """The month's :class:`MonthAccount` (``trainledger goodput --month M``'s totals): stored per ledger state once the
    month is over (``data.month_totals``), so a trend of past months computes none of their run lines."""
    from trainledger.app.queries.data import month_totals

    return month_totals(url, month, currency).account


def overview_figure(url: str, month: str, currency: str, summary: dict[str, Any]) -> None:
    """The Overview's one line: "of 36,333.00 CNY, 24,100.00 bought kept training progress: 66.3%"."""
    m = month_account(url, month, currency)
    if m is None or not m.spend:
        return
    cur = ui.md(m.currency)
    span = f" ({summary['period']})" if summary.get("is_partial") else ""
    st.markdown(f"**Goodput{span}:** of {ui.money('cost', m.spend)} {cur}, {ui.money('cost', m.goodput)} bought "
                f"kept training progress: **{ui.number('goodput_pct', m.goodput_pct)}**. "
                f"Badput {ui.money('cost', m.badput)}, idle less recovery {ui.money('cost', m.idle)} {cur}.",
                help="Goodput = the cost of steps whose progress was kept; badput = start-up, data waits, checkpoints, "
                     "evaluation, lost work, recovery, straggler waits and time no phase explains; idle less recovery = "
                     "fleet node-hours no run and no interrupted chain held. Goodput + badput + idle less recovery = "
                     "spend. `trainledger goodput --month "
                     f"{month}`.")
    st.page_link("pages/goodput.py", label="Where it went", icon=":material/target:", query_params={"month": month})


def category_links(m: Any, month: str) -> None:
    """Each badput category of the month with a cost links to the runs it was spent in (``ui.runs_link``)."""
    cats = [c for c, v in m.by_category.items() if _label(c) != "productive" and v]
    if not cats:
        return
    st.caption("Badput by category: click one for the runs it was spent in, the most of it first.")
    cols = st.columns(min(len(cats), 4))
    for i, c in enumerate(cats):
        ui.runs_link(f"{_label(c)}: {ui.money('cost', m.by_category[c])}", where=cols[i % len(cols)],
                     goodput=str(getattr(c, "value", c)), month=month, order="wasted")


ACCOUNT_HELP = ("Every run's paid time and cost split into productive (steps whose progress was kept) and badput; "
                "with idle they add up to the month's spend.")


def month_metrics(m: Any, summary: dict[str, Any]) -> None:
    """Spend = goodput + badput + idle, goodput % and ETTR of the month."""
    cur = ui.md(m.currency)
    c = st.columns(6)
    c[0].metric(ui.card("spend", cur, summary), ui.money("cost", m.spend), border=True, help=ACCOUNT_HELP)
    for col, key, value in ((c[1], "goodput_cost", m.goodput), (c[2], "badput_cost", m.badput),
                            (c[3], "account_idle_cost", m.idle)):
        col.metric(ui.card(key, cur, summary), ui.money("cost", value), border=True, help=ui.help_of(key))
    c[4].metric(ui.card("goodput_pct", summary=summary), ui.number("goodput_pct", m.goodput_pct), border=True,
                help=ui.help_of("goodput_pct"))
    c[5].metric(ui.card("ettr", summary=summary), ui.pct(m.ettr), border=True, help=ui.help_of("ettr"))


def badput_by_project(projects: list[dict[str, Any]], cur: str) -> list[dict[str, Any]]:
    """Per project: goodput and each badput category (the account's project lines, ``GoodputReport.projects``),
    table and stacked bars."""
    rows = [{"project": p["project"] or "(no project)", "goodput_pct": p["goodput_pct"], "total_cost": p["total_cost"],
             **{f"{k}_cost": v for k, v in p["cost"].items()}} for p in projects]
    st.subheader("Badput by category, per project")
    if not rows:
        st.caption("No run this month.")
        return rows
    cats = [k for k in projects[0]["cost"]]
    st.dataframe(ui.frame(rows, ["project", "total_cost", *[f"{k}_cost" for k in cats], "goodput_pct"],
                          {"total_cost": f"cost ({cur})", **{f"{k}_cost": _label(k) for k in cats},
                           "goodput_pct": "goodput %"}), hide_index=True)
    bars = [{"project": r["project"], "category": _label(k), "cost": float(r[f"{k}_cost"])}
            for r in rows for k in cats if k != "productive" and r[f"{k}_cost"]]
    if bars:
        ui.show_chart(alt.Chart(pd.DataFrame(bars)).mark_bar().encode(
            y=alt.Y("project:N", title=None), x=alt.X("cost:Q", title=f"badput ({cur})", axis=alt.Axis(format=ui.AXIS_FORMAT)),
            color=alt.Color("category:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=ui.LEGEND_LABEL_LIMIT)),
            tooltip=["project", "category", alt.Tooltip("cost:Q", format=",.2f")])
            .properties(height=max(ui.MIN_CHART_HEIGHT, 40 * len({r["project"] for r in rows}))))
    return rows


def ranked_runs(runs: list[Any], cur: str) -> list[dict[str, Any]]:
    """The month's runs ranked by badput cost (``ranked_by_badput``: the first ``RANKED``): what each cost, bought
    and lost, and its largest badput."""
    from trainledger.money.goodput.goodput_core import ranked_by_badput

    st.subheader("Runs ranked by badput")
    rows = []
    for r in ranked_by_badput(runs):
        bad = {c: v for c, v in r.cost.items() if _label(c) != "productive"}
        worst = max(bad, key=lambda c: bad[c]) if any(bad.values()) else None
        rows.append({"run": r.run_id, "project": r.project or "", "status": r.status, "total_cost": r.total_cost,
                     "goodput_cost": sum((v for c, v in r.cost.items() if _label(c) == "productive"), Decimal(0)),
                     "badput_cost": r.badput_cost, "largest": _label(worst) if worst is not None else "",
                     "goodput_pct": r.goodput_pct})
    if not rows:
        st.caption("No run this month.")
        return rows
    st.dataframe(ui.frame(rows, ["run", "project", "status", "total_cost", "goodput_cost", "badput_cost",
                                         "largest", "goodput_pct"],
                          {"total_cost": f"cost ({cur})", "goodput_cost": f"goodput ({cur})",
                           "badput_cost": f"badput ({cur})", "largest": "largest badput", "goodput_pct": "goodput %"}),
                 hide_index=True)
    return rows


def badput_trend(url: str, months: list[str], currency: str, cur: str) -> list[dict[str, Any]]:
    """Badput by category per month (each month's account), stacked bars."""
    rows = []
    for month in months:
        m = month_account(url, month, currency)
        if m is None:
            continue
        rows += [{"month": month, "category": _label(c), "cost": float(v)} for c, v in m.by_category.items()
                 if _label(c) != "productive" and v]
    st.subheader(f"Badput by category per month, {months[0]} to {months[-1]}")
    if rows:
        ui.show_chart(alt.Chart(pd.DataFrame(rows)).mark_bar().encode(
            x=alt.X("month:N", title=None, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("cost:Q", title=f"badput ({cur})", axis=alt.Axis(format=ui.AXIS_FORMAT)),
            color=alt.Color("category:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=ui.LEGEND_LABEL_LIMIT)),
            tooltip=["month", "category", alt.Tooltip("cost:Q", format=",.2f")]).properties(height=280))
    else:
        st.caption("No badput in these months.")
    return rows
