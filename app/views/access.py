"""Who is using the dashboard, and what they may do (SPEC §8).

* With an auth file (``TRAINLEDGER_AUTH_FILE``, set by ``trainledger dashboard
  --auth-file``) every browser signs in through the HTTP form of app/serving/signin.py,
  which sets a session cookie (app/serving/sessions.py). Every script run reads the
  cookie sent with the app's WebSocket and checks the session against the
  ledger and the auth file: an expired session, a removed user or a changed
  password signs the browser out; the role is the auth file's, read again
  when it changes. Viewers read, leads may also edit prices, fleet and
  settings, and launch and cancel runs.
* Without one, the dashboard serves loopback only, and everyone there is a
  lead (local use), but only when the request names a loopback host (``Host:
  localhost`` or ``127.0.0.1``) and came through no proxy (no ``Forwarded`` /
  ``X-Forwarded-*`` header): app/serving/guard.py refuses other hosts before the app
  runs, and this module checks again. A server bound elsewhere without an auth
  file serves nothing.

A browser is signed in by its cookie alone; only a session without an HTTP
request behind it (AppTest) reads a token from ``st.session_state`` (under a
key no widget uses). Forms that write are drawn disabled for viewers
(Streamlit discards a disabled widget's input on the server), and pages call
:func:`require_lead` (:func:`lead_writer`) right before they write, so a forged click from a viewer
changes nothing: hiding or disabling a button is not the only check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import quote, urlencode

import streamlit as st
from trainledger.app.serving import sessions
from trainledger.app.serving.auth import WRITE_ROLES, AuthFileError, users_file
from trainledger.app.serving.cli import AUTH_ENV, is_loopback
from trainledger.app.serving.guard import is_loopback_name, split_host
from trainledger.app.serving.signin import SIGNIN_PATH, safe_next
from trainledger.store.audit import Actor, os_user

TOKEN_KEY = "_trainledger_session_token"  # read only without an HTTP request (AppTest); written by tests
SIGNED_OUT_KEY = "_trainledger_signed_out"
IDENTITY_KEY = "_trainledger_identity"  # no longer read: a value put here grants nothing
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip")


@dataclass(frozen=True)
class Identity:
    user: str
    role: str  # viewer | lead | admin
    signed_in: bool  # False: local use without an auth file
    projects: Optional[frozenset[str]] = None  # the projects this user may see; None: every project (team scope)
    source: str = "file"  # signed in with: "file" (the users file) | "oidc" (an OpenID provider)

    @property
    def is_lead(self) -> bool:
        """May write (prices, budgets, fleet, settings, runs): a lead or an admin."""
        return self.role in WRITE_ROLES

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def team_scope(self) -> bool:
        """Sees every project and the team's totals (no project scope)."""
        return self.projects is None

    def may_see(self, project: Optional[str]) -> bool:
        """Whether a run or figure of ``project`` may be shown to this user."""
        return self.projects is None or (project is not None and project in self.projects)


LOCAL_LEAD = Identity(user="local", role="lead", signed_in=False)

#: what a project-scoped user reads where a page or a section holds team totals (docs/SCOPES.md)
TEAM_SCOPE_NOTE = "Team totals need team scope: you see the projects you are scoped to ({projects})."


def scope_of(ident: Identity) -> Optional[tuple[str, ...]]:
    """The user's projects as the cached reads take them (sorted, hashable: part of every cache key), None: team scope.

    Every read of ``trainledger.app.queries.data`` that returns project data takes it as ``scope=``, so the rows
    outside it are never read into the page, and one user's cached frame never serves another's."""
    return None if ident.projects is None else tuple(sorted(ident.projects))


def team_note(ident: Identity) -> None:
    """The note shown to a project-scoped user in place of team totals."""
    from trainledger.app.views.ui import md

    st.info(TEAM_SCOPE_NOTE.format(projects=", ".join(md(p) for p in sorted(ident.projects or ()))))


def team_only(ident: Identity, page: str) -> None:
    """A page of team totals: for a project-scoped user, its title and the note, and nothing else (st.stop)."""
    if ident.team_scope:
        return
    st.title(page)
    team_note(ident)
    st.stop()


