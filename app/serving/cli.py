"""``trainledger dashboard``: serve the Streamlit dashboard (registered by ledger/cli.py).

    trainledger dashboard                                   # http://127.0.0.1:8501, local use: everyone is a lead
    trainledger dashboard --host 0.0.0.0 --auth-file users.toml   # other machines: sign-in required
    trainledger dashboard --auth-file users.toml --allowed-host dash.example.com   # behind a reverse proxy
    trainledger dashboard --host 0.0.0.0 --oidc-config oidc.toml  # sign-in through an OpenID provider (docs/SECURITY.md)

Streamlit is started as an argument list (never a shell string), through
app/serving/serve.py: ``streamlit run app/serving/asgi.py`` (the app behind the Host/Origin
allow-list and the sign-in routes), with Streamlit's older pages-folder mode
off and error details off (``client.showErrorDetails none``: no traceback
reaches a browser). The ledger URL travels in the environment
(``TRAINLEDGER_DB_URL``), not on the command line, so a password in it never
shows in ``ps``. Usage statistics are off. This module imports neither
Streamlit nor the ledger CLI at import time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

MAIN_SCRIPT = Path(__file__).parents[1] / "main.py"
ASGI_SCRIPT = Path(__file__).with_name("asgi.py")
AUTH_ENV = "TRAINLEDGER_AUTH_FILE"
OIDC_ENV = "TRAINLEDGER_OIDC_CONFIG"  # = trainledger.app.serving.oidc.OIDC_ENV (not imported: keeps --help light)


def is_loopback(host: Optional[str]) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``; an empty address means every interface (not loopback)."""
    from trainledger.app.serving.guard import is_loopback_name

    return bool(host) and is_loopback_name(host.strip("[]"))


