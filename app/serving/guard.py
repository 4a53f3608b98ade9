"""The dashboard's Host/Origin allow-list: an ASGI middleware in front of every request (DNS rebinding).

``trainledger dashboard`` serves the app as a Streamlit ``st.App`` (app/serving/asgi.py)
with :class:`HostGuard` as its first middleware, so the check covers every HTTP
request (pages, static files, media, the sign-in routes) and the WebSocket that
carries the app itself. A request is refused (HTTP 403, or the WebSocket
handshake rejected) unless

* its ``Host`` names this server: ``localhost`` or a loopback address; with
  sign-in (``--auth-file``) also any IP address (a page cannot rebind a name to
  a literal address), this machine's own host names when it binds a
  non-loopback address, and each ``--allowed-host NAME`` (``*.example.com``
  for a domain's subdomains) of a reverse proxy; and
* its ``Origin``, when it sends one, is this site: the same host and port as
  the request's ``Host`` (or a ``--allowed-host`` name, for a proxy that
  rewrites Host); no ``Origin: null``, no other port of localhost.

A page from another site whose name the attacker re-points at 127.0.0.1 sends
its own name as the Host: refused before Streamlit sees it. Which hosts pass
comes from the environment (``TRAINLEDGER_ALLOWED_HOSTS``, set by app/serving/cli.py)
and Streamlit's ``server.address``. This module imports no Streamlit.
"""

from __future__ import annotations

import logging
from typing import Optional

# the rules live in ledger/sources/telemetry/hosts.py, shared with the metrics endpoints; re-exported here
from trainledger.sources.telemetry.hosts import (  # noqa: F401
    ALLOWED_HOSTS_ENV,
    LOOPBACK_NAMES,
    MAX_HOST_LEN,
    HostPolicy,
    is_ip,
    is_loopback_name,
    parse_allowed,
    split_host,
)

log = logging.getLogger("trainledger.dashboard")


def _header(scope, key: bytes) -> Optional[str]:
    for k, v in scope.get("headers") or ():
        if k == key:
            return v.decode("latin-1")
    return None


def _printable(text: Optional[str], limit: int = 80) -> str:
    text = "" if text is None else text
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


class HostGuard:
    """ASGI middleware: refuse HTTP requests and WebSockets whose Host or Origin is not allowed."""

    def __init__(self, app, policy: Optional[HostPolicy] = None):
        self.app = app
        self._policy = policy

    @property
    def policy(self) -> HostPolicy:
        if self._policy is None:  # built on first use: Streamlit's config is loaded by then
            from streamlit import config

            self._policy = HostPolicy.from_env(config.get_option("server.address"))
        return self._policy

    def refusal(self, scope) -> Optional[str]:
        """Why this request is refused, or None."""
        host_header = _header(scope, b"host")
        name = split_host(host_header)
        if not self.policy.host_allowed(name):
            hint = ("start the dashboard with --auth-file and --allowed-host NAME to serve it under another name"
                    if not self.policy.signin else f"start the dashboard with --allowed-host {_printable(name) or 'NAME'}")
            return f"Host {_printable(host_header)!r} is not allowed (DNS rebinding protection): {hint}"
        origin = _header(scope, b"origin")
        if origin is not None and not self.policy.origin_allowed(origin, host_header):
            return f"Origin {_printable(origin)!r} is not allowed: open the dashboard at its own address"
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        reason = self.refusal(scope)
        if reason is None:
            return await self.app(scope, receive, send)
        client = scope.get("client") or ("?", 0)
        log.warning("refused %s %s from %s: %s", scope["type"], _printable(scope.get("path"), 200), client[0], reason)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
            return
        body = f"trainledger: {reason}.\n".encode("utf-8")
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                                (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": body})
