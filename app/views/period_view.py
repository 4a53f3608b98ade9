"""A period's headline figures on Overview, Monthly ROI and Export (``trainledger report period --from --to``).

Every figure is the presented period report (``trainledger.app.queries.data.period_report``: ``trainledger.reports.periods``), so a page
shows the CLI's numbers to the cent, and each headline figure's change against the period before of the same
length (``trainledger.money.rates.periods.previous``) as the metric's delta.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd
import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import ui

#: money up is worse: its delta is red when it grows
COST_KEYS = {"actual_cost", "idle_cost", "waste_cost", "own_cost", "elastic_cost", "co2e_kg"}
WHOLE_MONTHS_NOTE = ("Idle, waste, the alternatives, ROI, tokens and CO2e are reported for whole months only (the "
                     "daily report does not split them): pick a range from a month's first day to its last.")


WASTE_HELP = "Each whole month's badput + idle (its goodput account), summed."


def report(url: str, period: Any, currency: Optional[str]) -> dict[str, Any]:
    return data.period_report(url, period, currency)


def delta_color(key: str) -> str:
    return "inverse" if key in COST_KEYS else "normal"


def metric(col: Any, rep: dict[str, Any], key: str, label: str, value: str, help: Optional[str] = None) -> None:
    """One headline card: the period's figure and its change against the period before."""
    col.metric(label, value, delta=ui.change_text(rep, key), delta_color=delta_color(key), border=True, help=help)


def caption(rep: dict[str, Any], cur: str) -> None:
    """What the period is, what it is compared with, and the CLI command that prints the same figures."""
    span = f"{rep['from']} to {rep['to']}"
    label = rep["period"] if rep["period"] == span else f"{rep['period']} ({span})"
    prev = rep.get("previous")
    st.caption(f"{ui.md(label)}{', to date' if rep['is_partial'] else ''} in {ui.md(rep['timezone'])} · money in {cur}"
               + (f" · compared with {ui.md(prev['period'])}"
                  + ("" if prev["period"] == f"{prev['from']} to {prev['to']}" else f" ({prev['from']} to {prev['to']})")
                  if prev else "")
               + f" · the same figures as `trainledger report period --from {rep['from']} --to {rep['to']} "
               f"--currency {cur}`")
    if rep.get("previous_missing"):
        st.caption(f"No change shown: {ui.md(rep['previous_missing'])}.")
    if not rep["whole_months"]:
        st.caption(WHOLE_MONTHS_NOTE)


def overview_headline(rep: dict[str, Any], cur: str) -> None:
    """The Overview's cards for a quarter, a year to date or a date range."""
    s = rep["summary"]
    c = st.columns(5)
    metric(c[0], rep, "actual_cost", ui.card("spend", cur), ui.money("actual_cost", s["actual_cost"]),
           help="Whole months: the monthly reports' spend; days left over: the daily reports'.")
    metric(c[1], rep, "idle_cost", ui.card("idle_cost", cur), ui.money("idle_cost", s["idle_cost"]))
    metric(c[2], rep, "waste_cost", ui.card("waste_cost", cur), ui.money("waste_cost", s["waste_cost"]), help=WASTE_HELP)
    metric(c[3], rep, "own_cost", ui.card("own_cost", cur), ui.money("own_cost", s["own_cost"]))
    metric(c[4], rep, "elastic_cost", ui.card("elastic_cost", cur), ui.money("elastic_cost", s["elastic_cost"]))
    c = st.columns(4)
    metric(c[0], rep, "gpu_hours", ui.card("gpu_hours"), ui.number("gpu_hours", s["gpu_hours"]))
    metric(c[1], rep, "time_utilization", ui.TIME_UTIL, ui.pct(s["time_utilization"]), help=ui.TIME_UTIL_HELP)
    metric(c[2], rep, "gpu_util_mean", ui.GPU_UTIL, ui.pct(s["gpu_util_mean"]), help=ui.GPU_UTIL_HELP)
    metric(c[3], rep, "co2e_kg", ui.card("co2e_kg"), ui.number("co2e_kg", s["co2e_kg"]))


