"""Signing in over plain HTTP: the form that sets the session cookie, throttled, and the redirect of signed-out page loads.

``trainledger dashboard --auth-file FILE`` serves, besides the Streamlit app:

* ``GET /_trainledger/signin?next=/runs?run=X``: a small HTML form (no script,
  no outside resource; a strict Content-Security-Policy);
* ``POST /_trainledger/signin``: checks the user and password
  (``trainledger.app.serving.auth.authenticate``) under the sign-in throttle (app/serving/throttle.py) and at
  most :data:`VERIFY_SLOTS` PBKDF2 checks at once; on success it creates a
  session (app/serving/sessions.py), sets the session cookie (HttpOnly, SameSite=Lax,
  Secure over HTTPS, the token never in a URL) and sends the browser back to
  ``next``: the page it asked for, deep link and query included. Every failure,
  refusal and success is logged (logger ``trainledger.auth``; passwords never).

With ``--oidc-config`` (app/serving/oidc.py; routes in app/serving/oidc_routes.py) the page offers "Sign in with
PROVIDER" as well (or only that, without an auth file), and ``GET /_trainledger/signout?t=CHECK`` ends a session
over HTTP (the check, derived from the session token, keeps other sites from signing a browser out), then sends
an OIDC user through the provider's ``end_session_endpoint``.

:class:`SignInRequired` (middleware) sends a page load without a valid session
to that form, so any page URL works as a deep link signed in or not. The
Streamlit side checks the same session on every script run (app/views/access.py).
"""

from __future__ import annotations

import hashlib
import html
import logging
import math
import threading
from dataclasses import dataclass
from typing import Optional
from urllib.parse import parse_qs, quote

from trainledger.app.serving import oidc, sessions
from trainledger.app.serving.auth import AuthFileError, UserEntry, authenticate, users_file
from trainledger.app.serving.throttle import Throttle, policies_from_env

log = logging.getLogger("trainledger.auth")

SIGNIN_PATH = "/_trainledger/signin"
SIGNOUT_PATH = "/_trainledger/signout"
SIGNED_OUT_PATH = "/_trainledger/signedout"
AUTH_ENV = "TRAINLEDGER_AUTH_FILE"
MAX_FORM_BYTES = 8192
MAX_NEXT = 2000
VERIFY_SLOTS = 2  # PBKDF2 checks at once: a burst of sign-ins cannot take every core
#: paths that are not pages of the app (no redirect to the sign-in form for them)
MEDIA = "/media/"  # files the app serves (downloads): a valid session is needed for them too
NOT_PAGES = ("/_stcore", "/static", "/media", "/component", "/_trainledger", "/app/static", "/favicon", "/manifest",
             "/robots")

THROTTLE = Throttle(policies_from_env())
_VERIFY = threading.BoundedSemaphore(VERIFY_SLOTS)


@dataclass(frozen=True)
class Attempt:
    """The outcome of one sign-in attempt: the user (None: refused), the HTTP status and the message shown."""

    entry: Optional[UserEntry]
    status: int  # 200 signed in, 401 wrong user or password, 429 locked out
    message: str
    retry_after_s: int = 0


def whole_seconds(wait: float) -> int:
    """Seconds to wait, rounded up, after dropping float noise: (now + 600) - now may be 600.0000000001."""
    return math.ceil(round(wait, 3))


def attempt(users: dict[str, UserEntry], name: str, password: str, client: str,
            throttle: Throttle = THROTTLE) -> Attempt:
    """Check a sign-in under the throttle: locked keys are refused before any password work."""
    name = (name or "").strip()[:100]
    keys = [("user", name.lower()), ("client", client)]
    wait = throttle.wait_s(keys)
    if wait > 0:
        seconds = whole_seconds(wait)
        log.warning("sign-in refused: user %r from %s is locked out for %d more s", name, client, seconds)
        return Attempt(None, 429, f"Too many failed sign-ins: try again in {seconds} s.", seconds)
    with _VERIFY:
        entry = authenticate(users, name, password or "")
    if entry is None:
        locked, counts = throttle.failure(keys)
        seconds = whole_seconds(locked)
        log.warning("sign-in failed: user %r from %s (%d failures of the user, %d of the client)%s", name, client,
                    counts[keys[0]], counts[keys[1]], f"; locked out for {seconds} s" if seconds else "")
        return Attempt(None, 401, "Wrong user or password." + (f" Too many failures: wait {seconds} s." if seconds else ""),
                       seconds)
    throttle.success(keys)
    log.info("signed in: %r (%s) from %s", entry.name, entry.role, client)
    return Attempt(entry, 200, "")


