"""Goodput: ``goodput_account`` of the busiest month over the generated ledger, as a ratio to the monthly report
with its run lines (what ``report monthly`` computes) on the same ledger; and ``run.phase`` per call.

* ratio = median wall of ``trainledger.money.goodput.account.goodput_account(month)`` ÷ median wall of
  ``monthly_report(month, lines=True)``, in process, same session, after a warm-up of each. The account
  includes its own monthly report, so the ratio is ≥ 1; target ≤ 2 (issue #25).
* ``run.phase``: a real ``trainledger.track`` run (SQLite ledger and journal in a temporary directory, its writer
  thread running) times ``with run.phase("eval"): pass`` N times; µs per call, target ≤ 20 µs. Beside it:
  the writer thread's aggregation per event (``PhaseAggregator.feed``), which the training step never waits for.

``python -m bench.goodput [--runs N]`` runs it alone (default: 1M runs; the ledger is cached by bench.gen).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench import Result, log, median


def _account_vs_report(url: str, month: str, repeats: int) -> tuple[list[float], list[float], dict]:
    from sqlmodel import Session
    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.goodput.account import goodput_account
    from trainledger.store.db import make_engine

    engine = make_engine(url)
    acc_t, rep_t, check = [], [], {}
    try:
        with Session(engine) as s:
            monthly_report(s, month, lines=True, projects=False)  # warm-up: page cache, rate caches
            for _ in range(repeats):
                t0 = time.perf_counter()
                rep = monthly_report(s, month, lines=True, projects=False)
                rep_t.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                acc = goodput_account(s, month=month)
                acc_t.append(time.perf_counter() - t0)
            m = acc.months[0]
            check = {"lines": len(rep.runs), "identity": str(m.goodput + m.badput + m.idle - m.spend),
                     "identity_residual": str(m.identity_residual), "goodput_pct": str(round(m.goodput_pct or 0, 2))}
    finally:
        engine.dispose()
    return acc_t, rep_t, check


def phase_call_us(n: int) -> tuple[float, float]:
    """µs per ``with run.phase(...)`` in a real tracked run, and µs per event folded on the writer thread."""
    import trainledger
    from trainledger.sources.record.phases import PhaseAggregator

    with tempfile.TemporaryDirectory(prefix="tl-bench-phase-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        with trainledger.track(project="bench", db=url, journal_dir=Path(tmp) / "journal", flush_s=0.5) as run:
            with run.phase("eval"):  # warm-up
                pass
            t0 = time.perf_counter()
            for _ in range(n):
                with run.phase("eval"):
                    pass
            took = time.perf_counter() - t0
        events = [(0, "eval", 1.0 + i * 1e-6) if i % 2 == 0 else (1, "eval", 1.0 + i * 1e-6) for i in range(2 * n)]
        agg = PhaseAggregator(0.0)
        t0 = time.perf_counter()
        agg.feed(events)
        fold = time.perf_counter() - t0
    return took / n * 1e6, fold / len(events) * 1e6


def run(quick: bool, n_runs: int | None = None) -> Result:
    from bench.gen import generate

    res = Result("goodput", "goodput account of the busiest month (in process)",
                 "monthly_report(month, lines=True) on the same ledger", 2.0, "<=")
    n_runs = n_runs or (5_000 if quick else 1_000_000)
    repeats = 2 if quick else 3
    path, meta = generate(n_runs, 0)
    month = meta["busiest_month"]
    log(f"goodput: goodput_account vs monthly_report × {repeats} over {n_runs:,} runs ({month}) …")
    acc_t, rep_t, check = _account_vs_report(f"sqlite:///{path}", month, repeats)
    res.ratio = median(acc_t) / median(rep_t)
    per_call, fold = phase_call_us(5_000 if quick else 200_000)
    res.measured.update({"runs": n_runs, "month": month, "repeats": repeats, "goodput_s": round(median(acc_t), 3),
                         "monthly_report_s": round(median(rep_t), 3), "phase_call_us": round(per_call, 3),
                         "phase_fold_us_per_event": round(fold, 3), **check})
    res.extra_targets.append({"what": "run.phase µs per call", "value": round(per_call, 3), "op": "<=", "target": 20.0})
    res.target_text = "≤ 2× report; run.phase ≤ 20 µs"
    res.absolute = (f"goodput {median(acc_t):.2f} s vs report {median(rep_t):.2f} s ({check['lines']:,} run lines of "
                    f"{month}); run.phase {per_call:.2f} µs/call, writer fold {fold:.2f} µs/event")
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    r = run(a.quick, a.runs)
    print(json.dumps({"ratio": r.ratio, **r.measured}, indent=2))


if __name__ == "__main__":
    main()