def streamlit_argv(host: str, port: int) -> list[str]:
    """The command that serves the dashboard (no secrets in it): ``streamlit run app/serving/asgi.py`` through app/serving/serve.py.

    ``client.showErrorDetails none``: an exception shows no message, type or
    trace in the browser (the legacy value ``false`` would still show the trace).
    """
    return [sys.executable, "-m", "trainledger.app.serving.serve", "run", str(ASGI_SCRIPT),
            "--server.address", host, "--server.port", str(port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            "--server.runOnSave", "false", "--client.toolbarMode", "minimal", "--client.showErrorDetails", "none"]


def streamlit_env(url: str, auth_file: Optional[Path], allowed_hosts: tuple[str, ...] = (),
                  oidc_config: Optional[Path] = None) -> dict[str, str]:
    """The child's environment: the ledger URL, the auth file, the OIDC configuration and the allowed host names;
    telemetry off. The OIDC client secret stays in its file or variable (never copied here)."""
    from trainledger.app.serving.guard import ALLOWED_HOSTS_ENV

    env = dict(os.environ)
    env["TRAINLEDGER_DB_URL"] = url
    env["STREAMLIT_BROWSER_GATHER_USAGE_STATS"] = "false"
    if auth_file is not None:
        env[AUTH_ENV] = str(Path(auth_file).resolve())
    else:
        env.pop(AUTH_ENV, None)
    if oidc_config is not None:
        env[OIDC_ENV] = str(Path(oidc_config).resolve())
    else:
        env.pop(OIDC_ENV, None)
    env[ALLOWED_HOSTS_ENV] = ",".join(allowed_hosts)
    return env


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def first_unprivileged_port() -> int:
    """The lowest port any user may listen on (Linux: ``net.ipv4.ip_unprivileged_port_start``, else 1024)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    except (OSError, ValueError):
        return 1024


def unusable_port(host: str, port: int) -> Optional[str]:
    """Why the server could not listen on ``host``:``port``, for the two reasons the user fixes with ``--port`` (it
    is taken, or privileged: under 1024 on most systems), or None. Binds as the server will (``SO_REUSEADDR``: a port left in
    TIME_WAIT is free) and lets go at once; any other failure is the server's to report."""
    import errno
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return "is in use (another dashboard?)"
        if exc.errno == errno.EACCES:
            return f"needs privileges to listen on (ports under {first_unprivileged_port()})"
        return None
    finally:
        sock.close()
    return None


def _check_oidc(path: Path) -> None:
    """The OIDC configuration, its mapping and its secret are usable, and Authlib is installed; else exit 2."""
    from trainledger.app.serving.oidc import OidcConfigError, load_config

    try:
        load_config(path).client_secret()
    except OidcConfigError as exc:
        _fail(str(exc))
    import importlib.util

    if importlib.util.find_spec("authlib") is None or importlib.util.find_spec("joserfc") is None:
        _fail("--oidc-config needs Authlib: pip install 'trainledger[oidc]'")


def dashboard_command(
    host: Annotated[str, typer.Option(help="Address to bind. Anything but loopback (127.0.0.1, ::1, localhost) needs --auth-file.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8501,
    db: Annotated[Optional[str], typer.Option("--db", help="Ledger URL (sqlite:///PATH or postgresql+psycopg://USER@HOST/DB). Default: $TRAINLEDGER_DB_URL, else the embedded SQLite file.", show_default=False)] = None,
    auth_file: Annotated[Optional[Path], typer.Option("--auth-file", envvar=AUTH_ENV, show_envvar=True, help="TOML file of users (role viewer|lead, PBKDF2 hash); create entries with `python -m trainledger.app.serving.auth hash NAME --role lead`. Sign-in is then required.")] = None,
    allowed_host: Annotated[Optional[list[str]], typer.Option("--allowed-host", help="A host name browsers use to reach the dashboard, e.g. through a reverse proxy (repeatable; *.example.com for subdomains). Requests naming any other host are refused (DNS rebinding protection). Needs --auth-file.", show_default=False)] = None,
    oidc_config: Annotated[Optional[Path], typer.Option("--oidc-config", envvar=OIDC_ENV, show_envvar=True, help="TOML file of OpenID Connect sign-in: issuer, client_id, client_secret_file or client_secret_env, and the [[map]] rules from groups to roles (docs/SECURITY.md). Alone or with --auth-file (the sign-in page then offers both). Needs `pip install 'trainledger[oidc]'`.", show_default=False)] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Open the demo's own ledger (what `trainledger demo` fills: demo.db in the user data dir) instead of yours.")] = False,
) -> None:
    """Serve the Streamlit dashboard (binds 127.0.0.1 unless --auth-file is given)."""
    from sqlalchemy.exc import OperationalError
    from trainledger.app.serving.auth import AuthFileError, load_auth_file
    from trainledger.app.serving.guard import parse_allowed
    from trainledger.store.db import LedgerURLError, make_engine, redact_url, resolve_url

    try:
        allowed = parse_allowed(allowed_host or [])
    except ValueError as exc:
        _fail(str(exc))
    signin = auth_file is not None or oidc_config is not None
    if allowed and not signin:
        _fail("--allowed-host needs --auth-file or --oidc-config: without sign-in the dashboard answers only loopback names "
              "(localhost, 127.0.0.1), where everyone is a lead")

    if demo and db:
        _fail("--demo opens the demo's own ledger: drop --db, or drop --demo to open --db")
    try:
        from trainledger.store.defaults import demo_ledger_url

        url = demo_ledger_url() if demo else resolve_url(db)
    except LedgerURLError as exc:
        _fail(str(exc))
    users: dict = {}
    if auth_file is not None:
        try:
            users = load_auth_file(auth_file)
        except AuthFileError as exc:
            _fail(str(exc))
    if oidc_config is not None:
        _check_oidc(oidc_config)
    if not signin and not is_loopback(host):
        _fail(f"--host {host} is not a loopback address and no --auth-file is set (nor --oidc-config): "
              "pass --auth-file FILE (see `python -m trainledger.app.serving.auth hash --help`) or bind 127.0.0.1")
    try:  # upgrade an empty or older ledger now, and fail early if it cannot be reached
        make_engine(url).dispose()
    except LedgerURLError as exc:
        _fail(str(exc))
    except OperationalError as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        _fail(f"cannot use the ledger at {redact_url(url)}: {reason}", code=1)

    shown = f"[{host}]" if ":" in host else host
    taken = unusable_port(host, port)
    if taken:  # before the banner: Streamlit would print it first, then fail on its own
        _fail(f"--port {port}: {shown}:{port} {taken}; pass a free --port")
    ways = ([f"{len(users)} users"] if auth_file is not None else []) + (["OpenID Connect"] if oidc_config else [])
    who = f"sign-in required ({', '.join(ways)})" if signin else "local use, no sign-in"
    typer.echo(f"trainledger dashboard on http://{shown}:{port} ({who}); ledger {redact_url(url)}", err=True)
    proc = subprocess.Popen(streamlit_argv(host, port), env=streamlit_env(url, auth_file, allowed, oidc_config))

    def _forward(signum, _frame):  # stop Streamlit with us
        proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, _forward)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    raise typer.Exit(0 if rc in (0, -signal.SIGTERM, -signal.SIGINT) else rc)
