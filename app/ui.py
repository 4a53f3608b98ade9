"""Presentation helpers shared by the pages.

Figures are formatted with ``ledger.reports.present`` (``fmt_cell``/``present``), so
the dashboard shows the CLI's rounding ("4,800.00"). The three utilizations
always carry their own label; ratios are shown as percentages with the CLI's
four decimals (0.7319 → "73.19%").

**Text from the ledger or the user is Markdown-escaped.** Streamlit renders
Markdown in st.markdown, captions, titles and headers, alerts, metric and
widget labels and help texts; a run name such as ``![x](http://evil/b.png)``
would load an image in every viewer's browser, and ``[Session expired](http://evil)``
would be a link. Every such value (run ids and names, projects, users, host
names, offers, fleets, sweeps, strategies, error texts, query parameters)
goes through :func:`md` before it is put into Markdown. Tables (st.dataframe),
charts and select options are not Markdown and take the text as it is.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Iterable, Optional

import altair as alt
import pandas as pd
import streamlit as st

from ledger.errors import LedgerInputError
from ledger.money.months import check_month
from ledger.reports.present import fmt_cell, kind_of, present

TIME_UTIL = "Time utilization"
GPU_UTIL = "GPU-Util (NVML/DCGM busy share)"
CPU_UTIL = "CPU utilization (process, CPU-only run)"
MFU = "MFU"
DASH = "—"

TIME_UTIL_HELP = "Share of the fleet's node-hours spent in runs. Not GPU-Util, not MFU."
GPU_UTIL_HELP = "Share of time the GPUs were busy, as NVML/DCGM report it (weighted by GPU-hours). Not MFU."
MFU_HELP = "Model FLOPs utilization: achieved model FLOPs ÷ peak (PaLM: 6N + 12·L·H·Q·T per token). Null on CPU."

#: how reserved capacity is priced everywhere (Planner, Rent vs own, the monthly report and its export):
#: ``ledger.money.costs.reserved_month_cost`` / ``reserved_term_cost``
RESERVED_RULE = ("Reserved capacity is billed by whole committed months: nodes × monthly price for every month "
                 "begun (⌈hours ÷ 730⌉, at least one), used or not, as the monthly report bills it.")

#: page CSS (app/main.py injects it once for every page): metric values and labels wrap instead of being cut
#: off with an ellipsis, so "20,131,350,411.92" is read whole at 1280 px
PAGE_CSS = """<style>
[data-testid="stMetricValue"], [data-testid="stMetricValue"] *,
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] *,
[data-testid="stMetricDelta"], [data-testid="stMetricDelta"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
  overflow-wrap: break-word; height: auto !important;
}
[data-testid="stMetricValue"] { font-size: clamp(1.25rem, 1.7vw, 2.25rem); line-height: 1.2; }
[data-testid="stTable"] td, [data-testid="stTable"] th { white-space: normal; overflow-wrap: break-word; }
</style>"""

MONTH_STATE = "_month"  # the selected month, kept across pages
MD_LIMIT = 300  # characters of one value shown in Markdown
WORD_JOINER = "\u2060"
_AUTOLINK = re.compile(r"://|(?i:www)\.|@")  # what GFM turns into a link in plain text (a joiner goes before the last char)
_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


# --- text into Markdown ----------------------------------------------------------------

def md(value: Any, limit: int = MD_LIMIT) -> str:
    """``value`` as literal text inside Markdown: one line, at most ``limit`` characters.

    Every ASCII punctuation character is backslash-escaped (CommonMark), so no
    link, image, emphasis, HTML, heading, list, table, LaTeX (``$``) or Streamlit
    colour or icon directive (``:red[...]``, ``:material/x:``) can start in it.
    Bare URLs are linked by GFM *after* escapes are read (``http://``, ``www.``,
    ``user@host``), so a WORD JOINER (U+2060, invisible) goes into each ``://``,
    ``www.`` and ``@``: shown the same, linked never.
    """
    text = "" if value is None else str(value)
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    text = _AUTOLINK.sub(lambda m: m.group(0)[:-1] + WORD_JOINER + m.group(0)[-1], text)
    return "".join("\\" + c if c in _ASCII_PUNCT else c for c in text)


def error_line(exc: BaseException) -> str:
    """An exception's message as one escaped line for st.error (``LedgerInputError`` texts quote user input)."""
    return md(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def run_id_param(name: str = "run") -> Optional[str]:
    """``?run=ID`` if it is a valid run id (``ledger.store.ids``), else None with a one-line warning."""
    from ledger.store.ids import validate_run_id

    raw = st.query_params.get(name)
    if not raw:
        return None
    try:
        return validate_run_id(raw, f"?{name}=")
    except LedgerInputError as exc:
        st.warning(f"{error_line(exc)} (ignored)")
        return None
CURRENCY_STATE = "_currency"  # the presentation currency, kept across pages


# --- numbers -------------------------------------------------------------------

def money(key: str, value: Any) -> str:
    """Money as the CLI shows it: "4,800.00" ("—" when unknown)."""
    return fmt_cell(key, value)


def pct(value: Any) -> str:
    """A ratio (0–1) as a percentage with the CLI's 4-decimal rounding: 0.7319 → "73.19%"."""
    v = present("utilization", value)
    if v is None:
        return DASH
    return f"{float(v) * 100:.2f}%"


def number(key: str, value: Any) -> str:
    return fmt_cell(key, value)


def mfu_text(value: Any, util_sources: Iterable[Optional[str]] = (), has_runs: bool = True) -> str:
    """MFU as a percentage; "n/a (CPU)" for CPU-only runs, where MFU is null by design."""
    if value is not None:
        return pct(value)
    if not has_runs:
        return DASH
    if "cpu" in {s for s in util_sources if s}:
        return "n/a (CPU)"
    return "n/a (not recorded)"


def gpu_util_label(util_source: Optional[str]) -> str:
    return CPU_UTIL if util_source == "cpu" else GPU_UTIL


_COMPACT = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "k"))


