"""Runs: filtered, paginated list (``ledger.runs.registry.list_runs``) and one run's detail (``ledger.runs.registry.show_run``).

With a month chosen, each run's cost, GPU-hours, cost per 1M tokens and waste in that month are the monthly
report's per-run lines (``app.data.month_run_lines``, in cents as the export); "Most expensive" and "Most
wasted" rank the month's runs by them, and ``?waste=REASON&month=YYYY-MM`` (the Overview's links) keeps the
runs whose lost work counts under that reason (``ledger.money.waste``).

The detail shows what ``trainledger runs show RUN_ID`` prints: figures, cost
per month (actual) and under every offer, per-node utilization with straggler
flags, plus the loss curve (MetricSample ``loss``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Optional

import altair as alt
import pandas as pd
import streamlit as st

from app import access, anomalies_view, data, goodput_view, predictions, ui
from ledger.errors import LedgerInputError
from ledger.money import costs, explain
from ledger.money.waste import check_reason
from ledger.store.models import RunStatus

PAGE_SIZE = 50
ALL = "All"

access.page_gate()
url = data.ledger_url()
month = ui.month_picker(url)
currency = ui.currency_picker(url)
st.title("Runs")
anomalies_view.runs_section(url)  # ?day=YYYY-MM-DD: Overview's spend-anomaly links

values = data.filter_values(url)
c = st.columns(5)
project = c[0].selectbox("Project", [ALL] + values["project"], key="runs_project")
user = c[1].selectbox("User", [ALL] + values["user"], key="runs_user")
status = c[2].selectbox("Status", [ALL] + [s.value for s in RunStatus], key="runs_status")
strategy = c[3].selectbox("Strategy", [ALL] + values["strategy"], key="runs_strategy")
month_filter = c[4].selectbox("Month", [month, ALL], key="runs_month",
                              format_func=lambda m: "All months" if m == ALL else m,
                              help="Runs overlapping the month selected in the sidebar, or all.")


def _opt(v: str):
    return None if v == ALL else v


filters = dict(month=_opt(month_filter), project=_opt(project), user=_opt(user), status=_opt(status),
               strategy=_opt(strategy))
VIEWS = {"newest": "Newest first", "expensive": "Most expensive", "wasted": "Most wasted"}
MONEY_COLUMNS = {"cost": f"cost ({currency})", "cost_per_1m_tokens": f"cost per 1M tokens ({currency})",
                 "waste_cost": f"waste ({currency})"}


def waste_param() -> Optional[str]:
    """``?waste=REASON`` (failed, crashed, cancelled, lost_since_checkpoint), else None; a bad value: one line."""
    raw = st.query_params.get("waste")
    if not raw:
        return None
    try:
        return check_reason(raw)
    except LedgerInputError as exc:
        st.error(ui.error_line(exc))
        return None


PROVISIONAL_HELP = ("Provisional: drawn from an owned or reserved fleet in a month that has not closed, so its share "
                    "of the fleet's month changes as later runs use it (final at the month's end); elastic runs are "
                    "final when they end. docs/MONEY.md, \"Final or provisional\".")


def month_figures(line: Optional[dict]) -> dict:
    """A run's figures in the month, from the monthly report's run line (cents, as the export)."""
    if line is None:
        return {"gpu_hours_month": None, "cost": None, "cost_per_1m_tokens": None, "waste_cost": None, "waste_reason": "",
                "finality": ""}
    cost = Decimal(line["cost"])
    per_1m = costs.cost_per_million_tokens(cost, line["tokens"]) if line["tokens"] else None
    return {"gpu_hours_month": line["gpu_hours"], "cost": cost, "finality": line["finality"],
            "cost_per_1m_tokens": costs.cents(per_1m) if per_1m is not None else None,
            "waste_cost": Decimal(line["lost_work_cost"]) if line["waste_reason"] else None,
            "waste_reason": (line["waste_reason"] or "").replace("_", " ")}


def runs_table(rows: list[dict]) -> pd.DataFrame:
    """The runs as a table: money as numbers (so a column sorts by value), a run without a user blank."""
    cols = ["id", "name", "project", "user", "status", "strategy", "node_type", "nodes", "started_at", "node_hours",
            "gpu_hours_month", "tokens", "gpu_util_mean", "mfu", "final_loss", "lost_gpu_hours"]
    df = ui.frame([{**r, "user": r.get("user") or "", "project": r.get("project") or ""} for r in rows], cols,
                  {"node_type": "node type", "started_at": "started", "node_hours": "node-hours",
                   "gpu_hours_month": "GPU-hours (month)", "gpu_util_mean": ui.GPU_UTIL, "mfu": ui.MFU,
                   "final_loss": "final loss", "lost_gpu_hours": "lost GPU-h"})
    for key, label in MONEY_COLUMNS.items():
        df[label] = [None if r.get(key) is None else float(r[key]) for r in rows]
    df["waste reason"] = [r.get("waste_reason") or "" for r in rows]
    df["cost is"] = [r.get("finality") or "" for r in rows]  # final | provisional (docs/MONEY.md)
    return df


reason = waste_param()
by_month = month_filter != ALL
view = st.radio("Order", list(VIEWS), format_func=VIEWS.get, horizontal=True, key="runs_view",
                index=2 if reason else 0, disabled=not by_month,
                help="Most expensive / most wasted: the month's runs by their cost or waste in the month "
                     "(the monthly report's per-run figures), top " + str(PAGE_SIZE) + ".")
lines = {r["run_id"]: r for r in data.month_run_lines(url, month_filter, currency)} if by_month else {}
if by_month and (view != "newest" or reason):
    # from the month's run lines: every run of the month, filtered, ranked
    chosen = [x for x in lines.values()
              if (filters["project"] is None or x["project"] == filters["project"])
              and (filters["user"] is None or x["user"] == filters["user"])
              and (filters["status"] is None or x["status"] == filters["status"])
              and (filters["strategy"] is None or x["strategy"] == filters["strategy"])
              and (reason is None or x["waste_reason"] == reason)]
    key = (lambda x: Decimal(x["lost_work_cost"])) if view == "wasted" else (lambda x: Decimal(x["cost"]))
    chosen.sort(key=lambda x: (-key(x), x["run_id"]))
    rows = [{"id": x["run_id"], "name": x["name"], "project": x["project"], "user": x["user"], "status": x["status"],
             "strategy": x["strategy"], "node_type": x["node_type"], "nodes": x["nodes"], "started_at": x["start"],
             "node_hours": x["node_hours"], "tokens": x["tokens"], "gpu_util_mean": x["gpu_util_mean"], "mfu": x["mfu"],
             "lost_gpu_hours": x["lost_gpu_hours"], **month_figures(x)} for x in chosen[:PAGE_SIZE]]
    more, page_no = len(chosen) > PAGE_SIZE, 1
    order = (f"{VIEWS[view].lower()} in {month_filter}" + (f", waste: {reason.replace('_', ' ')}" if reason else "")
             + f", top {PAGE_SIZE}")
else:
    page_no = st.columns(5)[0].number_input("Page", min_value=1, value=1, step=1, key="runs_page")
    rows = data.runs(url, **filters, limit=PAGE_SIZE + 1, offset=(page_no - 1) * PAGE_SIZE)
    more = len(rows) > PAGE_SIZE
    rows = [{**r, **month_figures(lines.get(r["id"]))} for r in rows[:PAGE_SIZE]]
    order = "newest first"

if not rows:
    ui.empty("No runs match these filters." if page_no == 1 else "No more runs: go back a page.")
else:
    st.caption(f"Runs {(page_no - 1) * PAGE_SIZE + 1}–{(page_no - 1) * PAGE_SIZE + len(rows)}, {order}"
               + (" · more on the next page" if more and order == "newest first" else "")
               + ". Node-hours are each run's whole duration; GPU-hours, cost, cost per 1M tokens and waste are "
               + (f"its part of {month_filter}, as `trainledger report monthly` (waste: lost work since the last "
                  "checkpoint, or since the start when it never checkpointed)." if by_month else
                  "shown for one month: pick it in Month."))
    st.dataframe(runs_table(rows), hide_index=True,
                 column_config={label: st.column_config.NumberColumn(format="%.2f") for label in MONEY_COLUMNS.values()})

# --- run detail --------------------------------------------------------------------------
st.header("Run detail")
ids = [r["id"] for r in rows]
wanted = ui.run_id_param()
if wanted and wanted not in ids:
    ids.insert(0, wanted)
if not ids:
    st.stop()
names = {r["id"]: r["name"] for r in rows}
run_id = st.selectbox("Run", ids, index=ids.index(wanted) if wanted in ids else 0, key="runs_detail",
                      format_func=lambda i: f"{i} — {names[i]}" if names.get(i) else i)
try:
    d = data.run_detail(url, run_id, currency)
except LedgerInputError as exc:
    st.error(ui.error_line(exc))
    st.stop()
currency = d["currency"] or currency

md = ui.md
st.subheader(f"{md(d['id'])} · {md(d['name'])}" if d["name"] else md(d["id"]))
st.caption(f"{md(d['status'])} · project {md(d['project'] or ui.DASH)} · user {md(d['user'] or ui.DASH)} · "
           f"{md(d['node_type'])}: {d['nodes']} nodes × {d['gpus_per_node']} GPUs · strategy {md(d['strategy'] or ui.DASH)}"
           + (f" (dp {d['dp']}, tp {d['tp']}, pp {d['pp']}, ZeRO-{d['zero_stage']})" if d.get("dp") else "")
           + (f" · sweep {md(d['sweep_id'])}" if d.get("sweep_id") else ""))
if d.get("error"):
    st.error(f"Error: {md(d['error'], 1000)}")
if d.get("lost_work_cost") is not None:
    since = "its start (it never checkpointed)"
    if d["lost_since"] == "checkpoint":
        step = d.get("last_checkpoint_step")
        since = "its last checkpoint" + (f" (step {step})" if step is not None else "")
    st.warning(f"Lost work: {ui.number('lost_gpu_hours', d['lost_gpu_hours'])} GPU-hours since {since}, "
               f"{ui.money('lost_work_cost', d['lost_work_cost'])} {md(currency)}.")
if d.get("resume_chain"):
    ch = d["resume_chain"]
    st.info(f"Part of a resume chain of {len(ch['runs'])} runs (one job): {ui.money('cost', ch['cost'])} {md(currency)} "
            f"in all, of which {ui.money('lost_work_cost', ch['lost_work_cost'])} lost work.")
    st.dataframe(ui.frame(ch["runs"], ["id", "status", "resume_of", "started_at", "last_checkpoint_step", "cost",
                                       "lost_work_cost"]), hide_index=True)

c = st.columns(7)
c[0].metric(f"Cost ({md(currency)})", ui.money("cost_actual", d["cost_actual"]), border=True,
            delta="provisional" if d.get("finality") == "provisional" else None, delta_color="off",
            help="What the run cost under its own offer at the prices in force when it ran, summed over its months "
                 "(owned fleets allocated by node-hours). " + PROVISIONAL_HELP)
co2_label = "CO2e (kg)" + (", estimated" if d["co2e_basis"] in ("estimated", "mixed") else "")
c[6].metric(co2_label, ui.number("co2e_kg", d["co2e_kg"]), border=True,
            help=f"{ui.number('energy_kwh', d['energy_kwh'])} kWh ({d['co2e_basis'] or 'no'} energy: measured where "
                 "collected, else the node type's nominal power × node-hours) × grid intensity "
                 f"{', '.join(str(g) for g in d['carbon_intensity_g_per_kwh'])} gCO2e/kWh"
                 + (" — the default intensity, an assumption" if d["carbon_intensity_assumed"] else "") + ".")
c[1].metric("Node-hours", ui.number("node_hours", d["node_hours"]), border=True)
c[2].metric("GPU-hours", ui.number("gpu_hours", d["gpu_hours"]), border=True)
c[3].metric(f"Cost per 1M tokens ({md(currency)})", ui.money("cost_per_1m_tokens", d["cost_per_1m_tokens"]), border=True)
c[4].metric(ui.gpu_util_label(d.get("util_source")), ui.pct(d.get("gpu_util_mean")), border=True,
            help=ui.GPU_UTIL_HELP + (f" p95: {ui.pct(d.get('gpu_util_p95'))}." if d.get("gpu_util_p95") is not None else ""))
c[5].metric(ui.MFU, ui.mfu_text(d.get("mfu"), [d.get("util_source")]), border=True, help=ui.MFU_HELP)

kinds = {u["offer"]: u["kind"] for u in d["cost_under_offers"]}
used = list(dict.fromkeys(m["offer"] for m in d["cost_by_month"]))
actual_kind = kinds.get(used[0]) if used else None
st.caption(md(explain.costed_under(used, actual_kind, d.get("offer_id") is not None)))
left, right = st.columns(2)
with left:
    st.markdown("**Cost under every offer** (what-if, at today's list prices)")
    under = [{**u, "why": explain.differs(u["kind"], actual_kind)} for u in d["cost_under_offers"]]
    if under:
        st.dataframe(ui.frame(under, ["offer", "kind", "cost", "why"], {"why": "why it differs from the actual cost"}),
                     hide_index=True)
        st.bar_chart(pd.DataFrame([{"offer": u["offer"], "cost": float(u["cost"])} for u in under]),
                     x="offer", y="cost", y_label=currency, height=250)
with right:
    st.markdown("**Cost by month (actual)**")
    if d["cost_by_month"]:
        st.dataframe(ui.frame(d["cost_by_month"], ["month", "node_hours", "cost", "offer", "energy_kwh", "co2e_kg",
                                                   "co2e_basis"],
                              {"energy_kwh": "energy kWh", "co2e_kg": "CO2e kg", "co2e_basis": "energy basis"}),
                     hide_index=True)
    else:
        st.caption("Not started: nothing costed yet.")

predictions.show(url, d["id"])  # planned vs measured (docs/PLANNER.md)

st.markdown("**Per node**")
nodes = d["nodes_detail"]
if not nodes:
    st.caption("No per-node figures recorded for this run.")
else:
    stragglers = [n["hostname"] for n in nodes if n.get("straggler")]
    if stragglers:
        st.warning(f"Straggler{'s' if len(stragglers) > 1 else ''}: {md(', '.join(stragglers))} "
                   "(slower than the other nodes; the whole run waits for them).")
    table = [{**n, "straggler": "yes" if n.get("straggler") else ""} for n in nodes]
    sources = {n.get("util_source") for n in nodes if n.get("util_source")} or {d.get("util_source")}
    util_label = ui.CPU_UTIL if sources == {"cpu"} else ui.GPU_UTIL
    short = "CPU util" if sources == {"cpu"} else "GPU-Util"
    st.dataframe(ui.frame(table, ["hostname", "node_rank", "gpu_util_mean", "gpu_util_p95", "util_source",
                                  "energy_kwh", "straggler"],
                          {"gpu_util_mean": util_label, "gpu_util_p95": f"{short} p95", "energy_kwh": "energy kWh"}),
                 hide_index=True)
    util = pd.DataFrame([{"node": n["hostname"], f"{short} %": (n["gpu_util_mean"] or 0) * 100,
                          "flag": "straggler" if n.get("straggler") else "ok"} for n in nodes])
    st.bar_chart(util, x="node", y=f"{short} %", color="flag", height=300)

goodput_view.phase_timeline(url, d["id"])  # issue #25

st.markdown("**Loss**")
loss = data.loss_curve(url, d["id"])
if loss:
    df = pd.DataFrame(loss)
    df["ts"] = pd.to_datetime(df["ts"], utc=True)
    multi = df["node"].nunique() > 1
    chart = alt.Chart(df).mark_line().encode(
        x=alt.X("ts:T", title="time (UTC)", axis=alt.Axis(format="%b %d %H:%M", labelAngle=0)),
        y=alt.Y("value:Q", title="loss"),
        tooltip=[alt.Tooltip("ts:T", format="%Y-%m-%d %H:%M:%S"), alt.Tooltip("value:Q", format=".4f")])
    if multi:
        chart = chart.encode(color=alt.Color("node:N"))
    ui.show_chart(chart.properties(height=260))
else:
    st.caption("No loss samples recorded for this run." + (f" Final loss: {d['final_loss']:.4f}." if d.get("final_loss") is not None else ""))
