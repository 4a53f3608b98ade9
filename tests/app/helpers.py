"""Builders for the dashboard tests: a demo ledger with a few hand-built runs, and AppTest on app/main.py.

The ledger is ``trainledger demo --end-month 2026-11`` (``generate_demo`` with
a fixed clock) plus runs whose costs are known exactly:

* ``hand-elastic-1``: 2 nodes × 10 h on rtx4090-rent (3,600/730 per node-hour,
  billed per started hour) = 2 × 10 × 3,600 ÷ 730 = 98.63 CNY;
* ``hand-cpu-1``: a CPU-only run (MFU null, busy share from the process);
* sweep ``sweep-2026-11-a``: zero1, zero2 and 3d for one hour each on 2 rented nodes;
* exchange rates CNY→USD (:data:`RATES`), so pages can present the ledger in dollars.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP_MAIN = REPO / "app" / "main.py"
MONTH = "2026-11"
DEMO_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
SWEEP = "sweep-2026-11-a"
UTC = timezone.utc
#: CNY→USD from the first day of the demo, and a new rate from November (month boundaries: no mid-month cut)
RATES = (("0.1380", "2026-06-01"), ("0.1401", "2026-11-01"))


def add_hand_runs(session) -> None:
    from tests.helpers import add_run

    add_run(session, "hand-elastic-1", datetime(2026, 11, 20, tzinfo=UTC), 10, nodes=2, offer_name="rtx4090-rent",
            project="hand", user="dana", tokens=1_000_000_000, gpu_util=0.5)
    cpu = add_run(session, "hand-cpu-1", datetime(2026, 11, 21, tzinfo=UTC), 0.5, nodes=1, offer_name="rtx4090-rent",
                  project="hand", user="dana", tokens=2_000_000)
    cpu.util_source, cpu.gpu_util_mean, cpu.mfu = "cpu", 0.97, None
    # a sweep: same model, three strategies, 2 rented nodes, one hour each
    figures = {  # strategy: (dp, tp, pp, zero, tokens, mfu, util, peak GiB, comm share, step s)
        "zero1": (16, 1, 1, 1, 90_000_000, 0.31, 0.90, 21.5, 0.10, 2.0),
        "zero2": (16, 1, 1, 2, 80_000_000, 0.28, 0.88, 17.0, 0.14, 2.2),
        "3d": (4, 2, 2, 1, 100_000_000, 0.34, 0.93, 14.0, 0.22, 1.8),
    }
    start = datetime(2026, 11, 25, 8, tzinfo=UTC)
    for i, (strategy, (dp, tp, pp, zero, tokens, mfu, util, gib, comm, step)) in enumerate(figures.items()):
        r = add_run(session, f"sweep-a-{strategy}", start + timedelta(hours=2 * i), 1, nodes=2,
                    offer_name="rtx4090-rent", project="hand", user="dana", tokens=tokens, gpu_util=util)
        r.strategy, r.dp, r.tp, r.pp, r.zero_stage, r.sweep_id = strategy, dp, tp, pp, zero, SWEEP
        r.micro_batch, r.grad_accum, r.step_time_median_s, r.mfu = 4, 8, step, mfu
        r.peak_mem_bytes, r.comm_share, r.tokens_per_s = int(gib * 2**30), comm, tokens / 3600
        r.tokens_per_epoch, r.mem_kind = 180_000_000, "cuda_max_allocated"
    session.flush()


def build_ledger(url: str) -> str:
    """The demo ledger for 2026-06..2026-11 plus the hand-built runs, at ``url``."""
    from trainledger.demo import generate_demo
    from trainledger.store.catalog.fx import set_rate
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(url)
    with session_scope(engine) as s:
        generate_demo(s, end_month=MONTH, now=DEMO_NOW)
        add_hand_runs(s)
        for rate, day in RATES:
            set_rate(s, "CNY", "USD", rate, day, "test")
    engine.dispose()
    return url


def with_session(url: str, fn):
    """``fn(session)`` on a fresh engine for ``url``, disposed afterwards (a test reading the ledger a page shows)."""
    from sqlmodel import Session
    from trainledger.store.db import make_engine

    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return fn(s)
    finally:
        engine.dispose()


def make_app(month: str = MONTH, **query):
    """AppTest on app/main.py with ?month=MONTH (and other query parameters)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP_MAIN), default_timeout=60)
    at.query_params["month"] = month
    for k, v in query.items():
        at.query_params[k] = v
    return at


def run_page(at, page: str):
    """Run the app, then switch to ``pages/<page>.py``; fail on an exception in the script."""
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if page != "overview":
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at) -> dict[str, str]:
    return {plain(m.label): m.value for m in at.metric}


def plain(markdown: str) -> str:
    """Markdown source as the reader sees it: backslash escapes and the invisible word joiners of ``trainledger.app.views.ui.md`` removed."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


def sign_in(at, user: str, password: str, client: str = "apptest"):
    """Sign in as the HTTP form does (``trainledger.app.serving.signin.attempt`` + ``trainledger.app.serving.sessions.create``, under a fresh throttle),
    hand the session token to the AppTest session as the cookie would, and run the app.

    AppTest cannot carry cookies, so the token goes where ``trainledger.app.views.access`` keeps the
    cookie's token for the life of a connection. Returns the sign-in attempt.
    """
    import os

    from trainledger.app.serving import sessions
    from trainledger.app.serving.auth import load_auth_file
    from trainledger.app.serving.signin import attempt
    from trainledger.app.serving.throttle import Throttle
    from trainledger.app.views.access import TOKEN_KEY
    from trainledger.store.db import resolve_url

    result = attempt(load_auth_file(os.environ["TRAINLEDGER_AUTH_FILE"]), user, password, client, throttle=Throttle())
    if result.entry is not None:
        at.session_state[TOKEN_KEY] = sessions.create(resolve_url(None), result.entry)[0]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return result


def set_role(users_file, user: str, role: str) -> None:
    """Change ``user``'s role in the auth file, keeping the password hash (their session stays valid), as an admin would."""
    import os
    import tomllib

    from trainledger.app.serving.auth import ROLES

    assert role in ROLES
    users = tomllib.loads(users_file.read_text())["users"]
    users[user]["role"] = role
    users_file.write_text("".join(f'[users.{name}]\nrole = "{u["role"]}"\npassword_hash = "{u["password_hash"]}"\n'
                                  for name, u in users.items()))
    st_ = users_file.stat()
    os.utime(users_file, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))  # a new mtime: re-read at once
