"""The HTTP side of OpenID Connect sign-in (app/serving/oidc.py) and of signing out over HTTP.

* ``GET /_trainledger/oidc/login?next=PATH``: stores a sign-in in flight (state, nonce, PKCE verifier), puts its
  state in a short-lived cookie of this browser (HttpOnly, SameSite=Lax, path: the callback only) and sends the
  browser to the provider's authorization endpoint.
* ``GET /_trainledger/oidc/callback?code&state``: refused unless ``state`` is this browser's cookie and a sign-in in
  flight (deleted now: used once), ``iss`` (when sent) is the issuer, the code exchanges for an ID token that
  passes every check and the mapping gives a role. Then a session like the password form's (source ``oidc``), and
  back to ``next``. A refusal shows a short page, stores nothing and is logged (never a code or a token).
* ``GET /_trainledger/signout?t=CHECK``: ends this browser's session (its row is deleted), clears the cookies, and
  for an OIDC session with a provider that has an ``end_session_endpoint`` goes there (``id_token_hint``,
  ``client_id``, ``post_logout_redirect_uri`` = ``/_trainledger/signedout``); else to that page directly.
"""

from __future__ import annotations

import hmac
from typing import Optional
from urllib.parse import urlencode

from trainledger.app.serving import oidc, sessions
from trainledger.app.serving.auth import AuthFileError
from trainledger.app.serving.signin import (
    HEADERS,
    PAGE,
    SIGNED_OUT_PATH,
    SIGNIN_PATH,
    SIGNOUT_PATH,
    cookie_name,
    ledger_url,
    log,
    safe_next,
    session_user,
    signout_check,
)

MAX_HINT_CHARS = 3500  # an ID token kept for id_token_hint only if its cookie stays under browsers' 4 KiB


def state_cookie() -> str:
    return cookie_name().replace("trainledger_session", "trainledger_oidc_state", 1)


def hint_cookie() -> str:
    return cookie_name().replace("trainledger_session", "trainledger_oidc_hint", 1)


def _page(title: str, message: str, status: int, link: str = "Back to sign-in"):
    import html

    from starlette.responses import HTMLResponse

    shown = (f'<p class="error" role="alert">{html.escape(message)}</p>' if status >= 400
             else f'<p role="status">{html.escape(message)}</p>')
    body = f'{shown}<p><a href="{SIGNIN_PATH}">{html.escape(link)}</a></p>'
    text = PAGE.format(message=body, forms="", hours=sessions.SESSION_HOURS)
    text = text.replace("<title>Sign in to trainledger</title>", f"<title>{html.escape(title)}</title>")
    text = text.replace("<h1>Sign in to trainledger</h1>", f"<h1>{html.escape(title)}</h1>")
    return HTMLResponse(text, status, headers=HEADERS)


def _client(request) -> str:
    return request.client.host if request.client else "unknown"


def _settings() -> Optional[oidc.OidcSettings]:
    return oidc.current_settings()


def redirect_uri(request, settings: oidc.OidcSettings) -> str:
    """The callback URL sent to the provider: the configured one, else this request's scheme and host."""
    return settings.redirect_uri or f"{request.url.scheme}://{request.url.netloc}{oidc.CALLBACK_PATH}"


def _site(request, settings: oidc.OidcSettings) -> str:
    uri = redirect_uri(request, settings)
    return uri[:-len(oidc.CALLBACK_PATH)] if uri.endswith(oidc.CALLBACK_PATH) else uri.split("/_trainledger/")[0]


def _configured():
    """The OIDC settings, or the response to send when there are none (off: 404) or they are unusable (500)."""
    from starlette.responses import PlainTextResponse

    try:
        settings = _settings()
    except AuthFileError as exc:
        return _page("Sign-in unusable", f"Sign-in is configured but unusable: {exc}", 500)
    return settings if settings is not None else PlainTextResponse("OpenID Connect sign-in is off.\n", 404)


async def login_endpoint(request):
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import RedirectResponse

    settings = _configured()
    if not isinstance(settings, oidc.OidcSettings):
        return settings  # the page that says why there is no sign-in through the provider
    next_path = safe_next(request.query_params.get("next"))
    try:
        url, state = await run_in_threadpool(oidc.begin, ledger_url(), settings, oidc.provider_for(settings.issuer),
                                             redirect_uri(request, settings), next_path)
    except oidc.OidcError as exc:
        log.warning("OIDC sign-in not started for %s: %s", _client(request), exc.reason)
        return _page("Sign-in failed", "The identity provider cannot be reached; try again later.", exc.status)
    response = RedirectResponse(url, 303, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})
    response.set_cookie(state_cookie(), state, max_age=oidc.LOGIN_TTL_S, path=oidc.CALLBACK_PATH, httponly=True,
                        samesite="lax", secure=request.url.scheme == "https")
    return response


def _refuse(request, reason: str, message: str = oidc.FAILED, status: int = 400):
    log.warning("OIDC sign-in refused for %s: %s", _client(request), reason)
    response = _page("Sign-in refused", message, status)
    response.delete_cookie(state_cookie(), path=oidc.CALLBACK_PATH)
    return response


