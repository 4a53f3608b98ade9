"""Runs: filtered, paginated list (``trainledger.runs.registry.list_runs``) and one run's detail (``trainledger.runs.registry.show_run``).

With a month chosen, each run's cost, GPU-hours, cost per 1M tokens and waste in that month are the monthly
report's per-run lines (``trainledger.app.queries.data.month_run_lines``, in cents as the export; waste: the run's badput in
the month's goodput account, its reason the largest badput category); "Most expensive" and "Most wasted" rank the
month's runs by them. ``?goodput=CATEGORY&month=YYYY-MM`` (the Overview's waste links) keeps the runs with that
badput, the most of it first; ``?waste=REASON`` (links from before issue 36) still works: failed, crashed, cancelled
and lost_since_checkpoint mean ``lost_work``, a category's name itself (``trainledger.money.goodput.waste.check_reason``).

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
from trainledger.app.queries import data, goodput_data
from trainledger.app.views import access, anomalies_view, compare_view, goodput_view, predictions, ui, util_view
from trainledger.errors import LedgerInputError
from trainledger.money.goodput.account import CATEGORIES
from trainledger.money.goodput.waste import check_reason
from trainledger.money.rates import costs, explain
from trainledger.store.models import RunStatus

PAGE_SIZE = 50
ALL = "All"
CATEGORY_NAMES = [str(getattr(c, "value", c)) for c in CATEGORIES]

ident = access.page_gate()
project_scope = access.scope_of(ident)  # a project-scoped user: only those projects' runs are read (docs/SCOPES.md)
url = data.ledger_url()
month = ui.month_picker(url)
currency = ui.currency_picker(url)
st.title("Runs")
anomalies_view.runs_section(url, project_scope)  # ?day=YYYY-MM-DD: Overview's spend-anomaly links

VIEWS = {"newest": "Newest first", "expensive": "Most expensive", "wasted": "Most wasted"}
SCOPES = {"month": "this month", "all": "all months"}


def url_choice(key: str, param: str, options: list[str], default: str) -> None:
    """A filter widget's first value from ``?PARAM=`` (the shared URL); one not among ``options``: one line, ``default``."""
    if key in st.session_state:
        return
    raw = st.query_params.get(param)
    if raw and raw not in options:
        st.warning(f"?{param}={ui.md(raw)}: not one of the choices; showing {ui.md(default)} instead.")
        raw = None
    st.session_state[key] = raw or default


values = data.filter_values(url, project_scope)
choices = {"project": [ALL] + values["project"], "user": [ALL] + values["user"],
           "status": [ALL] + [s.value for s in RunStatus], "strategy": [ALL] + values["strategy"]}
c = st.columns(5)
picked = {}
for col, (name, options) in zip(c, choices.items()):
    url_choice(f"runs_{name}", name, options, ALL)
    picked[name] = col.selectbox(name.capitalize(), options, key=f"runs_{name}")
url_choice("runs_scope", "scope", list(SCOPES), "month")
scope = c[4].selectbox("Months", list(SCOPES), key="runs_scope",
                       format_func=lambda k: month if k == "month" else "All months",
                       help="Runs overlapping the month selected in the sidebar, or all.")
month_filter = month if scope == "month" else ALL


def _opt(v: str):
    return None if v == ALL else v


filters = dict(month=_opt(month_filter), **{k: _opt(v) for k, v in picked.items()})
MONEY_COLUMNS = {"cost": f"cost ({currency})", "waste_cost": f"waste ({currency})",
                 "cost_per_1m_tokens": f"cost per 1M tokens ({currency})"}


def waste_param() -> Optional[str]:
    """``?waste=REASON`` as its badput category (failed, crashed, cancelled, lost_since_checkpoint: lost_work; or a
    category's name), else None; a bad value: one line."""
    raw = st.query_params.get("waste")
    if not raw:
        return None
    try:
        return check_reason(raw)
    except LedgerInputError as exc:
        st.error(ui.error_line(exc))
        return None