def roi_headline(rep: dict[str, Any], cur: str) -> None:
    """Monthly ROI's cards for a quarter, a year to date or a date range."""
    s = rep["summary"]
    c = st.columns(4)
    metric(c[0], rep, "actual_cost", ui.card("spend", cur), ui.money("actual_cost", s["actual_cost"]))
    metric(c[1], rep, "alternative_cost", ui.card("alternative_cost", cur), ui.money("alternative_cost", s["alternative_cost"]),
           help="Each month's alternative (elastic when the month was paid on a fleet, owning when elastic), summed.")
    metric(c[2], rep, "savings_vs_alternative", ui.card("savings_vs_alternative", cur),
           ui.money("savings_vs_alternative", s["savings_vs_alternative"]),
           help="Negative: the alternative would have been cheaper.")
    metric(c[3], rep, "roi", ui.card("roi"), ui.pct(s["roi"]), help="Σ savings ÷ Σ spend of the months with an alternative.")
    c = st.columns(3)
    metric(c[0], rep, "tokens", ui.card("tokens"), ui.DASH if s["tokens"] is None else f"{s['tokens']:,}")
    metric(c[1], rep, "waste_cost", ui.card("waste_cost", cur), ui.money("waste_cost", s["waste_cost"]), help=WASTE_HELP)
    metric(c[2], rep, "account_idle_cost", "of which " + ui.column("account_idle_cost", cur),
           ui.money("account_idle_cost", s.get("account_idle_cost")), help=ui.help_of("account_idle_cost"))


def by_month(rep: dict[str, Any], cur: str) -> None:
    """The period's whole months, one line each (each its monthly report)."""
    if rep["by_month"]:
        st.dataframe(ui.frame(rep["by_month"], ["month", "actual_cost", "idle_cost", "waste_cost", "gpu_hours"],
                              currency=cur),
                     hide_index=True, key="period_by_month")
    if rep.get("empty_months"):
        first, last = rep["empty_months"][0], rep["empty_months"][-1]
        st.caption(f"{first}{'' if first == last else ' to ' + last}: nothing recorded yet (no spend, no GPU-hours), "
                   "so not listed.")
    if rep["days"]:
        st.caption(f"Plus {len(rep['days'])} day{'s' if len(rep['days']) > 1 else ''} outside whole months "
                   f"({rep['days'][0]} … {rep['days'][-1]}), each from its daily report.")


def _text(key: str, value: Any) -> str:
    """A figure for a text table: money and ratios as :func:`ui.cell`, counts with thousands separators."""
    from trainledger.reports.present import kind_of

    return ui.cell(key, value) if kind_of(key) in ("money", "ratio") else ui.grouped(key, value)


PERIOD_FORMATS = {"csv": ("CSV", "text/csv"), "json": ("JSON", "application/json")}


def export_section(url: str, period: Any, currency: Optional[str]) -> None:
    """Export for a period: its totals, the period before and the changes, as CSV or JSON (byte for byte what
    ``trainledger report period --from F --to T --format csv|json`` writes), and the figures as a table."""
    from trainledger.reports.periods import FIGURES, period_csv, period_json
    from trainledger.reports.present import label

    rep = report(url, period, currency)
    cur = ui.md(rep["currency"])
    caption(rep, cur)
    c = st.columns(len(PERIOD_FORMATS))
    for col, (fmt, (title, mime)) in zip(c, PERIOD_FORMATS.items()):
        body = period_csv(rep) if fmt == "csv" else period_json(rep)
        col.download_button(f"Download {title}", body, file_name=f"trainledger-{period.first}-{period.last}.{fmt}",
                            mime=mime, key=f"period_export_{fmt}", type="primary" if fmt == "csv" else "secondary",
                            icon=":material/download:", on_click="ignore")
    st.caption(f"Same bytes as `trainledger report period --from {rep['from']} --to {rep['to']} --currency "
               f"{cur} --format csv` (or `--format json`). The monthly export (runs and projects) is per month: "
               "pick Month in Period.")
    prev = rep.get("previous")
    rows = [{"figure": label(k), "value": _text(k, rep["summary"][k]),
             "before": _text(k, prev["summary"][k]) if prev else "",
             "change": "" if rep["change"].get(f"{k}_pct") is None else f"{rep['change'][f'{k}_pct']:+,.1f}%"}
            for k in FIGURES]
    st.table(pd.DataFrame(rows).set_index("figure"))
    by_month(rep, cur)
