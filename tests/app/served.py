"""A real `trainledger dashboard` for browser and HTTP tests, and headless Chromium to drive it.

:func:`serve` starts the dashboard in its own process group (as a user would, with the CLI),
waits until it answers, and stops it (SIGTERM, then SIGKILL) when the ``with`` block ends.
:func:`chromium` launches Debian's chromium through Playwright (no browser download); host
names can be pointed at 127.0.0.1 (``--host-resolver-rules``), which is how the DNS rebinding
and reverse-proxy tests reach the server under another name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
WAIT_MS = 60_000


def trainledger() -> list[str]:
    script = Path(sys.executable).with_name("trainledger")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainledger.cli"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_chromium() -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: tests/run.sh installs the Debian chromium package")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")


def wait_healthy(base: str, proc: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dashboard exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    pytest.fail(f"dashboard not healthy within {timeout_s} s:\n{log.read_text(errors='replace')[-3000:]}")


@dataclass
class Served:
    base: str  # http://127.0.0.1:PORT
    port: int
    url: str  # the ledger
    proc: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def stop(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def serve(tmp: Path, url: str, *args: str, env: Optional[dict[str, str]] = None,
          port: Optional[int] = None) -> Iterator[Served]:
    """`trainledger dashboard --port P --db URL ARGS` in ``tmp`` (P: ``port``, else a free one); yields once it
    answers on 127.0.0.1:P."""
    port = port or free_port()
    log = tmp / f"dashboard-{port}.log"
    child_env = {k: v for k, v in os.environ.items() if k not in ("TRAINLEDGER_AUTH_FILE", "TRAINLEDGER_DB_URL",
                                                                   "TRAINLEDGER_OIDC_CONFIG")}
    child_env.update(env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen([*trainledger(), "dashboard", "--port", str(port), "--db", url, *args],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp, env=child_env, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc, log)
        yield Served(base, port, url, proc, log)
    finally:
        stop(proc)


def chromium(p, *names: str):
    """Headless Debian chromium; each name in ``names`` resolves to 127.0.0.1 (as a rebinding attacker's would)."""
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)  # a loaded 2-core machine: assertions wait as long as page loads may take
    args = list(CHROMIUM_ARGS)
    if names:
        args.append("--host-resolver-rules=" + ", ".join(f"MAP {n} 127.0.0.1" for n in names))
    return p.chromium.launch(executable_path=CHROMIUM, args=args)


@contextlib.contextmanager
def evidence(page, served: Served, name: str) -> Iterator[None]:
    """On a failure inside the block, keep what the browser and the server saw: a screenshot, the page's text and
    the dashboard's log as test-artifacts/failures/NAME.png, NAME.txt and NAME.log, named in the error, with the
    log's last lines in the error itself (a failure seen only in full runs on a loaded machine is otherwise gone
    with the test's temporary directory, and CI keeps only what pytest prints)."""
    try:
        yield
    except BaseException as exc:
        out = Path(__file__).resolve().parents[2] / "test-artifacts" / "failures"
        out.mkdir(parents=True, exist_ok=True)
        kept = []
        for suffix, save in ((".png", lambda f: page.screenshot(path=str(f), full_page=True, timeout=30_000)),
                             (".txt", lambda f: f.write_text(page.inner_text("body", timeout=30_000))),
                             (".log", lambda f: f.write_text(served.log_text()))):
            f = out / f"{name}{suffix}"
            try:
                save(f)
                kept.append(str(f))
            except Exception as why:  # the page may be gone: keep what can be kept
                kept.append(f"{f.name}: not kept ({type(why).__name__})")
        exc.add_note("kept: " + ", ".join(kept))
        try:  # CI keeps only what pytest prints: the end of the dashboard's log goes with the error
            tail = served.log_text().splitlines()[-20:]
        except OSError as why:
            tail = [f"not readable ({type(why).__name__})"]
        exc.add_note("the dashboard's log, last lines:\n" + "\n".join(f"  {line}" for line in tail))
        raise


#: what Chromium's dynamic import() says when it could not fetch one of the Streamlit frontend's lazily loaded files
CHUNK_FAILED = "Failed to fetch dynamically imported module"


#: what the page shows of Streamlit's state: the app root's script state, the status widget's text (a script run, or
#: the connection's state), the skeletons left, and the fetches that did not get a 200 (URL and status; 0: none)
PAGE_STATE_JS = """() => ({
  ready: document.readyState,
  script: document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') ?? 'no app root',
  status: document.querySelector('[data-testid="stStatusWidget"]')?.innerText.replace(/\\s+/g, ' ').trim() ?? null,
  skeletons: document.querySelectorAll('[data-testid="stSkeleton"]').length,
  failed: [...new Set(performance.getEntriesByType('resource').filter(e => e.responseStatus !== 200)
    .map(e => `${e.name} status ${e.responseStatus}`))],
})"""


class NotDrawn(AssertionError):
    """The page did not settle in time; ``state`` is :data:`PAGE_STATE_JS`'s answer (None if it was unreadable)."""

    def __init__(self, message: str, state: Optional[dict]):
        super().__init__(message)
        self.state = state


#: the script states of a page whose frontend never started a script run: it did not boot (its code not fetched)
#: or never connected to the server; no script of the app has run in it
NEVER_RAN = ("initial", "no app root")


