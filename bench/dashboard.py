"""Dashboard Overview render: a 100k-run ledger ÷ an empty ledger, both cold.

Streamlit's ``AppTest`` runs ``app/main.py`` (``st.navigation``; the Overview is
the default page) with ``?month=`` the ledger's busiest month, the way
tests/app drive the pages. Before every render the caches are cleared (``data.clear_caches``),
so each render computes its figures (the month's report and the 12-month trend)
from the ledger. Renders alternate (empty, full, empty, full, …); the medians
are compared. The ledgers: ``bench.gen`` (100k runs, 1M samples) and a fresh
ledger with the presets only.

Target (SPEC §11, issue 39): ≤ 2 × the empty ledger and ≤ 1.5 s; every other page ≤ 2 s, each rendered cold
the same way (the Overview first, then a switch to the page: the page's own render is timed).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench import ROOT, Result, log, median

APP_MAIN = ROOT / "app" / "main.py"


#: the pages timed besides the Overview (app/pages/<name>.py)
PAGES = ("runs", "goodput", "rent_vs_own", "roi", "strategies", "planner", "export", "settings", "invoices", "launch")
QUICK_PAGES = ("runs",)


def render(url: str, month: str, page: str = "overview") -> float:
    """Seconds for one cold render of ``page`` of ``url`` at ``month``; raises on an app exception."""
    from streamlit.testing.v1 import AppTest
    from trainledger.app.queries.data import clear_caches

    os.environ["TRAINLEDGER_DB_URL"] = url
    clear_caches()
    at = AppTest.from_file(str(APP_MAIN), default_timeout=600)
    at.query_params["month"] = month
    if page != "overview":
        at.run()
        clear_caches()  # the page's own figures, cold
        t0 = time.perf_counter()
        at.switch_page(f"pages/{page}.py").run()
    else:
        t0 = time.perf_counter()
        at.run()
    took = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"{page} raised: {[e.value for e in at.exception][:1]}")
    if at.error:
        raise RuntimeError(f"{page} showed an error: {[e.value for e in at.error][:1]}")
    if page == "overview" and (not at.title or at.title[0].value != "Overview"):
        raise RuntimeError(f"expected the Overview page, got {[t.value for t in at.title]}")
    if not at.title:
        raise RuntimeError(f"{page}: no title")
    return took


def run(quick: bool) -> Result:
    from streamlit import config
    from streamlit.logger import set_log_level
    from trainledger.store.db import make_engine

    from bench.gen import generate

    res = Result("dashboard", "dashboard Overview render, cold (AppTest)", "the same render over an empty ledger", 2.0, "<=")
    n_runs = 2_000 if quick else 100_000
    repeats = 1 if quick else 5
    path, meta = generate(n_runs, n_runs * 10)
    month = meta["busiest_month"]
    saved = {k: os.environ.get(k) for k in ("TRAINLEDGER_DB_URL", "TRAINLEDGER_AUTH_FILE")}
    os.environ.pop("TRAINLEDGER_AUTH_FILE", None)
    config.set_option("server.address", "127.0.0.1")
    set_log_level("error")  # AppTest's bare-mode warnings
    try:
        with tempfile.TemporaryDirectory(prefix="tl-bench-dash-") as tmp:
            empty = f"sqlite:///{Path(tmp) / 'empty.db'}"
            make_engine(empty).dispose()
            full = f"sqlite:///{path}"
            log(f"dashboard: Overview of {month}, {repeats} cold renders each (empty / {n_runs:,} runs) …")
            render(empty, month)  # warm-up: imports, engines, schema checks
            if not quick:
                render(full, month)
            e_s, f_s = [], []
            for _ in range(repeats):
                e_s.append(render(empty, month))
                f_s.append(render(full, month))
            pages: dict[str, list[float]] = {}
            for page in (QUICK_PAGES if quick else PAGES):  # each page cold, 3 renders (1 quick), the median
                pages[page] = [render(full, month, page) for _ in range(1 if quick else 3)]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        from trainledger.store.db import get_engine

        get_engine.cache_clear()
    res.ratio = median(f_s) / median(e_s)
    res.measured.update({"runs": n_runs, "month": month, "renders": repeats,
                         "full_s": round(median(f_s), 4), "empty_s": round(median(e_s), 4),
                         "full_all_s": [round(x, 4) for x in f_s], "empty_all_s": [round(x, 4) for x in e_s],
                         "rollup_rebuild_s": meta.get("rollup_rebuild_s")})
    res.target_text = "≤ 2× and ≤ 1.5 s"
    res.absolute = f"{n_runs:,} runs {median(f_s):.2f} s vs empty {median(e_s):.2f} s (cold, {month})"
    res.extra_targets.append({"what": "full-ledger render seconds", "value": round(median(f_s), 4), "op": "<=", "target": 1.5})
    res.measured["pages_s"] = {p: round(median(v), 4) for p, v in pages.items()}
    for p, v in pages.items():
        res.extra_targets.append({"what": f"{p} page render seconds", "value": round(median(v), 4), "op": "<=",
                                  "target": 2.0})
    slow = {p: v for p, v in res.measured["pages_s"].items() if v > 2.0}
    if slow:
        res.notes.append("pages over 2 s: " + ", ".join(f"{p} {v:.2f} s" for p, v in slow.items()))
    return res
