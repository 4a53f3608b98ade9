"""Ingest on SQLite: ``trainledger.store.ingest.insert_samples`` rows/s ÷ raw ``sqlite3.executemany`` rows/s.

Both write the same ``MetricSample`` rows into the same empty table of a fresh
ledger file (a copy of one template: schema from ``make_engine``, the runs the
rows belong to), with the settings ``trainledger.store.db.make_engine`` gives SQLite (WAL,
synchronous=NORMAL, foreign keys on, ``BEGIN IMMEDIATE``), commit included.

* baseline: ``sqlite3`` ``executemany`` of a plain ``INSERT`` with pre-formatted
  tuples (no conflict handling, timestamps already text: the best case);
* measured: ``insert_samples(session, rows)`` from what callers hold (aware
  datetimes), insert-once semantics (``ON CONFLICT DO NOTHING``).

Trials alternate (raw, API, raw, API, …); the ratio is the median of the
per-pair ratios, so load on a shared machine hits both sides alike. For
reference (not judged) the previous SQLAlchemy Core path of
``ledger/journal.py`` (``insert().on_conflict_do_nothing()`` with dict rows,
5,000 per execute) is timed once.

Target (SPEC §11): ≥ 0.5.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import Result, log, median

METRICS = ("loss", "step_seconds", "tokens", "gpu_util")
T0 = datetime(2026, 11, 3, 8, 0, tzinfo=timezone.utc)


def sample_rows(n: int, runs: int = 50) -> list[tuple]:
    """``n`` rows (run_id, node, gpu, metric, ts, value) over ``runs`` runs, ts aware UTC, 1 s apart per series."""
    out = []
    per_run = -(-n // runs)
    for r in range(runs):
        rid = f"ingest-{r:04d}"
        for i in range(per_run):
            if len(out) == n:
                return out
            m = METRICS[i % len(METRICS)]
            out.append((rid, "node-0", i % 8 - 1 if m == "gpu_util" else -1, m,
                        T0 + timedelta(seconds=i // len(METRICS), microseconds=r), float(i) * 0.001))
    return out


def make_template(directory: Path, runs: int = 50) -> Path:
    from sqlmodel import Session, select
    from trainledger.store.db import make_engine
    from trainledger.store.models import NodeType, Run, RunStatus

    path = directory / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    with Session(engine) as s:
        nt = s.exec(select(NodeType).where(NodeType.name == "rtx4090-8x")).one()
        for r in range(runs):
            s.add(Run(id=f"ingest-{r:04d}", node_type_id=nt.id, nodes=1, gpus_per_node=8, status=RunStatus.succeeded,
                      started_at=T0, ended_at=T0 + timedelta(hours=1)))
        s.commit()
    engine.dispose()
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path


def _fresh(template: Path, directory: Path, name: str) -> Path:
    path = directory / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(template, path)
    return path


def raw_insert(path: Path, text_rows: list[tuple]) -> float:
    """The baseline: raw sqlite3 with make_engine's settings; seconds for executemany + commit."""
    con = sqlite3.connect(path, isolation_level=None, timeout=60)
    for pragma in ("busy_timeout=60000", "journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
        con.execute(f"PRAGMA {pragma}")
    t0 = time.perf_counter()
    con.execute("BEGIN IMMEDIATE")
    con.executemany("INSERT INTO metric_sample (run_id, node, gpu, metric, ts, value) VALUES (?, ?, ?, ?, ?, ?)", text_rows)
    con.execute("COMMIT")
    took = time.perf_counter() - t0
    con.close()
    return took


def api_insert(path: Path, rows: list[tuple]) -> tuple[float, int]:
    from sqlmodel import Session
    from trainledger.store.db import make_engine
    from trainledger.store.ingest import insert_samples

    engine = make_engine(f"sqlite:///{path}", upgrade=False)
    with engine.connect() as c:  # open the pooled connection (pragmas) before timing
        c.exec_driver_sql("SELECT 1")
    with Session(engine) as s:
        t0 = time.perf_counter()
        n = insert_samples(s, rows)
        s.commit()
        took = time.perf_counter() - t0
    engine.dispose()
    return took, n


def core_insert(path: Path, rows: list[tuple]) -> float:
    """The previous path (ledger/journal.py ``_insert_samples``): Core insert … on_conflict_do_nothing, dict rows."""
    from sqlalchemy.dialects.sqlite import insert
    from sqlmodel import Session
    from trainledger.store.db import make_engine
    from trainledger.store.models import MetricSample

    engine = make_engine(f"sqlite:///{path}", upgrade=False)
    with engine.connect() as c:
        c.exec_driver_sql("SELECT 1")
    stmt = insert(MetricSample.__table__).on_conflict_do_nothing(index_elements=["run_id", "node", "gpu", "metric", "ts"])
    with Session(engine) as s:
        t0 = time.perf_counter()
        values = [{"run_id": r[0], "node": r[1], "gpu": r[2], "metric": r[3], "ts": r[4], "value": r[5]} for r in rows]
        for i in range(0, len(values), 5000):
            s.execute(stmt, values[i:i + 5000])
        s.commit()
        took = time.perf_counter() - t0
    engine.dispose()
    return took


def run(quick: bool) -> Result:
    from trainledger.store.ingest import _sqlite_ts

    res = Result("ingest_sqlite", "ingest MetricSample on SQLite (trainledger.store.ingest)", "raw sqlite3.executemany, same table and settings",
                 0.5, ">=")
    n = 20_000 if quick else 200_000
    pairs = 2 if quick else 5
    rows = sample_rows(n)
    text_rows = [(r[0], r[1], r[2], r[3], _sqlite_ts(r[4]), r[5]) for r in rows]
    with tempfile.TemporaryDirectory(prefix="tl-bench-ingest-") as tmp:
        d = Path(tmp)
        template = make_template(d)
        log(f"ingest: {n:,} rows, {pairs} raw/API pairs …")
        raw_s, api_s, ratios = [], [], []
        for i in range(pairs):
            r = raw_insert(_fresh(template, d, f"raw{i}.db"), text_rows)
            a, written = api_insert(_fresh(template, d, f"api{i}.db"), rows)
            if written != n:
                raise AssertionError(f"insert_samples wrote {written} of {n} rows")
            raw_s.append(r)
            api_s.append(a)
            ratios.append(r / a)  # (n/a) ÷ (n/r)
        # replay: the same rows again into a full table (all skipped), and the previous Core path once
        path = _fresh(template, d, "replay.db")
        api_insert(path, rows)
        replay, written = api_insert(path, rows)
        core = core_insert(_fresh(template, d, "core.db"), rows)
    res.ratio = median(ratios)
    res.measured.update({
        "rows": n, "pairs": pairs,
        "raw_rows_per_s": round(n / median(raw_s)), "api_rows_per_s": round(n / median(api_s)),
        "raw_s": [round(x, 4) for x in raw_s], "api_s": [round(x, 4) for x in api_s],
        "pair_ratios": [round(x, 3) for x in ratios],
        "api_replay_rows_per_s": round(n / replay), "replay_written": written,
        "previous_core_path_rows_per_s": round(n / core),
    })
    res.target_text = "≥ 0.5"
    res.absolute = (f"API {n / median(api_s):,.0f} rows/s vs raw {n / median(raw_s):,.0f} rows/s "
                    f"({n:,} rows × {pairs})")
    res.notes.append(f"replay of the same {n:,} rows (all skipped): {n / replay:,.0f} rows/s; previous Core path "
                     f"(journal.py _insert_samples): {n / core:,.0f} rows/s")
    return res
