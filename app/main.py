"""The trainledger dashboard: ``trainledger dashboard`` serves this script with Streamlit (through app/serving/asgi.py).

This entry script decides who may see what (app/views/access.py) and hands over to
the page (st.navigation, one module per page under app/pages/). To add a page
append a :class:`PageSpec` to :data:`SECTIONS`. Every page has a stable URL
(``/overview``, ``/runs?run=ID``, ...) that works as a deep link, signed in or
not (app/serving/signin.py brings a signed-out browser back to it after signing in).
An error a page does not handle is one line on the page; its traceback goes to
the dashboard's log, never to the browser.

Every page also starts with ``access.page_gate()``: under a plain ``streamlit
run app/main.py`` Streamlit runs a file of a ``pages/`` folder next to the entry
script by itself (its older multipage mode) until the process first calls
``st.navigation``, so a page never relies on this script having run first.
(``trainledger dashboard`` switches that mode off: app/serving/serve.py.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import streamlit as st
from sqlalchemy.exc import OperationalError
from trainledger.app.queries import data
from trainledger.app.serving.auth import AuthFileError
from trainledger.app.views import access, ui
from trainledger.errors import LedgerInputError
from trainledger.store.db import LedgerURLError, redact_url


@dataclass(frozen=True)
class PageSpec:
    path: str  # relative to this file
    title: str
    icon: str
    url_path: str


log = logging.getLogger("trainledger.dashboard")

SECTIONS: dict[str, list[PageSpec]] = {
    "Costs": [
        PageSpec("pages/overview.py", "Overview", ":material/dashboard:", "overview"),
        PageSpec("pages/runs.py", "Runs", ":material/list:", "runs"),
        PageSpec("pages/rent_vs_own.py", "Rent vs own", ":material/balance:", "rent-vs-own"),
        PageSpec("pages/roi.py", "Monthly ROI", ":material/trending_up:", "roi"),
        PageSpec("pages/goodput.py", "Goodput", ":material/target:", "goodput"),
    ],
    "Training": [
        PageSpec("pages/strategies.py", "Strategies", ":material/compare_arrows:", "strategies"),
        PageSpec("pages/planner.py", "Planner", ":material/calculate:", "planner"),
        PageSpec("pages/launch.py", "Launch", ":material/rocket_launch:", "launch"),
    ],
    "Ledger": [
        PageSpec("pages/export.py", "Export", ":material/download:", "export"),
        PageSpec("pages/invoices.py", "Invoices", ":material/receipt_long:", "invoices"),
        PageSpec("pages/settings.py", "Settings", ":material/settings:", "settings"),
    ],
}


def _home() -> None:
    """``/``: the Overview, under its own URL (``/overview``), with the query parameters kept."""
    st.switch_page(_PAGES["overview"], query_params=st.query_params.to_dict())


_PAGES: dict = {}  # url path -> st.Page of this run


def _navigation():
    """Every page under its stable URL (``/overview``, ``/runs``, ...); ``/`` opens the Overview.

    A browser that is not signed in gets the same URLs (so a deep link never
    says "Page not found"), but the sign-in prompt instead of the page.
    """
    pages = {}
    _PAGES.clear()
    for section, specs in SECTIONS.items():
        pages[section] = []
        for spec in specs:
            page = st.Page(spec.path, title=spec.title, icon=spec.icon, url_path=spec.url_path)
            _PAGES[spec.url_path] = page
            pages[section].append(page)
    home = st.Page(_home, title="Overview", url_path="home", default=True, visibility="hidden")
    return st.navigation({"": [home], **pages})


def _gate() -> Optional[access.Identity]:
    """The identity, or None after a page (refusal, sign-in unusable, sign-in prompt) has been served."""
    try:
        if not access.signin_configured() and not (access.server_is_loopback() and access.request_is_local()):
            st.navigation([st.Page(access.refusal_page, title="Not served")]).run()
            return None
        ident = access.current_identity()
    except AuthFileError as exc:
        message = str(exc)
        st.navigation([st.Page(lambda: access.auth_error_page(message), title="Sign-in unusable")]).run()
        return None
    if ident is None:  # every URL stays valid (no "Page not found"); none of the pages runs
        page = _navigation()
        access.signin_prompt(f"/{page.url_path}" if page.url_path else "/")
        return None
    return ident


def main() -> None:
    data.start_run()  # one clock for every figure of this run (app/queries/data.py)
    # an emoji icon is drawn in the browser; a :material/...: one would be fetched from fonts.gstatic.com
    st.set_page_config(page_title="trainledger", page_icon="💰", layout="wide")
    st.html(ui.PAGE_CSS)  # every page: metric values and labels wrap, never cut off with "…"
    ident = _gate()
    if ident is None:
        return
    page = _navigation()
    url = ""
    try:
        url = data.ledger_url()
        if data.demo_ledger(url):
            st.sidebar.caption(":orange[Demo ledger]: runs `demo-*` are made up, not real usage"
                               + ("; the `demo-sweep` project's runs are real tiny runs on this machine." if ident.may_see(
                                   "demo-sweep") else "."))
        access.sidebar_identity(ident)
        page.run()
    except (LedgerInputError, LedgerURLError) as exc:
        st.error(ui.error_line(exc))
    except OperationalError as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        st.error(f"Cannot use the ledger at {ui.md(redact_url(url))}: {ui.md(reason)}")
    except Exception as exc:  # never a traceback in a browser: one line here, the details in the server's log
        log.exception("page %s failed", getattr(page, "url_path", "?"))
        st.error(f"This page failed ({type(exc).__name__}); the details are in the dashboard's log.")


main()