def safe_next(value: Optional[str]) -> str:
    """Where to go after signing in: a path of this site (``/runs?run=x``), else ``/``. Never another site."""
    if not value or len(value) > MAX_NEXT or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(ord(c) < 32 or c in "\\\x7f" for c in value) or value.startswith(NOT_PAGES):
        return "/"
    return value


def auth_path() -> Optional[str]:
    import os

    return os.environ.get(AUTH_ENV) or None


def signin_on() -> bool:
    """Whether browsers must sign in: a users file, an OIDC configuration, or both."""
    return auth_path() is not None or oidc.config_path() is not None


def cookie_name() -> str:
    from streamlit import config

    return sessions.cookie_name(config.get_option("server.port"))


def ledger_url() -> str:
    from trainledger.store.db import resolve_url

    return resolve_url(None)


def resolve_session(token: Optional[str]) -> Optional[sessions.SessionUser]:
    """Who is signed in with ``token`` (users file or OIDC), or None; :class:`AuthFileError` if sign-in is unusable."""
    path = auth_path()
    if not token or not signin_on():
        return None
    users = users_file(path).users() if path is not None else {}
    settings = oidc.current_settings()
    return sessions.resolve(ledger_url(), token, users, settings.fingerprint if settings is not None else None)


def session_user(token: Optional[str]) -> Optional[sessions.SessionUser]:
    """The user signed in with ``token`` (None if none, or sign-in is unusable)."""
    try:
        return resolve_session(token)
    except AuthFileError:
        return None


def signout_check(token: str) -> str:
    """The ``t`` parameter of the sign-out link: only a page that knows the session token can make it."""
    return hashlib.sha256(f"trainledger-signout\0{token}".encode("utf-8")).hexdigest()[:32]


