"""The Export page's chargeback statements: what ``trainledger report chargeback --month M`` writes, as downloads.

One table (a line per project: runs, GPU-hours, runs' cost, share of idle, total; then idle not charged back
and the month's spend, which the lines add up to) and, for the project picked, its statement as XLSX and as a
printable HTML page, plus the summary CSV. The bytes are ``trainledger.reports.chargeback.files``: the CLI's,
made when a download is clicked (the page reads only the presented statements).
"""

from __future__ import annotations

from decimal import Decimal
from functools import partial
from typing import Any, Callable, Optional

import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import ui

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


@data.cached()
def statements(url: str, month: str, currency: Optional[str] = None) -> dict[str, Any]:
    """``{"presented": presented(chargeback(month))}``, as the CLI presents it: the month's presented lines
    (``data.month_lines``: ``chargeback`` is ``from_charges`` of the month's ``month_charges``, stored with the
    export's lines once the month is over); its error, when it cannot be made, raised again. The files are made when
    a download is clicked (:func:`statement_files`)."""
    from trainledger.errors import LedgerInputError

    lines = data.month_lines(url, month, currency)
    if lines.chargeback is None:
        raise LedgerInputError(lines.chargeback_error)
    return {"presented": lines.chargeback}


@data.cached()
def statement_files(url: str, month: str, project: str, currency: Optional[str] = None) -> dict[str, bytes]:
    """``project``'s statement as XLSX and HTML and the month's summary CSV: ``trainledger.reports.chargeback.files``
    for that project, the bytes ``trainledger report chargeback --month M -o DIR`` writes."""
    from trainledger.reports.chargeback import files

    return files(statements(url, month, currency)["presented"], project)


def summary_file(url: str, month: str, currency: Optional[str] = None) -> bytes:
    """The month's summary CSV, as :func:`trainledger.reports.chargeback.files` writes it (team scope)."""
    from trainledger.reports.chargeback import summary_csv

    return summary_csv(statements(url, month, currency)["presented"]).encode("utf-8")


@data.cached()
def scoped_statements(url: str, month: str, scope: tuple[str, ...], currency: Optional[str] = None) -> dict[str, Any]:
    """:func:`statements` for a project-scoped user: the statements of the scope's projects only (the summary
    without the month's spend and idle); their files: :func:`scoped_statement_files`."""
    p = statements(url, month, currency)["presented"]
    mine = [x for x in p["statements"] if data.in_scope(x["project"], scope)]
    summary = {k: p["summary"][k] for k in ("month", "currency", "timezone", "period") if k in p["summary"]}
    return {"presented": {"summary": summary, "statements": mine}}


@data.cached()
def scoped_statement_files(url: str, month: str, scope: tuple[str, ...], project: str,
                           currency: Optional[str] = None) -> dict[str, bytes]:
    """A scoped user's statement of ``project`` (one of the scope's) as XLSX and HTML (the HTML's note without the
    month's spend), no summary CSV (it holds every project and the team's idle)."""
    from trainledger.reports.chargeback import file_stem, to_html, to_xlsx

    if not data.in_scope(project, scope):
        raise KeyError(project)
    p = statements(url, month, currency)["presented"]
    files, taken = {}, set()
    for x in p["statements"]:
        if not data.in_scope(x["project"], scope):
            continue
        stem = file_stem(month, x["project"], taken)
        if x["project"] == project:
            files[f"{stem}.xlsx"] = to_xlsx(p["summary"], x)
            files[f"{stem}.html"] = to_html(p["summary"], x, team=False).encode("utf-8")
    return files


def scoped_section(url: str, month: str, currency: Optional[str], scope: tuple[str, ...]) -> None:
    """The chargeback statements of a project-scoped user's projects: their lines (no idle, no spend) and downloads."""
    from trainledger.errors import LedgerInputError
    from trainledger.reports.chargeback import summary_rows

    st.subheader("Chargeback statements")
    try:
        cb = scoped_statements(url, month, scope, currency)
    except LedgerInputError as exc:
        st.info(str(exc))
        return
    p = cb["presented"]
    cur = p["summary"]["currency"]
    st.caption(f"The statements of your projects: their runs and their share of idle. Same statements as `trainledger "
               f"report chargeback --month {month} --currency {ui.md(cur)} -o DIR` writes for them; the month's idle "
               "not charged back and its spend are team totals (team scope).")
    if not p["statements"]:
        st.caption("None of your projects has a statement this month.")
        return
    rows = [r for r in summary_rows({**p, "summary": {"idle_not_charged_back": None, "spend": None}})
            if r["statement"] in {x["project"] for x in p["statements"]}]
    keys = ["statement", "runs", "gpu_hours", "run_cost", "idle_share_cost", "total_cost", "lost_work_cost"]
    labels = {"statement": "statement", "runs": "runs", "gpu_hours": "GPU-hours", "run_cost": f"runs ({cur})",
              "idle_share_cost": f"share of idle ({cur})", "total_cost": f"total ({cur})",
              "lost_work_cost": f"of which lost work ({cur})"}
    rows = [{**r, "idle_share_cost": r["idle_share"], "total_cost": r["total"],
             "gpu_hours": None if r["gpu_hours"] is None else f"{Decimal(str(r['gpu_hours'])):,.3f}"} for r in rows]
    st.dataframe(ui.frame(rows, keys, labels, currency=cur), hide_index=True, key="chargeback_table",
                 column_config={labels[k]: st.column_config.TextColumn(labels[k]) for k in keys})
    _statement_downloads(partial(scoped_statement_files, url, month, scope, currency=currency), month,
                         [x["project"] for x in p["statements"]])