def auth_file() -> Optional[Path]:
    value = os.environ.get(AUTH_ENV)
    return Path(value) if value else None


def users() -> dict:
    """The auth file's users (re-read when the file changes; none without one); AuthFileError if unusable."""
    return users_file(str(auth_file())).users() if auth_file() is not None else {}


def signin_configured() -> bool:
    """Sign-in is on: an auth file (``--auth-file``), an OpenID Connect configuration (``--oidc-config``), or both."""
    from trainledger.app.serving.oidc import config_path

    return auth_file() is not None or config_path() is not None


def server_is_loopback() -> bool:
    return is_loopback(st.get_option("server.address"))


def request_is_local() -> bool:
    """The app's WebSocket named a loopback host and came through no proxy (True without request headers: tests)."""
    headers = st.context.headers
    host = headers.get("host")
    if not isinstance(host, str):  # no HTTP request behind this session: AppTest
        return not any(isinstance(headers.get(h), str) for h in PROXY_HEADERS)
    if any(headers.get(h) for h in PROXY_HEADERS):
        return False
    return is_loopback_name(split_host(host))


def session_token() -> Optional[str]:
    """The session cookie sent with the app's WebSocket.

    Only a session with no HTTP request behind it (AppTest, which cannot send
    cookies) uses the token kept in ``st.session_state`` instead: a browser is
    signed in by its cookie alone, so a reattached Streamlit session carries
    no sign-in of its own.
    """
    if isinstance(st.context.headers.get("host"), str):
        cookie = st.context.cookies.get(sessions.cookie_name(st.get_option("server.port")))
        return cookie if isinstance(cookie, str) and cookie else None
    kept = st.session_state.get(TOKEN_KEY)
    return kept if isinstance(kept, str) else None


def current_identity() -> Optional[Identity]:
    """The signed-in identity, a local lead, or None.

    A users-file user's role and projects are the auth file's now; an OIDC user's those mapped from the provider's
    claims at sign-in (while the OIDC configuration is unchanged)."""
    if not signin_configured():
        return LOCAL_LEAD if server_is_loopback() and request_is_local() else None
    from trainledger.app.queries.data import ledger_url
    from trainledger.app.serving.oidc import current_settings

    token = session_token()
    settings = current_settings() if token else None
    who = sessions.resolve(ledger_url(), token, users(), settings.fingerprint if settings else None) if token else None
    if who is None:
        st.session_state.pop(TOKEN_KEY, None)
        return None
    return Identity(user=who.name, role=who.role, signed_in=True, source=who.source,
                    projects=frozenset(who.projects) if who.projects is not None else None)


def require_lead(action: str, outcome: str = "Nothing was saved.") -> bool:
    """Server-side check before a write: True for a lead, else an error on the page and False."""
    return lead_writer(action, outcome) is not None


def lead_writer(action: str, outcome: str = "Nothing was saved.") -> Optional[Actor]:
    """:func:`require_lead` that answers the writer: for a lead of the whole team (not scoped to projects), who
    writes (:func:`writer`: what ``data.write_session`` needs, so that the audit log records who wrote), else an
    error on the page and None."""
    from trainledger.app.views.ui import md

    ident = current_identity()
    if ident is not None and ident.is_lead and ident.team_scope:
        return writer(ident)
    if ident is not None and ident.is_lead:  # prices, fleets, budgets, settings and runs are the whole team's
        st.error(f"Only leads of the whole team can {action}: {md(ident.user)} is scoped to "
                 f"{', '.join(md(p) for p in sorted(ident.projects or ()))}. {outcome}")
        return None
    who = f"{md(ident.user)} is a {ident.role}" if ident else "you are not signed in"
    st.error(f"Only leads can {action}: {who}. {outcome}")
    return None


