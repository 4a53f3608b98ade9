"""Which ``Host`` names a server of ours answers: the DNS-rebinding allow-list shared by the dashboard
(:mod:`trainledger.app.serving.guard`, an ASGI middleware) and the metrics endpoints (:mod:`trainledger.sources.telemetry.metrics_http`).

A page from another site whose name the attacker re-points at 127.0.0.1 sends
its own name as the Host, so a server answers only names it knows:
``localhost`` and loopback addresses; any IP address (a page cannot rebind a
name to a literal address) and this machine's own names where that is safe
(see :class:`HostPolicy`); and each ``--allowed-host NAME`` (``*.example.com``
for a domain's subdomains) of a reverse proxy.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Iterable, Optional
from urllib.parse import urlsplit

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

    signin: bool  # beyond loopback names: the dashboard with an auth file, or a metrics endpoint
    allowed: tuple[str, ...] = ()  # --allowed-host values (exact names or *.domain)
    own_names: tuple[str, ...] = ()  # this machine's names, when bound to a non-loopback address

    @classmethod
    def from_env(cls, bind_address: Optional[str]) -> "HostPolicy":
        signin = bool(os.environ.get("TRAINLEDGER_AUTH_FILE"))
        allowed = parse_allowed(x for x in os.environ.get(ALLOWED_HOSTS_ENV, "").split(",") if x.strip())
        own: tuple[str, ...] = ()
        if signin and not is_loopback_name(bind_address):
            own = own_names()
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


def own_names() -> tuple[str, ...]:
    """This machine's host names (lower case, no trailing dot)."""
    return tuple(sorted({n.lower().rstrip(".") for n in (socket.gethostname(), socket.getfqdn()) if n}))


def server_policy(bind_address: str, allowed: Iterable[str] = ()) -> HostPolicy:
    """The policy of a server without sign-in that may bind any address (the metrics endpoints): loopback
    names, any IP address, this machine's names when it binds a non-loopback address, and ``allowed``."""
    own = own_names() if not is_loopback_name(bind_address) else ()
    return HostPolicy(signin=True, allowed=parse_allowed(allowed), own_names=own)
