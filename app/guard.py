"""The dashboard's Host/Origin allow-list: an ASGI middleware in front of every request (DNS rebinding).

``trainledger dashboard`` serves the app as a Streamlit ``st.App`` (app/asgi.py)
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
comes from the environment (``TRAINLEDGER_ALLOWED_HOSTS``, set by app/cli.py)
and Streamlit's ``server.address``. This module imports no Streamlit.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from dataclasses import dataclass
from typing import Iterable, Optional
from urllib.parse import urlsplit

log = logging.getLogger("trainledger.dashboard")

ALLOWED_HOSTS_ENV = "TRAINLEDGER_ALLOWED_HOSTS"  # comma-separated --allowed-host values
LOOPBACK_NAMES = ("localhost",)
MAX_HOST_LEN = 255


def split_host(header: Optional[str]) -> Optional[str]:
    """The host name of a ``Host`` header (lower case, no port, no trailing dot), or None if malformed."""
    if not header or len(header) > MAX_HOST_LEN + 8 or any(c.isspace() or ord(c) < 32 for c in header):
        return None
    try:
        parts = urlsplit(f"//{header}")
        name, _port = parts.hostname, parts.port  # .port validates a given port
    except ValueError:
        return None
    if not name or parts.username is not None or parts.password is not None or parts.path or parts.query:
        return None
    return name.rstrip(".") or None


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def is_loopback_name(name: Optional[str]) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if not name:
        return False
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def parse_allowed(values: Iterable[str]) -> tuple[str, ...]:
    """``--allowed-host`` values, checked: host names or ``*.domain``; ValueError (one line) otherwise."""
    out = []
    for raw in values:
        v = raw.strip().lower().rstrip(".")
        name = v[2:] if v.startswith("*.") else v
        if not name or split_host(name) != name or name.startswith("*"):
            raise ValueError(f"--allowed-host {raw!r}: expected a host name such as dash.example.com or *.example.com "
                             "(no scheme, port or path)")
        out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class HostPolicy:
    """Which ``Host`` (and ``Origin``) names a request may carry."""

    signin: bool  # an auth file is configured
    allowed: tuple[str, ...] = ()  # --allowed-host values (exact names or *.domain)
    own_names: tuple[str, ...] = ()  # this machine's names, when bound to a non-loopback address

    @classmethod
    def from_env(cls, bind_address: Optional[str]) -> "HostPolicy":
        signin = bool(os.environ.get("TRAINLEDGER_AUTH_FILE"))
        allowed = parse_allowed(x for x in os.environ.get(ALLOWED_HOSTS_ENV, "").split(",") if x.strip())
        own: tuple[str, ...] = ()
        if signin and not is_loopback_name(bind_address):
            own = tuple({n.lower().rstrip(".") for n in (socket.gethostname(), socket.getfqdn()) if n})
        return cls(signin=signin, allowed=allowed, own_names=own)

    def host_allowed(self, name: Optional[str]) -> bool:
        if not name:
            return False
        if is_loopback_name(name):
            return True
        if not self.signin:  # local use without sign-in: loopback names only
            return False
        if is_ip(name) or name in self.own_names:
            return True
        return any(name == a or (a.startswith("*.") and name.endswith(a[1:])) for a in self.allowed)

    def origin_allowed(self, origin: str, host_header: Optional[str]) -> bool:
        """The page that sent the request is this site: the same host and port as the request (or, behind a
        reverse proxy that rewrites Host, a name given with --allowed-host)."""
        try:
            parts = urlsplit(origin)
            name, port = parts.hostname, parts.port
            host = urlsplit(f"//{host_header}")
            host_name, host_port = host.hostname, host.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not name or not host_name:
            return False
        name, host_name = name.rstrip("."), host_name.rstrip(".")
        default = {"http": 80, "https": 443}[parts.scheme]
        if name == host_name and (port or default) == (host_port or default):
            return True
        return any(name == a or (a.startswith("*.") and name.endswith(a[1:])) for a in self.allowed)


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