def writer(ident: Identity) -> Actor:
    """The audit log's actor for ``ident``: the signed-in user (``oidc:NAME`` for a user of the OpenID provider, so
    a users-file user of the same name is told apart; local use without sign-in: ``local:`` and the OS user running
    the dashboard, which then answers only on this machine), origin ``dashboard``, the browser's address when known
    (``loopback`` for a browser on this machine, whose address Streamlit does not give; "" without a request)."""
    try:
        address = st.context.ip_address  # None for a browser on this machine (Streamlit hides loopback)
        if not isinstance(address, str) and isinstance(st.context.headers.get("host"), str):
            address = "loopback"
    except Exception:  # no request context (a bare script run)
        address = None
    if not ident.signed_in:
        name = f"local:{os_user()}"
    else:
        name = f"oidc:{ident.user}" if ident.source == "oidc" else ident.user
    return Actor(name=name, origin="dashboard", client=address if isinstance(address, str) else "")


def read_only(ident: Identity) -> bool:
    """Whether the forms that write are shown disabled: for viewers, and for leads scoped to projects (what the
    dashboard writes, prices, fleets, exchange rates, settings, budgets and runs, is the whole team's)."""
    return not (ident.is_lead and ident.team_scope)


def refusal_page() -> None:
    st.title("trainledger")
    if not server_is_loopback():
        st.error("This dashboard is bound to a non-loopback address and no auth file is configured, so it serves "
                 "nothing. Start it with `trainledger dashboard` (binds 127.0.0.1), or add "
                 "`--auth-file users.toml` (create users with `python -m trainledger.app.serving.auth hash NAME --role lead`).")
    else:
        st.error("Without sign-in this dashboard answers only at a loopback address through no proxy "
                 "(open http://127.0.0.1 or http://localhost on this machine). To serve it under another name, "
                 "start it with `--auth-file users.toml --allowed-host NAME`.")


def auth_error_page(message: str) -> None:
    from trainledger.app.views.ui import md

    st.title("trainledger")
    st.error(f"Sign-in is configured but unusable: {md(message)}")


def signin_url(page_path: str) -> str:
    """The sign-in form, coming back to ``page_path`` (with this page's query parameters) after."""
    query = urlencode({k: st.query_params.get(k) for k in st.query_params})
    return f"{SIGNIN_PATH}?next={quote(safe_next(page_path + (f'?{query}' if query else '')), safe='')}"


def signin_prompt(page_path: str = "/") -> None:
    """What a browser without a valid session sees (usually it is sent to the sign-in form before the app loads)."""
    st.title("Sign in to trainledger")
    if st.session_state.pop(SIGNED_OUT_KEY, False):
        st.success("You are signed out.")
    else:
        st.info("Your session has ended or was never started on this browser: sign in to continue.")
    # our own markup: a same-tab link to our own form (no user text in it)
    st.markdown(f'<a href="{signin_url(page_path)}" target="_self">Sign in</a>', unsafe_allow_html=True)


def page_gate() -> Identity:
    """The checks of main.py, run again by every page: the identity, or the refusal/sign-in page and stop.

    A page can run without main.py (Streamlit's older ``pages/`` folder mode on
    a fresh server), so it must not trust that main.py checked first.
    """
    try:
        if not signin_configured() and not (server_is_loopback() and request_is_local()):
            refusal_page()
            st.stop()
        ident = current_identity()
    except AuthFileError as exc:
        auth_error_page(str(exc))
        st.stop()
    if ident is None:
        signin_prompt()
        st.stop()
    return ident


def sidebar_identity(ident: Identity) -> None:
    from trainledger.app.queries.data import ledger_url
    from trainledger.app.views.ui import md

    if not ident.signed_in:
        st.sidebar.caption("Local use (loopback, no sign-in): full lead access.")
        return
    st.sidebar.caption(f"Signed in as **{md(ident.user)}** ({ident.role})")
    token = session_token()
    if ident.source == "oidc" and token:
        # over HTTP, so that the browser can go on to the provider's sign-out (app/serving/oidc_routes.py); the
        # check in the link comes from the session token, so no other site can make one (our markup, no user text)
        from trainledger.app.serving.signin import SIGNOUT_PATH, signout_check

        st.sidebar.markdown(f'<a href="{SIGNOUT_PATH}?t={signout_check(token)}" target="_self">Sign out</a>',
                            unsafe_allow_html=True)
        return
    if st.sidebar.button("Sign out", key="sign_out"):
        sessions.revoke(ledger_url(), session_token())
        st.session_state.pop(TOKEN_KEY, None)
        st.session_state[SIGNED_OUT_KEY] = True
        st.rerun()
