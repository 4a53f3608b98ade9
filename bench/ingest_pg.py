"""Ingest on PostgreSQL: ``trainledger.store.ingest.insert_samples`` rows/s (target ≥ 200,000 rows/s).

A throwaway database on the server at ``$TRAINLEDGER_BENCH_PG`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``; the benchmark
creates and drops ``tl_bench_<pid>``), schema by ``make_engine``. Each trial
writes the same rows into an emptied ``metric_sample`` and commits:

* insert-once (the default, judged): ``insert_samples(session, rows)`` of new
  samples — the optimistic ``COPY`` straight into ``metric_sample``;
* insert-once with a conflict (reference): the same rows when the first of them
  is stored already — the optimistic ``COPY`` fails, the savepoint is rolled back
  and the rows go through the temp table (``COPY`` + ``INSERT … SELECT … ON
  CONFLICT DO NOTHING``): the price of a replay that overlaps;
* new rows: ``insert_samples(session, rows, new=True)`` — binary ``COPY`` straight in;
* baseline: raw psycopg binary ``COPY`` of pre-converted tuples (naive UTC
  timestamps) into the table — the ratio is insert-once ÷ this;
* replay (reference): insert-once of rows that are all stored already.

Trials alternate (baseline, insert-once, new rows, …); medians are reported.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench import Result, log, median
from bench.ingest import sample_rows

ENV_PG = "TRAINLEDGER_BENCH_PG"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _admin(url: str):
    from sqlalchemy import create_engine

    return create_engine(url, isolation_level="AUTOCOMMIT")


def _truncate(engine) -> None:
    with engine.begin() as c:
        c.exec_driver_sql("TRUNCATE metric_sample RESTART IDENTITY")


def _api(engine, rows: list[tuple], **kw: Any) -> tuple[float, int]:
    from sqlmodel import Session
    from trainledger.store.ingest import insert_samples

    with Session(engine) as s:
        s.connection().exec_driver_sql("SELECT 1")  # begin before timing
        t0 = time.perf_counter()
        n = insert_samples(s, rows, **kw)
        s.commit()
        return time.perf_counter() - t0, n


def _raw_copy(engine, naive_rows: list[tuple]) -> float:
    conn = engine.raw_connection()
    try:
        raw = conn.driver_connection
        with raw.cursor() as cur:
            cur.execute("SELECT 1")
            t0 = time.perf_counter()
            with cur.copy("COPY metric_sample (run_id, node, gpu, metric, ts, value) FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["text", "text", "int4", "text", "timestamp", "float8"])
                for r in naive_rows:
                    cp.write_row(r)
            raw.commit()
            return time.perf_counter() - t0
    finally:
        conn.close()


def run(quick: bool) -> Result:
    from datetime import timedelta

    from sqlalchemy import text
    from sqlmodel import Session, select
    from trainledger.store.db import make_engine
    from trainledger.store.models import NodeType, Run, RunStatus

    from bench.ingest import T0

    res = Result("ingest_pg", "ingest MetricSample on PostgreSQL (trainledger.store.ingest, COPY)",
                 "raw psycopg binary COPY of the same rows (ratio informational)", None, ">=")
    n = 20_000 if quick else 200_000
    trials = 1 if quick else 3
    admin_url = os.environ.get(ENV_PG, DEFAULT_PG)
    name = f"tl_bench_{os.getpid()}"
    admin = _admin(admin_url)
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"{admin_url.rsplit('/', 1)[0]}/{name}"
    engine = None
    try:
        engine = make_engine(url)
        with Session(engine) as s:
            nt = s.exec(select(NodeType).where(NodeType.name == "rtx4090-8x")).one()
            for r in range(50):
                s.add(Run(id=f"ingest-{r:04d}", node_type_id=nt.id, nodes=1, gpus_per_node=8,
                          status=RunStatus.succeeded, started_at=T0, ended_at=T0 + timedelta(hours=1)))
            s.commit()
        rows = sample_rows(n)
        naive = [(r[0], r[1], r[2], r[3], r[4].replace(tzinfo=None), r[5]) for r in rows]
        log(f"ingest_pg: {n:,} rows × {trials} trials (raw COPY, insert-once, new rows) …")
        raw_s, once_s, new_s, conflict_s = [], [], [], []
        for _ in range(trials):
            _truncate(engine)
            raw_s.append(_raw_copy(engine, naive))
            _truncate(engine)
            t, written = _api(engine, rows)
            if written != n:
                raise AssertionError(f"insert_samples wrote {written} of {n} rows")
            once_s.append(t)
            _truncate(engine)
            t, written = _api(engine, rows, new=True)
            new_s.append(t)
        replay, skipped_written = _api(engine, rows)  # every row is already stored
        _truncate(engine)
        _api(engine, rows[:1])
        t, written = _api(engine, rows)  # the first row is stored: the temp-table path for the rest
        if written != n - 1:
            raise AssertionError(f"insert_samples (conflict path) wrote {written} of {n - 1} rows")
        conflict_s.append(t)
    finally:
        if engine is not None:
            engine.dispose()
        from trainledger.store.db import get_engine

        get_engine.cache_clear()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    once = n / median(once_s)
    res.ratio = median(raw_s) / median(once_s)
    res.measured.update({
        "rows": n, "trials": trials,
        "insert_once_rows_per_s": round(once), "new_rows_copy_rows_per_s": round(n / median(new_s)),
        "raw_copy_rows_per_s": round(n / median(raw_s)), "replay_rows_per_s": round(n / replay),
        "replay_written": skipped_written, "insert_once_conflict_path_rows_per_s": round(n / conflict_s[0]),
        "insert_once_s": [round(x, 3) for x in once_s], "new_rows_s": [round(x, 3) for x in new_s],
        "raw_copy_s": [round(x, 3) for x in raw_s],
    })
    res.extra_targets.append({"what": "insert-once rows/s", "value": round(once), "op": ">=", "target": 200_000})
    res.target_text = "≥ 200,000 rows/s"
    res.absolute = (f"insert-once {once:,.0f} rows/s; raw COPY {n / median(raw_s):,.0f} rows/s "
                    f"({n:,} rows × {trials})")
    res.notes.append(f"new rows (COPY straight in): {n / median(new_s):,.0f} rows/s; raw COPY: {n / median(raw_s):,.0f} "
                     f"rows/s; insert-once when a key is stored already (temp table + ON CONFLICT): "
                     f"{n / conflict_s[0]:,.0f} rows/s; replay (all skipped): {n / replay:,.0f} rows/s")
    return res