def goodput_param() -> Optional[str]:
    """``?goodput=CATEGORY`` (a badput category of the goodput account), else None; a bad value: one line."""
    def check(raw: str, flag: str) -> str:
        if raw not in CATEGORY_NAMES or raw == "productive":
            raise LedgerInputError(f"{flag}: expected one of {', '.join(c for c in CATEGORY_NAMES if c != 'productive')}, "
                                   f"got {raw!r}")
        return raw
    return ui.checked_param("goodput", check, "every run")


PROVISIONAL_HELP = ("Provisional: drawn from an owned or reserved fleet in a month that has not closed, so its share "
                    "of the fleet's month changes as later runs use it (final at the month's end); elastic runs are "
                    "final when they end. docs/MONEY.md, \"Final or provisional\".")


def month_figures(line: Optional[dict]) -> dict:
    """A run's figures in the month, from the monthly report's run line (cents, as the export)."""
    if line is None:
        return {"gpu_hours_month": None, "cost": None, "cost_per_1m_tokens": None, "waste_cost": None, "waste_reason": "",
                "finality": ""}
    cost = Decimal(line["cost"])
    per_1m = line.get("cost_per_1m_tokens")  # from the line's exact cost, 4 decimals (data.month_run_lines)
    return {"gpu_hours_month": line["gpu_hours"], "cost": cost, "finality": line["finality"],
            "cost_per_1m_tokens": Decimal(per_1m) if per_1m is not None else None,
            "waste_cost": Decimal(line["waste_cost"]) if line["waste_cost"] is not None else None,
            "waste_reason": (line["waste_reason"] or "").replace("_", " ")}


#: money first: id and name, then what the run cost, wasted and why, its GPU-hours and cost per 1M tokens
FIRST = ["id", "name", "cost", "waste_cost", "waste_reason", "gpu_hours_month", "cost_per_1m_tokens"]
REST = ["status", "project", "user", "strategy", "node_type", "nodes", "started_at", "node_hours", "tokens",
        "gpu_util_mean", "mfu", "final_loss", "lost_gpu_hours", "finality"]
LABELS = {"node_type": "node type", "started_at": "started", "node_hours": "node-hours", "waste_reason": "waste reason",
          "gpu_hours_month": "GPU-hours", "gpu_util_mean": ui.GPU_UTIL, "mfu": ui.MFU, "final_loss": "final loss",
          "lost_gpu_hours": "lost GPU-h", "finality": "cost is", **MONEY_COLUMNS}
NUMBER_FORMATS = {"cost": "%,.2f", "waste_cost": "%,.2f", "category_cost": "%,.2f", "cost_per_1m_tokens": "%,.4f",
                  "gpu_hours_month": "%,.1f", "tokens": "%,d", "nodes": "%,d", "node_hours": "%,.1f", "lost_gpu_hours": "%,.1f", "final_loss": "%.4f"}


def runs_table(rows: list[dict], category: Optional[str] = None) -> pd.DataFrame:
    """The runs, money first: money, hours and counts as numbers (a column sorts by value; shown with thousands
    separators), times ``YYYY-MM-DD HH:MM`` in the display time zone, an unknown value blank. Opened for a badput
    ``category``: its amount in each run, right after the run's waste."""
    tz = ui.display_tz()
    keys = FIRST[:5] + ["category_cost"] + FIRST[5:] + REST if category else FIRST + REST
    labels = {**LABELS, "category_cost": f"{category.replace('_', ' ')} ({currency})"} if category else LABELS
    out = []
    for r in rows:
        row = {}
        for key in keys:
            v = r.get(key)
            if key in NUMBER_FORMATS:
                row[labels.get(key, key)] = None if v is None else (int(v) if NUMBER_FORMATS[key] == "%,d" else float(v))
            else:
                row[labels.get(key, key)] = ui.cell(key, v, tz)
        out.append(row)
    return pd.DataFrame(out, columns=[labels.get(k, k) for k in keys])