# --- the page ---------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in to trainledger</title>
<style>
body {{ font-family: system-ui, sans-serif; background: #f6f7f9; color: #1f2430; margin: 0; }}
main {{ max-width: 22rem; margin: 12vh auto; background: #fff; padding: 2rem; border-radius: .75rem;
        box-shadow: 0 1px 4px rgba(0,0,0,.12); }}
h1 {{ font-size: 1.4rem; margin: 0 0 1.25rem; }}
label {{ display: block; font-size: .9rem; margin: .75rem 0 .25rem; }}
input {{ width: 100%; box-sizing: border-box; padding: .55rem; border: 1px solid #c5cad3; border-radius: .4rem; font-size: 1rem; }}
button {{ margin-top: 1.25rem; width: 100%; padding: .6rem; border: 0; border-radius: .4rem; background: #ff4b4b; color: #fff;
          font-size: 1rem; cursor: pointer; }}
p.error {{ color: #b42318; background: #fef3f2; padding: .6rem; border-radius: .4rem; }}
p.note {{ color: #5a6270; font-size: .8rem; margin-top: 1.25rem; }}
a.sso {{ display: block; margin-top: 1.25rem; padding: .6rem; border-radius: .4rem; background: #1f2430; color: #fff;
         text-align: center; text-decoration: none; }}
</style></head>
<body><main>
<h1>Sign in to trainledger</h1>
{message}
{forms}
<p class="note">Signing in keeps you signed in on this browser for {hours} hours, or until you sign out.</p>
</main></body></html>
"""

HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                                      "frame-ancestors 'none'; base-uri 'none'",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store", "Referrer-Policy": "same-origin"}


FORM = """<form method="post" action="{action}">
<input type="hidden" name="next" value="{next}">
<label for="user">User</label><input id="user" name="user" autocomplete="username" required autofocus value="{user}">
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>"""


def _oidc_label() -> Optional[str]:
    try:
        settings = oidc.current_settings()
    except AuthFileError:
        return "your identity provider"
    return settings.label if settings is not None else None


def render_page(next_path: str, message: str = "", user: str = "") -> str:
    shown = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
    forms = ""
    if auth_path() is not None:
        forms = FORM.format(action=html.escape(f"{SIGNIN_PATH}?next={quote(next_path, safe='')}"),
                            next=html.escape(next_path), user=html.escape(user[:100]))
    label = _oidc_label() if oidc.config_path() is not None else None
    if label is not None:
        href = f"{oidc.LOGIN_PATH}?next={quote(next_path, safe='')}"
        forms += f'\n<a class="sso" href="{html.escape(href)}">Sign in with {html.escape(label)}</a>'
    return PAGE.format(message=shown, forms=forms, hours=sessions.SESSION_HOURS)


async def _read_form(request) -> Optional[dict[str, str]]:
    """The urlencoded form of a POST, at most MAX_FORM_BYTES; None if larger or not a form."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=10)
    except (UnicodeDecodeError, ValueError):
        return None
    return {k: v[0] for k, v in fields.items()}


async def signin_endpoint(request):
    """GET: the form; POST: sign in (throttled), set the cookie, go to ``next``."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse

    path = auth_path()
    if not signin_on():
        return PlainTextResponse("Sign-in is off: this dashboard serves loopback only, without sign-in.\n", 404)
    next_path = safe_next(request.query_params.get("next"))
    if request.method == "GET":
        if await run_in_threadpool(session_user, request.cookies.get(cookie_name())):
            return RedirectResponse(next_path, 303, headers=HEADERS)
        return HTMLResponse(render_page(next_path), headers=HEADERS)
    if path is None:
        return PlainTextResponse("Password sign-in is off: sign in with the identity provider.\n", 405)
    form = await _read_form(request)
    if form is None:
        return HTMLResponse(render_page(next_path, "The sign-in form was too large or malformed."), 400, headers=HEADERS)
    next_path = safe_next(form.get("next") or next_path)
    try:
        users = users_file(path).users()
    except AuthFileError as exc:
        return HTMLResponse(render_page(next_path, f"Sign-in is configured but unusable: {exc}"), 500, headers=HEADERS)
    client = request.client.host if request.client else "unknown"
    result = await run_in_threadpool(attempt, users, form.get("user", ""), form.get("password", ""), client)
    if result.entry is None:
        headers = {**HEADERS, **({"Retry-After": str(result.retry_after_s)} if result.retry_after_s else {})}
        return HTMLResponse(render_page(next_path, result.message, form.get("user", "")), result.status, headers=headers)
    token, _ = await run_in_threadpool(sessions.create, ledger_url(), result.entry)
    response = RedirectResponse(next_path, 303, headers=HEADERS)
    response.set_cookie(cookie_name(), token, max_age=int(sessions.SESSION_HOURS * 3600), path="/", httponly=True,
                        samesite="lax", secure=request.url.scheme == "https")
    return response


def routes() -> list:
    """The sign-in form's route (app/serving/asgi.py adds app/serving/oidc_routes.py's)."""
    from starlette.routing import Route

    return [Route(SIGNIN_PATH, signin_endpoint, methods=["GET", "POST"])]


class SignInRequired:
    """ASGI middleware: with sign-in on, a page load (GET of an HTML page) without a valid session goes to the form,
    and a file the app serves (``/media/…``: downloads, images) needs a valid session too (403 without one: its
    URL, a content hash, may have been seen by someone else)."""

    def __init__(self, app):
        self.app = app

    async def _media(self, scope, receive, send):
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import HTTPConnection
        from starlette.responses import PlainTextResponse

        if await run_in_threadpool(session_user, HTTPConnection(scope).cookies.get(cookie_name())):
            return await self.app(scope, receive, send)
        await PlainTextResponse("Sign in to download this file.", 403, headers={"Cache-Control": "no-store"})(
            scope, receive, send)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path", "/").startswith(MEDIA) and signin_on():
            return await self._media(scope, receive, send)
        if (scope["type"] != "http" or scope.get("method") not in ("GET", "HEAD") or not signin_on()
                or scope.get("path", "/").startswith(NOT_PAGES)):
            return await self.app(scope, receive, send)
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import HTTPConnection
        from starlette.responses import RedirectResponse

        conn = HTTPConnection(scope)
        if "text/html" not in conn.headers.get("accept", ""):
            return await self.app(scope, receive, send)
        if await run_in_threadpool(session_user, conn.cookies.get(cookie_name())):
            return await self.app(scope, receive, send)
        wanted = scope.get("path", "/") + (f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else "")
        response = RedirectResponse(f"{SIGNIN_PATH}?next={quote(safe_next(wanted), safe='')}", 303,
                                    headers={"Cache-Control": "no-store"})
        await response(scope, receive, send)