def compact(value: Any) -> str:
    """A large count for a metric card: 20,131,350,411 → "20.1 B", 1,234,567 → "1.2 M", 12,345 → "12.3 k".

    Not for money (money keeps its cents, :func:`money`); below 1,000 the number as it is ("950", "12.5").
    """
    if value is None:
        return DASH
    v = float(value)
    for size, suffix in _COMPACT:
        if abs(v) >= size * 0.99995:  # 999,960 rounds to "1.0 M", never "1000.0 k"
            return f"{v / size:,.1f} {suffix}"
    return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"


def gib(n_bytes: Any) -> str:
    return DASH if n_bytes is None else f"{n_bytes / 2**30:,.1f} GiB"


def frame(rows: list[dict[str, Any]], columns: list[str], labels: Optional[dict[str, str]] = None) -> pd.DataFrame:
    """A table for st.dataframe: money as the CLI's text, ratios as percentages, other numbers as numbers."""
    labels = labels or {}
    data = []
    for r in rows:
        out = {}
        for c in columns:
            v = r.get(c)
            k = kind_of(c)
            if k == "money":
                out[labels.get(c, c)] = money(c, v)
            elif k == "ratio":
                out[labels.get(c, c)] = pct(v)
            elif hasattr(v, "strftime"):
                out[labels.get(c, c)] = fmt_cell(c, v)
            else:
                out[labels.get(c, c)] = present(c, v)
        data.append(out)
    return pd.DataFrame(data, columns=[labels.get(c, c) for c in columns])


# --- month -------------------------------------------------------------------------

def valid_month(text: Optional[str]) -> Optional[str]:
    """``text`` if it is a month the ledger can report (``YYYY-MM``, years 1970 to 9998), else None."""
    try:
        return check_month(text or "")
    except LedgerInputError:
        return None


def month_param() -> Optional[str]:
    """``?month=`` if it is a month the ledger can report; else None, with a one-line warning when one was given."""
    raw = st.query_params.get("month")
    if not raw:
        return None
    try:
        return check_month(raw, "?month=")
    except LedgerInputError as exc:
        st.warning(f"{error_line(exc)}; showing the current month instead.")
        return None


def month_picker(url: str) -> str:
    """The sidebar month selector of a page that reports a month.

    Starts from ?month=YYYY-MM (else this month; a bad value is a one-line
    warning, never an error page) and keeps its value across pages.
    """
    from app import data

    options = data.month_options(url)
    default = data.current_month(url)
    current = valid_month(st.session_state.get(MONTH_STATE)) or month_param() or default
    if current not in options:
        options = sorted(set(options) | {current}, reverse=True)
    choice = st.sidebar.selectbox("Month", options, index=options.index(current), key="month_picker",
                                  help="A calendar month in the ledger's display time zone.")
    st.session_state[MONTH_STATE] = choice
    if st.query_params.get("month") != choice:
        st.query_params["month"] = choice
    return choice


# --- a month to date -----------------------------------------------------------------