COLUMN_CONFIG = {"id": st.column_config.TextColumn("id", width=110), "name": st.column_config.TextColumn("name", width=150),
                 LABELS["waste_reason"]: st.column_config.TextColumn(LABELS["waste_reason"], width=110),
                 **{LABELS.get(k, k): st.column_config.NumberColumn(LABELS.get(k, k), format=f) for k, f in NUMBER_FORMATS.items()}}

category = goodput_param() or waste_param()  # ?waste= (old links): its badput category
by_month = month_filter != ALL
url_choice("runs_view", "order", list(VIEWS), "wasted" if category else "newest")
view = st.radio("Order", list(VIEWS), format_func=VIEWS.get, horizontal=True, key="runs_view",
                help="Most expensive / most wasted: the runs by their cost or waste (badput) in the month, or over "
                     "all months (the cost and waste columns: the monthly export's cost and badput_cost, summed over "
                     "the months for All months), top " + str(PAGE_SIZE) + ".")
if by_month:
    lines = {r["run_id"]: r for r in data.month_run_lines(url, month_filter, currency, project_scope)}
else:  # every run's figures over all months: the months' lines summed
    lines = {r["run_id"]: r for r in data.all_months_run_lines(url, currency, project_scope)}
badput = None
if category:
    badput = ({r.run_id: r.cost for r in goodput_data.account(url, month_filter, currency).runs
               if data.in_scope(r.project, project_scope)} if by_month
              else {rid: a.cost for rid, a in data.all_months_accounts(url, currency, project_scope).items()})
if view != "newest" or category:
    # from the month's run lines: every run of the month, filtered, ranked
    def category_cost(run_id: str) -> Decimal:
        costs_ = badput.get(run_id) or {}
        return next((v for c, v in costs_.items() if str(getattr(c, "value", c)) == category), Decimal(0))

    chosen = [x for x in lines.values()
              if all(filters[k] is None or x[k] == filters[k] for k in ("project", "user", "status", "strategy"))
              and (category is None or category_cost(x["run_id"]) > 0)]
    key = (lambda x: Decimal(x["waste_cost"] or 0)) if view == "wasted" else (lambda x: Decimal(x["cost"]))
    if category and view == "wasted":  # a badput category's runs: the most of it first
        key = (lambda x: category_cost(x["run_id"]))
    chosen.sort(key=lambda x: (-key(x), x["run_id"]))
    rows = [{"id": x["run_id"], "name": x["name"], "project": x["project"], "user": x["user"], "status": x["status"],
             "strategy": x["strategy"], "node_type": x["node_type"], "nodes": x["nodes"], "started_at": x["start"],
             "node_hours": x["node_hours"], "tokens": x["tokens"], "gpu_util_mean": x["gpu_util_mean"], "mfu": x["mfu"],
             "lost_gpu_hours": x["lost_gpu_hours"], **month_figures(x),
             **({"category_cost": costs.cents(category_cost(x["run_id"]))} if category else {})}
            for x in chosen[:PAGE_SIZE]]
    more, page_no = len(chosen) > PAGE_SIZE, 1
    order = (f"{VIEWS[view].lower()} " + (f"in {month_filter}" if by_month else "over all months")
             + (f", badput: {category.replace('_', ' ')}" + (" (the most of it first)" if view == "wasted" else "")
                if category else "") + f", top {PAGE_SIZE}")
else:
    if "runs_page" not in st.session_state:
        page_text = st.query_params.get("page") or "1"
        st.session_state["runs_page"] = int(page_text) if page_text.isdigit() and 0 < int(page_text) < 10**6 else 1
    page_no = st.columns(5)[0].number_input("Page", min_value=1, step=1, key="runs_page")
    rows = data.runs(url, **filters, limit=PAGE_SIZE + 1, offset=(page_no - 1) * PAGE_SIZE, scope=project_scope)
    more = len(rows) > PAGE_SIZE
    rows = [{**r, **month_figures(lines.get(r["id"]))} for r in rows[:PAGE_SIZE]]
    order = "newest first"