def chargeback_section(url: str, month: str, currency: Optional[str], scope: data.Scope = None) -> None:
    from trainledger.errors import LedgerInputError
    from trainledger.money.allocation.idle_share import NO_PROJECT
    from trainledger.reports.chargeback import summary_rows

    if scope is not None:
        scoped_section(url, month, currency, scope)
        return
    st.subheader("Chargeback statements")
    try:
        cb = statements(url, month, currency)
    except LedgerInputError as exc:
        st.info(str(exc))
        return
    p = cb["presented"]
    s = p["summary"]
    st.caption(f"One statement per project: its runs (GPU-hours, cost, lost work) and its share of idle under each "
               f"fleet's policy (`trainledger fleet set NAME --idle-share proportional`; the default, none, keeps idle "
               f"its own line). The statements plus idle not charged back ({ui.money('cost', s['idle_not_charged_back'])}) "
               f"add up to the month's spend ({ui.money('cost', s['spend'])} {s['currency']}) to the cent. Same files as `trainledger report chargeback "
               f"--month {month} --currency {s['currency']} -o DIR`.")
    # the summary CSV's rows, each cell as the figure shows everywhere (money "2,088.14", GPU-hours grouped, an
    # empty cell never "None"); the share of idle under a money key (``idle_share`` alone names a policy elsewhere)
    cur = s["currency"]
    keys = ["statement", "runs", "gpu_hours", "run_cost", "idle_share_cost", "total_cost", "lost_work_cost"]
    labels = {"statement": "statement", "runs": "runs", "gpu_hours": "GPU-hours", "run_cost": f"runs ({cur})",
              "idle_share_cost": f"share of idle ({cur})", "total_cost": f"total ({cur})",
              "lost_work_cost": f"of which lost work ({cur})"}
    rows = [{**r, "idle_share_cost": r["idle_share"], "total_cost": r["total"],  # GPU-hours to 3 decimals, as exported
             "gpu_hours": None if r["gpu_hours"] is None else f"{Decimal(str(r['gpu_hours'])):,.3f}"}
            for r in summary_rows(p)]
    st.dataframe(ui.frame(rows, keys, labels, currency=cur), hide_index=True, key="chargeback_table",
                 column_config={labels[k]: st.column_config.TextColumn(labels[k]) for k in keys})
    policies = s.get("idle_share_policies") or []
    st.caption("Idle charged back under: " + ("; ".join(ui.md(x) for x in policies) if policies else
                                              "no fixed-cost fleet this month") + ". Set a fleet's policy under "
               "Settings → Fleet (leads).")
    if not p["statements"]:
        st.caption("No project to charge this month.")
        return
    names = [st_["project"] for st_ in p["statements"]]
    linked = [n for n in names if n != NO_PROJECT]  # runs without a project have no project filter to open
    cols = st.columns(min(len(linked), 4)) if linked else []
    for i, name in enumerate(linked):  # each statement's runs, on Runs (the project filter, the month)
        ui.runs_link(f"Runs of {ui.md(name)}", where=cols[i % len(cols)], project=name, month=month)
    files_of = partial(statement_files, url, month, currency=currency)
    c = _statement_downloads(files_of, month, names)
    summary = f"{month}-chargeback-summary.csv"
    c[2].download_button("Summary CSV", partial(summary_file, url, month, currency), file_name=summary,
                         mime="text/csv", key="chargeback_csv", icon=":material/download:", on_click="ignore")


def _statement_downloads(files_of: Callable[[str], dict[str, bytes]], month: str, names: list[str]) -> list:
    """The statement picker and its XLSX and HTML downloads; returns the row of three columns (the third is free).
    ``files_of(project)``: the project's files by name; called when a download is clicked (Streamlit's deferred
    download), in the session that drew the button: a statement takes seconds to render on a busy month."""
    project = st.selectbox("Statement of", names, key="chargeback_project")
    stem = _stem(month, names, project)
    c = st.columns(3)
    c[0].download_button("Statement XLSX", partial(_file, files_of, project, f"{stem}.xlsx"), file_name=f"{stem}.xlsx",
                         mime=XLSX, key="chargeback_xlsx", icon=":material/download:", on_click="ignore")
    c[1].download_button("Statement HTML (printable)", partial(_file, files_of, project, f"{stem}.html"),
                         file_name=f"{stem}.html", mime="text/html", key="chargeback_html",
                         icon=":material/download:", on_click="ignore")
    return c


def _file(files_of: Callable[[str], dict[str, bytes]], project: str, name: str) -> bytes:
    """One file of ``project``'s (a deferred download's bytes)."""
    return files_of(project)[name]


def _stem(month: str, names: list[str], project: str) -> str:
    """The file stem of ``project``'s statement, as :func:`trainledger.reports.chargeback.files` named it."""
    from trainledger.reports.chargeback import file_stem

    taken: set[str] = set()
    for name in names:
        stem = file_stem(month, name, taken)
        if name == project:
            return stem
    raise KeyError(project)