def _page_state(page) -> tuple[Optional[dict], str]:
    """:data:`PAGE_STATE_JS`'s answer and one line of it, for an error message."""
    try:
        st = page.evaluate(PAGE_STATE_JS)
    except Exception as why:  # the page may be mid-navigation or gone
        return None, f"page state not readable ({type(why).__name__})"
    return st, (f"document {st['ready']}, script {st['script']}, status widget {st['status']!r}, "
                f"{st['skeletons']} skeletons, fetches without a 200: {'; '.join(st['failed']) or 'none'}")


def _wait_drawn(page) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            "() => !!document.querySelector('[data-testid=\"stApp\"][data-test-script-state=\"notRunning\"]')"
            " && !document.querySelector('[data-testid=\"stStatusWidget\"]')"
            " && !document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=WAIT_MS)
    except PlaywrightTimeout:  # say where it stuck: a script run that never ended, no connection, a fetch
        state, line = _page_state(page)
        raise NotDrawn(f"{page.url}: not drawn after {WAIT_MS // 1000} s: {line}", state) from None


def _failed_chunks(page) -> list[str]:
    """The frontend files this page could not load: their URLs and HTTP status (0: no response) as the browser's
    resource timing saw them, or the error text shown where no entry names them; [] when every element loaded."""
    if not page.get_by_text(CHUNK_FAILED).count():
        return []
    seen = page.evaluate("() => performance.getEntriesByType('resource')"
                         ".filter(e => e.name.includes('/static/') && e.responseStatus !== 200)"
                         ".map(e => `${e.name} status ${e.responseStatus}`)")
    return seen or sorted(set(page.get_by_text(CHUNK_FAILED).all_inner_texts()))


def _load_failure(page) -> Optional[str]:
    """Wait for the page to be drawn (:func:`_wait_drawn`); what the browser failed to load, or None when it loaded
    and drew. A page that ran its script and still is not drawn raises :class:`NotDrawn`: that is the app's doing."""
    try:
        _wait_drawn(page)
    except NotDrawn as stuck:
        if stuck.state is None or stuck.state["script"] not in NEVER_RAN:
            raise  # a script run that never ended, or a page that ran and still waits: the app's, not the transfer's
        return str(stuck)
    failed = _failed_chunks(page)
    return f"{page.url}: the browser could not load {'; '.join(failed)}" if failed else None


def settle(page) -> None:
    """Wait until Streamlit has finished the script run and drawn its widgets.

    The state waited for is Streamlit's own: the app root's ``data-test-script-state`` is ``notRunning`` (it reads
    ``initial`` before the first run and ``running`` during one), and no status widget or skeleton is left. The
    status widget alone is not enough: Streamlit shows it only some time after a run starts, so on a loaded
    machine its absence can be seen before the page's script has drawn anything below the heading.

    A page the browser failed to load is loaded again once, with a warning saying what failed; a second failure
    fails the test. Failed to load: one of the frontend's lazily loaded files could not be fetched (an element
    then shows the TypeError ``CHUNK_FAILED`` in place of itself, and keeps it: the browser remembers a failed
    import for the page's life), or the frontend never started a script run (:data:`NEVER_RAN`: its code was not
    fetched, or it never connected to the server). Both were seen in full CI runs, caused by the multi-host tests'
    address changes (tests/hosts.py ``Fabric``, issue 38), which no longer happen; the reload stays for a machine
    whose addresses change under the tests. A script run that has not ended, or a page that ran and still shows a
    status widget or skeletons, fails at once, saying where the page stood (:class:`NotDrawn`).
    """
    failed = _load_failure(page)
    if failed is None:
        return
    warnings.warn(f"reloaded {failed}", stacklevel=2)
    page.reload()
    again = _load_failure(page)
    assert again is None, f"the page failed to load twice: {again}"


def open_expander(page, label: str):
    """Open the expander titled ``label`` (if it is not open) and wait until it stands still; returns its locator.

    Streamlit animates an expander's height as it opens (Web Animations on its ``<details>``, with an inline height
    and ``overflow: hidden`` until the animation ends), and animates again whenever its content resizes, e.g. as a
    table inside it draws. No script run is involved, so :func:`settle` does not see it. A click during it lands on
    a moving control: seen as a select whose menu never opened, and as an option click that did not take (the form
    then saved its default). So wait for the state itself: open, no animation, no inline height left.
    """
    from playwright.sync_api import expect

    box = page.get_by_test_id("stExpander").filter(has_text=label)
    details = box.locator("details")
    if details.get_attribute("open") is None:  # already open (kept across a rerun): a click would close it
        box.locator("summary").click()
    settle(page)
    expect(details).to_have_attribute("open", "")
    page.wait_for_function("d => d.getAnimations().length === 0 && d.style.height === ''",
                           arg=details.element_handle(), timeout=WAIT_MS)
    return box


@contextlib.contextmanager
def serve_demo(tmp_path_factory, name: str) -> Iterator[Served]:
    """The dashboard tests' demo ledger (tests/app/helpers.py ``build_ledger``) served by :func:`serve`."""
    from tests.app.helpers import build_ledger

    need_chromium()
    tmp = tmp_path_factory.mktemp(name)
    with serve(tmp, build_ledger(f"sqlite:///{tmp / 'ledger.db'}")) as s:
        yield s