# the URL carries every filter, the order and the page: a copied link reopens the same rows
shared = {"scope": None if scope == "month" else scope, **{k: None if v == ALL else v for k, v in picked.items()},
          "order": None if view == "newest" else view, "page": None if page_no == 1 else str(page_no)}
for k, v in shared.items():
    if v is None and k in st.query_params:
        del st.query_params[k]
    elif v is not None and st.query_params.get(k) != v:
        st.query_params[k] = v

if not rows:
    ui.empty("No runs match these filters." if page_no == 1 else "No more runs: go back a page.")
else:
    st.caption(f"Runs {(page_no - 1) * PAGE_SIZE + 1}–{(page_no - 1) * PAGE_SIZE + len(rows)}, {order}"
               + (" · more on the next page" if more and order == "newest first" else "")
               + ". Node-hours are each run's whole duration; GPU-hours, cost, cost per 1M tokens and waste are "
               + (f"its part of {month_filter}, as `trainledger report monthly` (waste: the run's badput, the "
                  "export's badput_cost; reason: its largest badput category)." if by_month else
                  "over all its months: its monthly lines summed (waste: Σ its badput; reason: its largest badput "
                  "category over them).") + " Times in " + ui.md(ui.display_tz().key) + ".")
    shown_category = category  # the drill-down's figure, beside each run
    st.dataframe(runs_table(rows, shown_category), hide_index=True, key="runs_table",
                 column_config={**COLUMN_CONFIG, **({f"{category.replace('_', ' ')} ({currency})":
                                                     st.column_config.NumberColumn(format="%,.2f")}
                                                    if shown_category else {})},
                 placeholder="")  # no value: an empty cell, never "None"

compare_view.section(url, currency, [r["id"] for r in rows], {r["id"]: r["name"] for r in rows}, project_scope)

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
if st.query_params.get("run") != run_id and (wanted is not None or run_id != ids[0]):
    st.query_params["run"] = run_id  # a run picked here is in the URL: a copied link opens the same run
try:
    d = data.run_detail(url, run_id, currency, project_scope)  # out of scope: the unknown run's error, word for word
except LedgerInputError as exc:
    st.error(ui.error_line(exc))
    st.stop()
currency = d["currency"] or currency

md = ui.md
st.subheader(f"{md(d['id'])} · {md(d['name'])}" if d["name"] else md(d["id"]))
st.caption(f"{md(d['status'])} · project {md(d['project'] or ui.DASH)} · user {md(d['user'] or ui.DASH)} · "
           f"{md(d['node_type'] or 'no node type')}: {d['nodes']} nodes × {d['gpus_per_node']} GPUs · strategy {md(d['strategy'] or ui.DASH)}"
           + (f" (dp {d['dp']}, tp {d['tp']}, pp {d['pp']}, ZeRO-{d['zero_stage']})" if d.get("dp") else "")
           + (f" · sweep {md(d['sweep_id'])}" if d.get("sweep_id") else ""))
if d.get("error"):
    st.error(f"Error: {md(d['error'], 1000)}")
if d.get("not_costed"):
    st.warning(f"Not costed: {md(d['not_costed'])}. Its node-hours are in no cost figure.")
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
                                       "lost_work_cost"], {"cost": ui.column("run_cost", currency)}, currency=currency),
                 hide_index=True)

c = st.columns(4) + st.columns(4)  # two rows: at 1280 px a card holds "20,131,350,411.92" whole
c[0].metric(ui.card("run_cost", currency), ui.money("cost_actual", d["cost_actual"]), border=True,
            delta="provisional" if d.get("finality") == "provisional" else None, delta_color="off",
            help="What the run cost under its own offer at the prices in force when it ran, summed over its months "
                 "(owned fleets allocated by node-hours). " + PROVISIONAL_HELP)
