"""``trainledger exporter``: the current month's cost figures on ``/metrics`` for Prometheus.

    trainledger exporter --port 9440                      # http://127.0.0.1:9440/metrics
    trainledger exporter --port 9440 --host 0.0.0.0       # for a Prometheus on another machine

Served by :mod:`trainledger.sources.telemetry.metrics_http` (GET only; the dashboard's Host
allow-list against DNS rebinding, ``--allowed-host NAME`` for a reverse proxy's
name; header and idle timeouts; a bounded number of connections). The
figures (``ledger/reports/metrics.py``) are recomputed at most every
``--refresh`` seconds, so a 15 s scrape interval costs one computation a
minute. The exporter writes nothing: at start it brings the ledger's schema and
rollup up to date as every command does, then reads through a read-only
connection (SQLite ``query_only``, PostgreSQL read-only transactions).
Alerting rules: deploy/alerts/; Grafana: deploy/grafana/ (docs/PROMETHEUS.md).
"""

from __future__ import annotations

import signal
import threading
from typing import Annotated, Optional

import typer
from trainledger.cli.common import DbOpt, NowOpt, command
from trainledger.errors import LedgerInputError

DEFAULT_PORT = 9440


@command
def exporter_command(
        port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port of /metrics.")] = DEFAULT_PORT,
        host: Annotated[str, typer.Option(help="Address to bind (default loopback only; 0.0.0.0 for every interface).")] = "127.0.0.1",
        refresh: Annotated[float, typer.Option(min=1, max=86400, help="Recompute the figures at most every this many seconds.")] = 60.0,
        window: Annotated[int, typer.Option("--window", min=1, max=90, help="Days of run rate the forecast uses.")] = 7,
        allowed_host: Annotated[Optional[list[str]], typer.Option("--allowed-host", help="A host name clients use to reach the exporter, e.g. through a reverse proxy (repeatable; *.example.com for subdomains). Requests naming any other host are refused (DNS rebinding protection); loopback names and IP addresses always pass, and this machine's names when --host is not loopback.", show_default=False)] = None,
        db: DbOpt = None, now: NowOpt = None) -> None:
    """Serve the month's spend, forecast, budgets and their states, idle and waste cost, GPU time, time
    utilization and running runs as Prometheus metrics (read-only)."""
    from prometheus_client import CollectorRegistry
    from sqlmodel import Session
    from trainledger.money.facts import rollup
    from trainledger.reports.metrics import LedgerCollector, month_metrics
    from trainledger.sources.telemetry.hosts import parse_allowed
    from trainledger.sources.telemetry.metrics_http import serve
    from trainledger.store.db import make_engine, read_only_engine, redact_url, resolve_url, session_scope
    from trainledger.store.types import report_clock

    try:
        allowed = parse_allowed(allowed_host or [])
    except ValueError as exc:
        raise LedgerInputError(str(exc)) from None
    url = resolve_url(db)
    report_clock(now)  # a bad --now fails here, before anything starts
    engine = make_engine(url)  # schema upgraded, as every command does
    with session_scope(engine) as s:
        rollup.ensure(s)
    engine.dispose()
    ro = read_only_engine(url)
    collector = LedgerCollector(ro, refresh_s=refresh, window_days=window, clock=lambda: report_clock(now))
    with Session(ro) as s:  # the figures once, so that a ledger that cannot be costed fails now, in one line
        month_metrics(s, report_clock(now), window)
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        server, _thread = serve(registry, host, port, allowed)
    except OSError as exc:
        raise LedgerInputError(f"--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"trainledger exporter on http://{shown}:{port}/metrics (figures recomputed at most every "
               f"{refresh:g} s); ledger {redact_url(url)}", err=True)
    _serve_until_signal(server)


def _serve_until_signal(server) -> None:
    stop = threading.Event()

    def _stop(_signum, _frame):
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.shutdown()
        server.server_close()


def register(root: typer.Typer) -> None:
    root.command("exporter")(exporter_command)
