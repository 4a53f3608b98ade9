"""Who is using the dashboard, and what they may do (SPEC §8).

* With an auth file (``TRAINLEDGER_AUTH_FILE``, set by ``trainledger dashboard
  --auth-file``) every session signs in; viewers read, leads may also edit
  prices, fleet and settings, and launch and cancel runs.
* Without one, the dashboard serves loopback only, and everyone there is a lead
  (local use). A server bound elsewhere without an auth file serves nothing.

The role lives in ``st.session_state`` under a key that no widget uses, and
only :func:`login_page` writes it. Pages call :func:`require_lead` right
before they write, so a forged click from a viewer changes nothing: hiding a
button is not the check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import streamlit as st

from app.auth import AuthFileError, authenticate, load_auth_file
from app.cli import AUTH_ENV, is_loopback

IDENTITY_KEY = "_trainledger_identity"  # written only by login_page()


@dataclass(frozen=True)
class Identity:
    user: str
    role: str  # viewer | lead
    signed_in: bool  # False: local use without an auth file

    @property
    def is_lead(self) -> bool:
        return self.role == "lead"


LOCAL_LEAD = Identity(user="local", role="lead", signed_in=False)


def auth_file() -> Optional[Path]:
    value = os.environ.get(AUTH_ENV)
    return Path(value) if value else None


@st.cache_data(ttl=10, show_spinner=False)
def _users(path: str, mtime_ns: int):
    return load_auth_file(path)


def users() -> dict:
    """The auth file's users (re-read when the file changes); AuthFileError if unusable."""
    path = auth_file()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise AuthFileError(f"--auth-file: cannot read {path}: {exc.strerror or exc}") from None
    return _users(str(path), mtime)


def server_is_loopback() -> bool:
    return is_loopback(st.get_option("server.address"))


def current_identity() -> Optional[Identity]:
    """The signed-in identity (its role re-read from the auth file), a local lead, or None."""
    if auth_file() is None:
        return LOCAL_LEAD if server_is_loopback() else None
    ident = st.session_state.get(IDENTITY_KEY)
    if not isinstance(ident, Identity):
        return None
    entry = users().get(ident.user)
    if entry is None:  # removed from the file: signed out
        st.session_state.pop(IDENTITY_KEY, None)
        return None
    return Identity(user=entry.name, role=entry.role, signed_in=True)


def require_lead(action: str, outcome: str = "Nothing was saved.") -> bool:
    """Server-side check before a write: True for a lead, else an error on the page and False."""
    ident = current_identity()
    if ident is not None and ident.is_lead:
        return True
    who = f"{ident.user} is a {ident.role}" if ident else "you are not signed in"
    st.error(f"Only leads can {action}: {who}. {outcome}")
    return False


def refusal_page() -> None:
    st.title("trainledger")
    st.error("This dashboard is bound to a non-loopback address and no auth file is configured, so it serves "
             "nothing. Start it with `trainledger dashboard` (binds 127.0.0.1), or add "
             "`--auth-file users.toml` (create users with `python -m app.auth hash NAME --role lead`).")


def auth_error_page(message: str) -> None:
    st.title("trainledger")
    st.error(f"Sign-in is configured but unusable: {message}")


def login_page() -> None:
    st.title("Sign in to trainledger")
    with st.form("login"):
        name = st.text_input("User", key="login_user")
        password = st.text_input("Password", type="password", key="login_password")
        submitted = st.form_submit_button("Sign in", type="primary")
    if submitted:
        entry = authenticate(users(), name.strip(), password)
        if entry is None:
            st.error("Wrong user or password.")
            return
        st.session_state[IDENTITY_KEY] = Identity(user=entry.name, role=entry.role, signed_in=True)
        st.rerun()


def page_gate() -> Identity:
    """The checks of main.py, run again by every page: the identity, or the refusal/sign-in page and stop.

    A page can run without main.py (Streamlit's older ``pages/`` folder mode on
    a fresh server), so it must not trust that main.py checked first.
    """
    try:
        if auth_file() is None and not server_is_loopback():
            refusal_page()
            st.stop()
        ident = current_identity()
    except AuthFileError as exc:
        auth_error_page(str(exc))
        st.stop()
    if ident is None:
        login_page()
        st.stop()
    return ident


def sidebar_identity(ident: Identity) -> None:
    if not ident.signed_in:
        st.sidebar.caption("Local use (loopback, no sign-in): full lead access.")
        return
    st.sidebar.caption(f"Signed in as **{ident.user}** ({ident.role})")
    if st.sidebar.button("Sign out", key="sign_out"):
        st.session_state.pop(IDENTITY_KEY, None)
        st.rerun()