co2_label = ui.card("co2e_kg") + (", estimated" if d["co2e_basis"] in ("estimated", "mixed") else "")
c[7].metric(co2_label, ui.number("co2e_kg", d["co2e_kg"]), border=True,
            help=f"{ui.number('energy_kwh', d['energy_kwh'])} kWh ({d['co2e_basis'] or 'no'} energy: measured where "
                 "collected, else the node type's nominal power × node-hours) × grid intensity "
                 f"{', '.join(str(g) for g in d['carbon_intensity_g_per_kwh'])} gCO2e/kWh"
                 + (" — the default intensity, an assumption" if d["carbon_intensity_assumed"] else "") + ".")
c[4].metric(ui.card("node_hours"), ui.number("node_hours", d["node_hours"]), border=True, help=ui.help_of("node_hours"))
c[1].metric(ui.card("lost_work_cost", currency), ui.money("lost_work_cost", d.get("lost_work_cost")) if d.get("lost_work_cost")
            is not None else ui.money("lost_work_cost", 0), border=True,
            help="The badput category lost_work (part of the run's waste): work since its last checkpoint (or since "
                 "its start) lost when it failed, crashed or was cancelled; nothing for a run that succeeded or still runs.")
c[2].metric(ui.card("gpu_hours"), ui.number("gpu_hours", d["gpu_hours"]), border=True, help=ui.help_of("gpu_hours"))
c[3].metric(ui.card("cost_per_1m_tokens", currency), ui.money("cost_per_1m_tokens", d["cost_per_1m_tokens"]), border=True)
c[5].metric(ui.gpu_util_label(d.get("util_source")), ui.pct(d.get("gpu_util_mean")), border=True,
            help=ui.GPU_UTIL_HELP + (f" p95: {ui.pct(d.get('gpu_util_p95'))}." if d.get("gpu_util_p95") is not None else ""))
c[6].metric(ui.MFU, ui.mfu_text(d.get("mfu"), [d.get("util_source")]), border=True, help=ui.MFU_HELP)

kinds = {u["offer"]: u["kind"] for u in d["cost_under_offers"]}
used = list(dict.fromkeys(m["offer"] for m in d["cost_by_month"]))
actual_kind = kinds.get(used[0]) if used else None
st.caption(md(explain.costed_under(used, actual_kind, d.get("offer_id") is not None)))
left, right = st.columns(2)
with left:
    st.markdown("**Cost under every offer** (what-if, at today's list prices)")
    under = [{**u, "why": explain.differs(u["kind"], actual_kind)} for u in d["cost_under_offers"]]
    if under:
        st.dataframe(ui.frame(under, ["offer", "kind", "cost", "why"], {"why": "why it differs from the actual cost",
                                                                        "cost": ui.column("run_cost", currency)}),
                     hide_index=True)
        st.bar_chart(pd.DataFrame([{"offer": u["offer"], "cost": float(u["cost"])} for u in under]),
                     x="offer", y="cost", y_label=currency, height=250)
with right:
    st.markdown("**Cost by month (actual)**")
    if d["cost_by_month"]:
        st.dataframe(ui.frame(d["cost_by_month"], ["month", "node_hours", "cost", "offer", "energy_kwh", "co2e_kg",
                                                   "co2e_basis"],
                              {"co2e_basis": "energy basis", "cost": ui.column("run_cost", currency)}),
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
                          {"gpu_util_mean": util_label, "gpu_util_p95": f"{short} p95"}),
                 hide_index=True)
    util = pd.DataFrame([{"node": n["hostname"], f"{short} %": (n["gpu_util_mean"] or 0) * 100,
                          "flag": "straggler" if n.get("straggler") else "ok"} for n in nodes])
    st.bar_chart(util, x="node", y=f"{short} %", color="flag", height=300)

util_view.run_section(url, d["id"], project_scope)  # issue 39 item 3
goodput_view.phase_timeline(url, d["id"], project_scope)  # issue #25

st.markdown("**Loss**")
loss = data.loss_curve(url, d["id"], project_scope)
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
