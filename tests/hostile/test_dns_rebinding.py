"""DNS rebinding and cross-site WebSockets against the dashboard, with real Chromium and raw HTTP.

The finding: plain `trainledger dashboard` (127.0.0.1, no sign-in, everyone a lead) accepted any
``Host`` and ``Origin``: a page of a foreign site whose name the attacker re-points at 127.0.0.1
showed "full lead access" and saved a settings change. Now every HTTP request and the WebSocket
pass app/serving/guard.py's allow-list first (an ASGI middleware in front of Streamlit's ``st.App``):

* Chromium opening ``http://evil.test:PORT/`` (resolved to 127.0.0.1) gets 403 and no app; the
  same browser at ``http://localhost:PORT`` gets the app with local lead access;
* a page of another origin cannot open the app's WebSocket (``Origin`` refused), and a request
  that came through a proxy (``X-Forwarded-For``) is not local use, so no lead access;
* every kind of path (page, health, static, media, the WebSocket handshake) refuses a foreign Host;
* behind a reverse proxy (``--allowed-host dash.test`` with ``--auth-file``) the name is served,
  but only after sign-in, never as a local lead.
"""

from __future__ import annotations

import http.server
import socket
import threading

import pytest
from sqlalchemy import create_engine, text
from trainledger.app.serving.auth import make_entry
from trainledger.store.db import make_engine

from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle

pytestmark = pytest.mark.slow

ATTACK_PAGE = """<!doctype html><html><body><script>
window.result = new Promise(resolve => {
  const ws = new WebSocket("ws://127.0.0.1:%(port)d/_stcore/stream", ["streamlit"]);
  ws.onopen = () => resolve("open");
  ws.onerror = () => resolve("error");
  ws.onclose = () => resolve("closed");
  setTimeout(() => resolve("timeout"), 20000);
});
</script></body></html>"""


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    need_chromium()
    tmp = tmp_path_factory.mktemp("rebinding")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    make_engine(url).dispose()
    with serve(tmp, url) as served:
        yield served


def _settings(url: str) -> list:
    eng = create_engine(url)
    with eng.connect() as c:
        rows = c.execute(text("SELECT key, value FROM setting ORDER BY key")).all()
    eng.dispose()
    return [tuple(r) for r in rows]


def _raw(port: int, request: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request.encode("latin-1"))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data


def _status(port: int, path: str, host: str, extra: str = "") -> int:
    reply = _raw(port, f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/html\r\n{extra}Connection: close\r\n\r\n")
    return int(reply.split(b" ", 2)[1])


def _handshake(port: int, host: str, origin: str) -> int:
    reply = _raw(port, f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: streamlit\r\n\r\n")
    return int(reply.split(b" ", 2)[1])


def test_a_rebound_name_gets_nothing_and_changes_nothing(local, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    before = _settings(local.url)
    with sync_playwright() as p:
        browser = chromium(p, "evil.test")
        try:
            page = browser.new_page()
            page.set_default_timeout(WAIT_MS)
            response = page.goto(f"http://evil.test:{local.port}/settings")
            assert response.status == 403
            body = page.inner_text("body")
            assert "Host 'evil.test:" in body and "DNS rebinding protection" in body
            assert "full lead access" not in page.content()
            # the attacker's script, running on evil.test, tries the API behind the page: refused too
            assert page.evaluate("fetch('/_stcore/health').then(r => r.status)") == 403
            # the same browser at the real address: the app, local lead access
            page.goto(f"http://localhost:{local.port}/settings")
            expect(page.get_by_text("Local use (loopback, no sign-in): full lead access.")).to_be_visible()
            settle(page)
        finally:
            browser.close()
    assert _settings(local.url) == before
    assert "refused http /settings" in local.log_text()


def test_another_origin_cannot_open_the_apps_websocket(local, tmp_path):
    from playwright.sync_api import sync_playwright

    page_port = _serve_page(ATTACK_PAGE % {"port": local.port})
    with sync_playwright() as p:
        browser = chromium(p, "attacker.test")
        try:
            page = browser.new_page()
            page.goto(f"http://attacker.test:{page_port}/")
            assert page.evaluate("window.result") in ("error", "closed")
            page.goto(f"http://127.0.0.1:{page_port}/")  # a loopback name, but another origin (port)
            assert page.evaluate("window.result") in ("error", "closed")
        finally:
            browser.close()
    assert "Origin 'http://attacker.test:" in local.log_text()


def test_a_request_through_a_proxy_is_not_local_use(local):
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = chromium(p)
        try:
            context = browser.new_context(extra_http_headers={"X-Forwarded-For": "203.0.113.7"})
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(f"{local.base}/settings")
            expect(page.get_by_text("answers only at a loopback address through no proxy")).to_be_visible()
            assert "full lead access" not in page.content()
            assert page.get_by_role("button", name="Save settings").count() == 0
        finally:
            browser.close()


@pytest.mark.parametrize("path", ["/", "/overview", "/_stcore/health", "/_stcore/host-config", "/static/index.html",
                                  "/media/x.png", "/_trainledger/signin", "/favicon.png"])
def test_every_path_refuses_a_foreign_host(local, path):
    assert _status(local.port, path, f"evil.test:{local.port}") == 403
    assert _status(local.port, path, f"127.0.0.1.evil.test:{local.port}") == 403
    assert _status(local.port, path, "") in (400, 403)  # no Host at all: refused (uvicorn or the guard)
    assert _status(local.port, path, f"localhost:{local.port}") != 403
    assert _status(local.port, path, f"127.0.0.1:{local.port}", f"Origin: http://evil.test:{local.port}\r\n") == 403
    assert _status(local.port, path, f"127.0.0.1:{local.port}", "Origin: null\r\n") == 403


def test_the_websocket_handshake_checks_host_and_origin(local):
    own = f"http://127.0.0.1:{local.port}"
    assert _handshake(local.port, f"127.0.0.1:{local.port}", own) == 101
    assert _handshake(local.port, f"evil.test:{local.port}", f"http://evil.test:{local.port}") == 403
    assert _handshake(local.port, f"127.0.0.1:{local.port}", f"http://evil.test:{local.port}") == 403
    assert _handshake(local.port, f"evil.test:{local.port}", own) == 403


def test_behind_a_reverse_proxy_the_allowed_name_needs_sign_in(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    need_chromium()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    make_engine(url).dispose()
    users = tmp_path / "users.toml"
    users.write_text(make_entry("alice", "lead", "alice-pw", iterations=1000))
    with serve(tmp_path, url, "--auth-file", str(users), "--allowed-host", "dash.test") as served:
        assert _status(served.port, "/", f"evil.test:{served.port}") == 403
        with sync_playwright() as p:
            browser = chromium(p, "dash.test", "evil.test")
            try:
                page = browser.new_page()
                page.set_default_timeout(WAIT_MS)
                assert page.goto(f"http://evil.test:{served.port}/").status == 403
                page.goto(f"http://dash.test:{served.port}/settings")
                assert page.url.startswith(f"http://dash.test:{served.port}/_trainledger/signin?next=%2Fsettings")
                assert "full lead access" not in page.content()
                page.get_by_label("User").fill("alice")
                page.get_by_label("Password").fill("alice-pw")
                page.get_by_role("button", name="Sign in").click()
                expect(page.get_by_test_id("stSidebarUserContent").get_by_text("Signed in as alice (lead)")).to_be_visible()
                assert page.url == f"http://dash.test:{served.port}/settings"
            finally:
                browser.close()


def _serve_page(body: str) -> int:
    """A tiny web server of the attacker's page on a free port (a daemon thread, gone with the test process)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]