def period_text(month: str, summary: dict[str, Any]) -> str:
    """``2026-12 to date (3 of 31 days)`` for a month that has not ended (the report's own label), else ``2026-12``."""
    return f"{month} {summary['period']}" if summary.get("is_partial") else month


def to_date(label: str, summary: dict[str, Any]) -> str:
    """A metric's label, with ", to date" while the month runs: "Spend, to date (CNY)"."""
    if not summary.get("is_partial"):
        return label
    head, paren, tail = label.partition(" (")
    return f"{head}, to date{paren}{tail}"


def to_date_note(month: str, summary: dict[str, Any]) -> None:
    """Says plainly that a month has not ended and what its figures count (nothing for a month that has)."""
    if not summary.get("is_partial"):
        return
    end = summary["period_end"]
    end_text = fmt_cell("period_end", end if hasattr(end, "strftime") else datetime.fromisoformat(str(end)))
    st.info(f"**{period_text(month, summary)}**: {month} has not ended. Owned and reserved fleets, idle cost, "
            f"capacity and time utilization are counted to {end_text} UTC ({fmt_cell('elapsed_hours', summary['elapsed_hours'])} "
            f"of {fmt_cell('month_hours', summary['month_hours'])} hours), running runs up to now; nothing is charged "
            "for the days still to come.", icon=":material/schedule:")
def currency_picker(url: str) -> str:
    """The sidebar's presentation currency, shared by every page: what ``--currency`` is to the CLI.

    Starts from ?currency=XXX, else the Settings currency once set, else the offers' own; keeps its value
    across pages. Money in another currency than an offer's is converted at each charge period's rate.
    """
    from app import data

    c = data.currencies(url)
    options = c["options"]
    current = st.session_state.get(CURRENCY_STATE) or st.query_params.get("currency") or c["default"]
    if current not in options:
        current = c["default"]
    choice = st.sidebar.selectbox("Currency", options, index=options.index(current), key="currency_picker",
                                  help="Every figure on every page in this currency: other currencies are converted at "
                                       "the exchange rate of each charge period (Settings → Exchange rates).")
    st.session_state[CURRENCY_STATE] = choice
    if st.query_params.get("currency") != choice:
        st.query_params["currency"] = choice
    return choice


# --- charts ------------------------------------------------------------------------

MIN_CHART_HEIGHT = 250  # px: no chart is drawn lower
AXIS_FORMAT = ",~f"  # thousands separators, no trailing zeros: "25,920", "0.12"
LEGEND_LABEL_LIMIT = 600  # px: "rtx4090-reserved (rent_reserved)" whole, never "rtx4090-reserved (rent_r…"


def grouped_bars(df: pd.DataFrame, x: str, y: str, color: str, *, y_title: str, height: int = 280) -> alt.Chart:
    """Bars per ``x``, one per ``color``; ``y_title`` names the unit (the currency on a money axis)."""
    return (alt.Chart(df).mark_bar()
            .encode(x=alt.X(f"{x}:N", title=None, sort=None, axis=alt.Axis(labelAngle=0, labelLimit=200)),
                    xOffset=f"{color}:N", y=alt.Y(f"{y}:Q", title=y_title, axis=alt.Axis(format=AXIS_FORMAT)),
                    color=alt.Color(f"{color}:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=LEGEND_LABEL_LIMIT)),
                    tooltip=[x, color, alt.Tooltip(f"{y}:Q", format=",.2f")])
            .properties(height=max(height, MIN_CHART_HEIGHT)))


def lines(df: pd.DataFrame, x: str, y: str, color: str, *, x_title: str, y_title: str, x_type: str = "Q",
          y_format: str = ",.2f", height: int = 300) -> alt.Chart:
    return (alt.Chart(df).mark_line(point=len(df) < 60)
            .encode(x=alt.X(f"{x}:{x_type}", title=x_title, axis=alt.Axis(labelAngle=0)),
                    y=alt.Y(f"{y}:Q", title=y_title, axis=alt.Axis(format=AXIS_FORMAT)),
                    color=alt.Color(f"{color}:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=LEGEND_LABEL_LIMIT)),
                    tooltip=[alt.Tooltip(f"{x}:{x_type}"), color, alt.Tooltip(f"{y}:Q", format=y_format)])
            .properties(height=max(height, MIN_CHART_HEIGHT)))


def show_chart(chart: alt.Chart) -> None:
    st.altair_chart(chart, width="stretch")


def empty(message: str) -> None:
    st.info(message)
