"""The HTTP server of every ``/metrics`` endpoint (``trainledger exporter``, the per-process exporters of
``trainledger run``, ``trainledger.track`` and the trainer): as hardened as the dashboard.

* **Host allow-list** (DNS rebinding): a request whose ``Host`` the endpoint does
  not answer (:func:`trainledger.sources.telemetry.hosts.server_policy`: loopback names, IP
  addresses, this machine's names when bound to a non-loopback address, and
  each ``--allowed-host``) gets 403, so a page from another site cannot read
  the figures by re-pointing its name at this machine.
* **Timeouts**: a connection must send its whole request head within
  ``header_timeout_s`` (a client trickling one byte at a time is cut off), and
  a socket read or write may wait at most ``idle_timeout_s``.
* **Bounded connections**: at most ``max_connections`` are served at once; one
  more is closed at once, so half-open connections cannot take every thread,
  and the timeouts free their slots.

GET (and HEAD) of ``/metrics`` or ``/`` only; other methods get 405. HTTP/1.0:
one request per connection.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from typing import Iterable

from trainledger.sources.telemetry.hosts import HostPolicy, server_policy, split_host

log = logging.getLogger("trainledger")

MAX_CONNECTIONS = 32
IDLE_TIMEOUT_S = 10.0
HEADER_TIMEOUT_S = 10.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server_version = "trainledger"
    sys_version = ""

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout_s  # every socket read/write (StreamRequestHandler.setup)
        super().setup()
        self._head_done = threading.Event()
        self._cutoff = threading.Timer(self.server.header_timeout_s, self._too_slow)
        self._cutoff.daemon = True
        self._cutoff.start()

    def _too_slow(self) -> None:
        if not self._head_done.is_set():
            try:
                self.connection.shutdown(socket.SHUT_RDWR)  # the blocked read returns; the slot is freed
            except OSError:
                pass

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self._head_done.set()
        self._cutoff.cancel()
        return ok

    def finish(self) -> None:
        self._cutoff.cancel()
        try:
            super().finish()
        except OSError:
            pass

    def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
              head_only: bool = False, extra: Iterable[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def do_GET(self, head_only: bool = False) -> None:
        name = split_host(self.headers.get("Host"))
        if not self.server.policy.host_allowed(name):
            self._send(403, b"trainledger: this Host is not allowed (DNS rebinding protection); "
                            b"start the exporter with --allowed-host NAME to serve it under another name.\n",
                       head_only=head_only)
            return
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self._send(404, b"not found: the figures are at /metrics\n", head_only=head_only)
            return
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST, head_only=head_only)

    def do_HEAD(self) -> None:
        self.do_GET(head_only=True)

    def _not_allowed(self) -> None:
        self._send(405, b"method not allowed: GET /metrics\n", extra=[("Allow", "GET, HEAD")])

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def log_message(self, format: str, *args) -> None:  # noqa: A002  (the base class's name)
        pass  # a scrape every 15 s is not news


class MetricsServer(ThreadingMixIn, HTTPServer):
    """A threaded HTTP server of one Prometheus registry with the limits of the module docstring."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: str, port: int, registry, policy: HostPolicy, max_connections: int = MAX_CONNECTIONS,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, header_timeout_s: float = HEADER_TIMEOUT_S):
        self.address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.registry = registry
        self.policy = policy
        self.idle_timeout_s = idle_timeout_s
        self.header_timeout_s = header_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__((addr, port), _Handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):  # full: close this one now rather than queue it
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        """A scraper that hangs up or times out mid-answer is the scraper's business: never a traceback on the
        stderr of the process being measured (socketserver prints one by default)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)):
            return
        log.warning("metrics request from %s failed: %s", client_address[0] if client_address else "?", exc)


def serve(registry, addr: str, port: int, allowed_hosts: Iterable[str] = (), **limits) -> tuple[MetricsServer, threading.Thread]:
    """Serve ``registry`` on ``addr:port`` (0: a free port, see ``server.server_port``) in a daemon thread.

    ``allowed_hosts``: ``--allowed-host`` values (ValueError, one line, for a bad one); ``limits``:
    ``max_connections``, ``idle_timeout_s``, ``header_timeout_s``. OSError if the port cannot be bound.
    """
    server = MetricsServer(addr, port, registry, server_policy(addr, allowed_hosts), **limits)
    thread = threading.Thread(target=server.serve_forever, name="trainledger-metrics", daemon=True)
    thread.start()
    return server, thread
