"""``trainledger exporter`` on the 100k-run ledger: what a Prometheus scrape costs, cached vs recomputed.

Measured in process, on the ledger of ``bench.gen`` (100k runs, 1M samples),
with "now" in the middle of its busiest month (the figures of a month to date,
its forecast and a budget per project):

* **refresh**: ``month_metrics`` (the monthly report to now, the forecast with
  its 7-day window and daily path, every budget's state) in a fresh session of
  a read-only engine, as the exporter's refresh runs it;
* **cached scrape**: ``generate_latest`` of the exporter's registry while its
  figures are fresh (``LedgerCollector`` with ``--refresh 60``): the text
  exposition only.

The ratio is cached ÷ refresh (informational). Beside it: the ledger-side cost
per minute of a 15 s scrape interval with ``--refresh 60`` (1 refresh + 3
cached scrapes) against recomputing on every scrape (4 refreshes).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from bench import Result, log, median


def run(quick: bool) -> Result:
    from prometheus_client import CollectorRegistry, generate_latest
    from sqlmodel import Session, delete, select
    from trainledger.money.outlook.budgets import set_budget
    from trainledger.reports.metrics import LedgerCollector, month_metrics
    from trainledger.store.db import make_engine, read_only_engine, session_scope
    from trainledger.store.models import Budget, Project

    from bench.gen import generate

    res = Result("exporter", "trainledger exporter: a cached scrape ÷ a refresh (100k runs)",
                 "a refresh of the month's figures (report, forecast, budgets)", None, "<=")
    n_runs = 2_000 if quick else 100_000
    repeats = 3 if quick else 7
    path, meta = generate(n_runs, n_runs * 10)
    month = meta["busiest_month"]
    y, m = map(int, month.split("-"))
    now = datetime(y, m, 15, 12, tzinfo=timezone.utc)
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    with session_scope(engine) as s:  # a budget per project and the team's (removed again below: the ledger is shared)
        for name in s.exec(select(Project.name).order_by(Project.name)).all():
            set_budget(s, "50000", project=name)
        set_budget(s, "5000000")
        budgets = len(s.exec(select(Budget.id)).all())
    ro = read_only_engine(url)
    try:
        with Session(ro) as s:  # warm-up: imports, statement caches
            families = month_metrics(s, now)
        log(f"exporter: {month} at {now:%Y-%m-%d %H:%M}, {budgets} budgets, {repeats} refreshes and cached scrapes …")
        refresh_s, cached_s = [], []
        collector = LedgerCollector(ro, refresh_s=3600, clock=lambda: now)
        registry = CollectorRegistry()
        registry.register(collector)
        body = generate_latest(registry)  # the first scrape refreshes
        for _ in range(repeats):
            t0 = time.perf_counter()
            with Session(ro) as s:
                month_metrics(s, now)
            refresh_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            generate_latest(registry)
            cached_s.append(time.perf_counter() - t0)
    finally:
        ro.dispose()
        with session_scope(engine) as s:
            s.exec(delete(Budget))
        engine.dispose()
    r, c = median(refresh_s), median(cached_s)
    res.ratio = c / r
    per_minute_cached, per_minute_uncached = r + 3 * c, 4 * r
    res.measured.update({"runs": n_runs, "month": month, "now": now.isoformat(), "budgets": budgets,
                         "series": sum(len(f.samples) for f in families), "body_bytes": len(body),
                         "refresh_s": round(r, 4), "cached_scrape_s": round(c, 5),
                         "refresh_all_s": [round(x, 4) for x in refresh_s], "cached_all_s": [round(x, 5) for x in cached_s],
                         "per_minute_15s_scrapes_refresh_60_s": round(per_minute_cached, 4),
                         "per_minute_15s_scrapes_uncached_s": round(per_minute_uncached, 4),
                         "rollup_rebuild_s": meta.get("rollup_rebuild_s")})
    res.target_text = "informational"
    res.absolute = (f"cached scrape {c * 1000:.2f} ms vs refresh {r:.3f} s ({n_runs:,} runs, {month}, {budgets} budgets); "
                    f"15 s scrapes: {per_minute_cached:.2f} s/min with --refresh 60 vs {per_minute_uncached:.2f} uncached")
    res.notes.append(f"a 15 s scrape interval with --refresh 60 costs {per_minute_cached / per_minute_uncached:.2f}× "
                     "what recomputing on every scrape would")
    return res
