"""The trainledger dashboard: ``trainledger dashboard`` serves this script with Streamlit.

This entry script decides who may see what (app/access.py) and hands over to
the page (st.navigation, one module per page under app/pages/). To add a page
append a :class:`PageSpec` to :data:`SECTIONS`.

Every page also starts with ``access.page_gate()``: under a plain ``streamlit
run app/main.py`` Streamlit runs a file of a ``pages/`` folder next to the entry
script by itself (its older multipage mode) until the process first calls
``st.navigation``, so a page never relies on this script having run first.
(``trainledger dashboard`` switches that mode off: app/serve.py.)
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
from sqlalchemy.exc import OperationalError

from app import access, data
from app.auth import AuthFileError
from ledger.errors import LedgerInputError
from ledger.store.db import LedgerURLError, redact_url


@dataclass(frozen=True)
class PageSpec:
    path: str  # relative to this file
    title: str
    icon: str
    url_path: str


SECTIONS: dict[str, list[PageSpec]] = {
    "Costs": [
        PageSpec("pages/overview.py", "Overview", ":material/dashboard:", "overview"),
        PageSpec("pages/runs.py", "Runs", ":material/list:", "runs"),
        PageSpec("pages/rent_vs_own.py", "Rent vs own", ":material/balance:", "rent-vs-own"),
        PageSpec("pages/roi.py", "Monthly ROI", ":material/trending_up:", "roi"),
    ],
    "Training": [
        PageSpec("pages/strategies.py", "Strategies", ":material/compare_arrows:", "strategies"),
        PageSpec("pages/planner.py", "Planner", ":material/calculate:", "planner"),
        PageSpec("pages/launch.py", "Launch", ":material/rocket_launch:", "launch"),
    ],
    "Ledger": [
        PageSpec("pages/export.py", "Export", ":material/download:", "export"),
        PageSpec("pages/settings.py", "Settings", ":material/settings:", "settings"),
    ],
}


def _navigation():
    pages = {}
    first = True
    for section, specs in SECTIONS.items():
        pages[section] = []
        for spec in specs:
            pages[section].append(st.Page(spec.path, title=spec.title, icon=spec.icon, url_path=spec.url_path,
                                          default=first))
            first = False
    return st.navigation(pages)


def main() -> None:
    st.set_page_config(page_title="trainledger", page_icon=":material/payments:", layout="wide")
    try:
        if access.auth_file() is None and not access.server_is_loopback():
            st.navigation([st.Page(access.refusal_page, title="Not served")]).run()
            return
        ident = access.current_identity()
    except AuthFileError as exc:
        message = str(exc)
        st.navigation([st.Page(lambda: access.auth_error_page(message), title="Sign-in unusable")]).run()
        return
    if ident is None:
        st.navigation([st.Page(access.login_page, title="Sign in")]).run()
        return

    page = _navigation()
    url = ""
    try:
        url = data.ledger_url()
        if data.demo_ledger(url):
            st.sidebar.caption(":orange[Demo ledger]: runs `demo-*` are made up, not real usage; the `demo-sweep` "
                               "project's runs are real tiny runs on this machine.")
        access.sidebar_identity(ident)
        page.run()
    except (LedgerInputError, LedgerURLError) as exc:
        st.error(str(exc).splitlines()[0])
    except OperationalError as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        st.error(f"Cannot use the ledger at {redact_url(url)}: {reason}")


main()
