"""Presentation helpers shared by the pages.

Figures are formatted with ``trainledger.reports.present`` (``fmt_cell``/``present``), so
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
from decimal import Decimal
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

import altair as alt
import pandas as pd
import streamlit as st
from trainledger.errors import LedgerInputError
from trainledger.money.metrics.registry import BY_KEY
from trainledger.money.metrics.registry import help_text as help_of
from trainledger.money.metrics.registry import label as label_of
from trainledger.money.rates.months import check_month
from trainledger.reports.present import fmt_cell, kind_of, present
from trainledger.reports.present import when as present_when

#: the figures' labels and help come from the metrics layer (``trainledger.money.metrics``): every surface says what
#: the glossary (docs/METRICS.md) says; :func:`card` puts one on a metric card
TIME_UTIL = label_of("time_utilization")
GPU_UTIL = label_of("gpu_util_mean")
CPU_UTIL = "CPU utilization (process, CPU-only run)"
MFU = label_of("mfu_mean")
DASH = "—"

TIME_UTIL_HELP = help_of("time_utilization")
GPU_UTIL_HELP = help_of("gpu_util_mean")
MFU_HELP = help_of("mfu_mean") + " Model FLOPs per token: PaLM's 6N + 12·L·H·Q·T."


def card(key: str, currency: Optional[str] = None, summary: Optional[dict[str, Any]] = None, *,
         qualifier: str = "") -> str:
    """A figure's label from the metrics layer, with its currency and ", to date" while the month runs:
    ``card("spend", "CNY", s)`` → "Spend, to date (CNY)"; ``qualifier`` goes after the name ("Spend at month end
    (CNY)")."""
    head, paren, tail = label_of(key, md(currency) if currency else None).partition(" (")
    text = f"{head}{qualifier}{paren}{tail}"
    return to_date(text, summary) if summary is not None else text


#: how reserved capacity is priced everywhere (Planner, Rent vs own, the monthly report and its export):
#: ``trainledger.money.rates.costs.reserved_month_cost`` / ``reserved_term_cost``
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


def code(value: Any, limit: int = MD_LIMIT) -> str:
    """``value`` as a command-line argument inside a Markdown code span (`` `trainledger ... VALUE` ``): a code span
    shows its text as it is (a backslash escape would be seen), so the value is shell-quoted instead, on one line,
    at most ``limit`` characters, with no backtick (which would end the span)."""
    import shlex

    return shlex.quote(" ".join(str(value).split())[:limit].replace("`", "'"))


def error_line(exc: BaseException) -> str:
    """An exception's message as one escaped line for st.error (``LedgerInputError`` texts quote user input)."""
    return md(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def run_id_param(name: str = "run") -> Optional[str]:
    """``?run=ID`` if it is a valid run id (``trainledger.store.ids``), else None with a one-line warning."""
    from trainledger.store.ids import validate_run_id

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


ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def display_tz() -> ZoneInfo:
    """The ledger's display time zone (Settings → time zone), for times in tables."""
    from trainledger.app.queries import data

    return ZoneInfo(data.display_timezone_name(data.ledger_url()))


def when(value: Any, tz: Optional[ZoneInfo] = None) -> str:
    """A time as ``YYYY-MM-DD HH:MM`` in the display time zone (a naive time is UTC); "" when there is none.

    Takes a datetime or an ISO 8601 text ("2026-11-20T08:00:00.123456+00:00"); never shows seconds or microseconds
    (:func:`trainledger.reports.present.when`, without the zone's name: a page says its zone once).
    """
    return present_when(value, tz or display_tz(), zone=False)


def cell(key: str, value: Any, tz: Optional[ZoneInfo] = None) -> Any:
    """One table cell as people read it: money as the CLI shows it ("4,800.00"), ratios as percentages, times
    ``YYYY-MM-DD HH:MM`` in the display time zone (never seconds or microseconds), other numbers as numbers
    (a column still sorts by value), nothing for no value (never "None")."""
    k = kind_of(key)
    if k in ("money", "unit_price"):
        return money(key, value)
    if k == "ratio":
        return pct(value) if value is not None else ""
    if value is None:
        return ""
    if hasattr(value, "strftime") and hasattr(value, "hour") or (isinstance(value, str) and ISO_TIME.match(value)):
        return when(value, tz)
    v = present(key, value)
    return "" if v is None else v


def grouped(key: str, value: Any) -> str:
    """A count or quantity with thousands separators, as text: 1591158542649 → "1,591,158,542,649"."""
    if value is None or value == "":
        return ""
    v = present(key, value)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float) or isinstance(value, Decimal):
        return fmt_cell(key, value) if isinstance(v, float) else f"{Decimal(str(v)):,}"
    return str(v)


#: keys that name a figure only in context (a plan's cost, a project's cost, a run's cost): a table heads them itself
GENERIC_KEYS = frozenset({"cost", "total_cost"})


def column(key: str, currency: Optional[str] = None) -> str:
    """A figure's column header: its label from the metrics layer in sentence case ("node-hours", "idle cost (CNY)",
    "GPU-hours" keeps its capitals), money with ``currency``; a key that names no figure as it is."""
    if key not in BY_KEY or key in GENERIC_KEYS:
        return key
    text = label_of(key, md(currency) if currency else None)
    return text if text[1:2].isupper() or text[1:2].isdigit() else text[:1].lower() + text[1:]


#: the values :func:`cells` shows once per column (and floats): (type, value) decides the cell (1, 1.0 and True do
#: not share one)
_SAME_CELL = (str, int, bool, type(None))


def cells(rows: list[dict[str, Any]], columns: list[str], tz: Optional[ZoneInfo] = None) -> list[dict[str, Any]]:
    """:func:`cell` of each row's ``columns``: a column's text, count or empty value that recurs (a status, a project,
    an offer, "0.00") is shown once and reused; a table of thousands of runs has a few distinct values per column."""
    seen: dict[tuple, Any] = {}
    out = []
    for r in rows:
        d = {}
        for c in columns:
            v = r.get(c)
            t = type(v)
            if t in _SAME_CELL or t is float:  # a float zero keeps its sign apart (0.0 == -0.0)
                key = (c, t, v) if t is not float or v else (c, t, v, str(v))
                d[c] = seen[key] if key in seen else seen.setdefault(key, cell(c, v, tz))
            else:
                d[c] = cell(c, v, tz)
        out.append(d)
    return out


def frame(rows: list[dict[str, Any]], columns: list[str], labels: Optional[dict[str, str]] = None,
          currency: Optional[str] = None) -> pd.DataFrame:
    """A table for st.dataframe: every cell as :func:`cell` shows it (text, so "None" never appears). A column
    without a label in ``labels`` that is a figure is headed by :func:`column` (the metrics layer's label, money
    with ``currency``), never by its key."""
    labels = {c: column(c, currency) for c in columns} | (labels or {})
    tz = display_tz() if rows else None
    data = cells(rows, columns, tz)
    for c in columns:  # numbers with a gap: the column as text (Arrow takes no "" among numbers)
        values = [d[c] for d in data]
        if "" in values and any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            for d in data:
                d[c] = grouped(c, d[c]) if isinstance(d[c], (int, float)) else d[c]
    return pd.DataFrame([{labels.get(c, c): d[c] for c in columns} for d in data],
                        columns=[labels.get(c, c) for c in columns])


# --- month -------------------------------------------------------------------------

def valid_month(text: Optional[str]) -> Optional[str]:
    """``text`` if it is a month the ledger can report (``YYYY-MM``, years 1970 to 9998), else None."""
    try:
        return check_month(text or "")
    except LedgerInputError:
        return None


def checked_param(name: str, check, fallback: str) -> Optional[Any]:
    """``?NAME=`` through ``check(text, "?NAME=")`` (the ledger's own validation, which raises LedgerInputError);
    None when absent, or bad: then one line, "…; showing FALLBACK instead.", never an error page."""
    raw = st.query_params.get(name)
    if not raw:
        return None
    try:
        return check(raw, f"?{name}=")
    except LedgerInputError as exc:
        st.warning(f"{error_line(exc)}; showing {fallback} instead.")
        return None


def month_param() -> Optional[str]:
    """``?month=`` if it is a month the ledger can report; else None, with a one-line warning when one was given."""
    return checked_param("month", check_month, "the current month")


def month_picker(url: str) -> str:
    """The sidebar month selector of a page that reports a month.

    Starts from ?month=YYYY-MM (else this month; a bad value is a one-line
    warning, never an error page) and keeps its value across pages.
    """
    from trainledger.app.queries import data

    options = data.month_options(url)
    default = data.current_month(url)
    # the URL first (a link into the page names its month: Overview → Runs of a project), then the month kept
    current = month_param() or valid_month(st.session_state.get(MONTH_STATE)) or default
    if current not in options:
        options = sorted(set(options) | {current}, reverse=True)
    choice = st.sidebar.selectbox("Month", options, index=options.index(current), key="month_picker",
                                  help="A calendar month in the ledger's display time zone.")
    st.session_state[MONTH_STATE] = choice
    if st.query_params.get("month") != choice:
        st.query_params["month"] = choice
    return choice


# --- periods: a month, a quarter, a year to date, a date range (trainledger.money.rates.periods) ------------

PERIOD_STATE = "_period"  # the chosen period (kind and bounds), kept across pages
PERIOD_KEYS = ("period", "quarter", "year", "from", "to")  # its query parameters (a month: ?month= alone)


def _check_kind(text: str, flag: str) -> str:
    from trainledger.money.rates.periods import KINDS

    if text not in KINDS:
        raise LedgerInputError(f"{flag}: expected month, quarter, ytd or range, got {text!r}")
    return text


def period_picker(url: str) -> tuple[Any, str]:
    """The sidebar's Period (month, quarter, year to date, date range) of Overview, Monthly ROI and Export:
    ``(ReportPeriod, month)``, ``month`` being the month the page's monthly sections show (the period's last
    begun month). The URL carries it (``?period=quarter&quarter=2026-Q4``, ``?period=ytd&year=2026``,
    ``?period=range&from=2026-10-15&to=2026-11-20``; a month: ``?month=2026-11``); a bad value is one line
    and the month is shown instead. ``trainledger report period --from --to`` reports the same period."""
    from trainledger.app.queries import data
    from trainledger.money.rates import periods as P

    today = data.today(url)
    kept = st.session_state.get(PERIOD_STATE) or {}
    # the URL first (a shared link names its period), then the period kept across pages
    kind = checked_param("period", _check_kind, "a month") or kept.get("kind") or "month"
    kind = st.sidebar.selectbox("Period", list(P.KINDS), index=list(P.KINDS).index(kind), key="period_picker",
                                format_func=P.KIND_LABELS.get,
                                help="A calendar month, a quarter, the year to date or any range of days, in the "
                                     "ledger's display time zone. Headline figures show the change against the "
                                     "period before of the same length.")
    period, state = None, {"kind": kind}
    if kind == "quarter":
        options = sorted({P.quarter_of(P.month_first(m)) for m in data.month_options(url)}, reverse=True)
        current = checked_param("quarter", P.check_quarter, "the latest quarter") or kept.get("quarter") or options[0]
        options = sorted(set(options) | {current}, reverse=True)
        state["quarter"] = st.sidebar.selectbox("Quarter", options, index=options.index(current), key="quarter_picker")
        period = P.quarter_period(state["quarter"])
    elif kind == "ytd":
        options = sorted({int(m[:4]) for m in data.month_options(url)}, reverse=True)
        current = checked_param("year", P.check_year, "this year") or kept.get("year") or today.year
        options = sorted(set(options) | {current}, reverse=True)
        state["year"] = st.sidebar.selectbox("Year", options, index=options.index(current), key="year_picker")
        period = P.ytd_period(state["year"], today)
    elif kind == "range":
        period = _range_picker(kept, today, state)
    if period is None:  # a month, or a range that could not be read
        month = month_picker(url)
        state = {"kind": "month"}
        period = P.month_period(month)
    else:
        month = P.month_text(min(period.last, today)) if period.first <= today else P.month_text(period.first)
    st.session_state[PERIOD_STATE] = state
    _period_url(state)
    return period, month


def _range_picker(kept: dict, today, state: dict) -> Any:
    """Two dates (From, To; both included); None, after one line, when they do not make a range."""
    from trainledger.money.rates import periods as P

    first = checked_param("from", P.check_day, "a month") or kept.get("from")
    last = checked_param("to", P.check_day, "a month") or kept.get("to")
    last = last or today
    first = first or last.replace(day=1)
    lo, hi = P.month_first(f"{P.MONTH_YEARS[0]}-01"), P.month_last(f"{P.MONTH_YEARS[1]}-12")
    first = st.sidebar.date_input("From", value=first, min_value=lo, max_value=hi, key="range_from", format="YYYY-MM-DD")
    last = st.sidebar.date_input("To (included)", value=last, min_value=lo, max_value=hi, key="range_to",
                                 format="YYYY-MM-DD")
    try:
        period = P.range_period(first, last, ("From", "To"))
    except LedgerInputError as exc:
        st.warning(f"{error_line(exc)}; showing a month instead.")
        return None
    state.update({"from": first, "to": last})
    return period


def _period_url(state: dict) -> None:
    """The period into the URL: its own keys set, the other period keys removed."""
    want = {}
    if state["kind"] != "month":
        want["period"] = state["kind"]
        for key in ("quarter", "year", "from", "to"):
            if key in state:
                want[key] = str(state[key])
    for key in PERIOD_KEYS:
        if key in want and st.query_params.get(key) != want[key]:
            st.query_params[key] = want[key]
        elif key not in want and key in st.query_params:
            del st.query_params[key]


def change_text(report: dict[str, Any], key: str) -> Optional[str]:
    """A headline figure's delta from a period report (``trainledger.app.queries.data.period_report``): "+5.5% vs 2026-Q3", the
    percentage ``trainledger report period`` prints; None when there is nothing to compare with."""
    pct_ = (report.get("change") or {}).get(f"{key}_pct")
    if pct_ is None:
        return None
    return f"{pct_:+,.1f}% vs {md(report['previous']['period'])}"


# --- links into Runs ---------------------------------------------------------------------

#: the Runs page's query parameters (every filter, the order, the month and the page): app/pages/runs.py reads them
RUNS_PARAMS = ("month", "scope", "project", "user", "status", "strategy", "order", "waste", "goodput", "page", "run")


def runs_link(label: str, *, where: Any = None, icon: str = ":material/list:", help: Optional[str] = None,
              **filters: Any) -> dict[str, str]:
    """A link to Runs filtered by ``filters`` (``project=``, ``month=``, ``waste=``, ``goodput=``, ``order=``,
    any of :data:`RUNS_PARAMS`), drawn in ``where`` (a column, the sidebar; default: the page); returns the
    query parameters, so a chart or table selection can ``st.switch_page("pages/runs.py", query_params=...)``
    with the same ones. The one way pages link to a filtered list of runs."""
    unknown = set(filters) - set(RUNS_PARAMS)
    if unknown:
        raise TypeError(f"runs_link: unknown filter {sorted(unknown)}")
    params = {k: str(v) for k, v in filters.items() if v not in (None, "")}
    if label:
        (where or st).page_link("pages/runs.py", label=label, icon=icon, help=help, query_params=params)
    return params


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
    from trainledger.app.queries import data

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