async def callback_endpoint(request):
    from starlette.concurrency import run_in_threadpool

    settings = _configured()
    if not isinstance(settings, oidc.OidcSettings):
        return settings  # the page that says why there is no sign-in through the provider
    params = request.query_params
    state, mine = params.get("state") or "", request.cookies.get(state_cookie()) or ""
    if not state or not mine or not hmac.compare_digest(state.encode("utf-8"), mine.encode("utf-8")):
        return _refuse(request, "the callback's state is not a sign-in this browser started")
    login = await run_in_threadpool(oidc.take_login, ledger_url(), state)
    if login is None:
        return _refuse(request, "the sign-in is unknown, used already or expired")
    if params.get("iss") is not None and params.get("iss") != settings.issuer:
        return _refuse(request, "the callback names another issuer (iss)")
    if params.get("error"):
        return _refuse(request, f"the provider answered {params.get('error')[:80]!r}",
                       "The identity provider did not sign you in; nothing was stored.")
    code = params.get("code")
    if not code or len(code) > 2000:
        return _refuse(request, "the callback has no code")
    try:
        who = await run_in_threadpool(oidc.finish, settings, oidc.provider_for(settings.issuer), login, code,
                                      redirect_uri(request, settings))
    except oidc.OidcError as exc:
        return _refuse(request, exc.reason, exc.message, exc.status)
    except AuthFileError as exc:  # the client secret's file or variable
        return _refuse(request, f"configuration: {exc}", "Sign-in is configured but unusable.", 500)
    return await run_in_threadpool(_signed_in, request, settings, who, login.next_path)


def _signed_in(request, settings: oidc.OidcSettings, who: oidc.SignedIn, next_path: str):
    from starlette.responses import RedirectResponse

    token, _ = sessions.create_oidc(ledger_url(), who.user, who.role, who.projects, settings.fingerprint)
    scope = ", ".join(who.projects) if who.projects is not None else "every project"
    log.info("signed in through OIDC: %r (%s; %s) from %s", who.user, who.role, scope, _client(request))
    secure = request.url.scheme == "https"
    response = RedirectResponse(safe_next(next_path), 303, headers=HEADERS)
    response.set_cookie(cookie_name(), token, max_age=int(sessions.SESSION_HOURS * 3600), path="/", httponly=True,
                        samesite="lax", secure=secure)
    if len(who.id_token) <= MAX_HINT_CHARS:
        response.set_cookie(hint_cookie(), who.id_token, max_age=int(sessions.SESSION_HOURS * 3600),
                            path=SIGNOUT_PATH, httponly=True, samesite="lax", secure=secure)
    response.delete_cookie(state_cookie(), path=oidc.CALLBACK_PATH)
    return response


def _end_session_url(request, token_hint: Optional[str]) -> Optional[str]:
    """The provider's end_session_endpoint with id_token_hint, client_id and post_logout_redirect_uri, if it has one."""
    try:
        settings = _settings()
        endpoint = oidc.provider_for(settings.issuer).metadata().get("end_session_endpoint") if settings else None
    except (AuthFileError, oidc.OidcError):
        return None
    if not isinstance(endpoint, str) or not endpoint.startswith(("https://", "http://")):
        return None
    query = {"client_id": settings.client_id, "post_logout_redirect_uri": _site(request, settings) + SIGNED_OUT_PATH}
    if token_hint:
        query["id_token_hint"] = token_hint
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(query)}"


def _sign_out(request):
    from starlette.responses import RedirectResponse

    token = request.cookies.get(cookie_name())
    check = request.query_params.get("t") or ""
    if not token or not hmac.compare_digest(check.encode("utf-8"), signout_check(token).encode("utf-8")):
        return RedirectResponse("/", 303, headers=HEADERS)  # not this browser's own sign-out link: nothing changes
    who = session_user(token)
    sessions.revoke(ledger_url(), token)
    if who is not None:
        log.info("signed out: %r (%s) from %s", who.name, who.source, _client(request))
    target = _end_session_url(request, request.cookies.get(hint_cookie())) if who and who.source == "oidc" else None
    response = RedirectResponse(target or SIGNED_OUT_PATH, 303, headers=HEADERS)
    response.delete_cookie(cookie_name(), path="/")
    response.delete_cookie(hint_cookie(), path=SIGNOUT_PATH)
    return response


async def signout_endpoint(request):
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(_sign_out, request)


async def signed_out_endpoint(request):
    return _page("Signed out", "You are signed out.", 200, link="Sign in again")


def routes() -> list:
    from starlette.routing import Route

    return [Route(oidc.LOGIN_PATH, login_endpoint, methods=["GET"]),
            Route(oidc.CALLBACK_PATH, callback_endpoint, methods=["GET"]),
            Route(SIGNOUT_PATH, signout_endpoint, methods=["GET"]),
            Route(SIGNED_OUT_PATH, signed_out_endpoint, methods=["GET"])]
