"""Monthly rollup: ``monthly_report`` for the busiest month ÷ DuckDB computing the same numbers.

Ledger side (timed): ``trainledger.money.account.monthly.monthly_report(session, month, lines=False)``
(``lines`` only when the function takes it), a fresh session per call, median
of several calls, on the generated ledger (``bench.gen``, 1M runs + 10M samples).

Baseline (timed): one DuckDB SQL query over the same tables loaded into an
in-memory DuckDB (untimed, via pandas): per (node type, offer, project, status)
the month's run slices, node-hours, GPU-hours, tokens pro rata by time share,
billed node-hours under each elastic offer of the node type (billed = max(minimum,
⌈duration ÷ granularity⌉ × granularity) per node, shared by time), Σ GPU-Util ×
GPU-hours, and per node type the peak of concurrent nodes (a window-function
sweep, ends before starts at a tie). Node-hours, tokens and peaks are
cross-checked against the ledger's report.

Target (SPEC §11): ledger ≤ 2 × DuckDB and ≤ 1 s. The ledger's CPU seconds are reported beside its wall time
(``ledger_cpu_s``): on a loaded machine both sides' wall times stretch, which the side-by-side ratio absorbs.
"""

from __future__ import annotations

import inspect
import sqlite3
import time
from typing import Any

from bench import Result, log, median

US_PER_HOUR = 3_600_000_000

DUCK_QUERY = """
WITH sl AS (
    SELECT r.id, r.node_type_id, COALESCE(r.offer_id, d.offer_id) AS offer_id, r.project_id, r.status,
           r.nodes, r.gpus_per_node, r.tokens, r.gpu_util_mean AS util,
           epoch_us(r.started_at) AS s, epoch_us(COALESCE(r.ended_at, r.heartbeat_at, r.started_at)) AS e,
           greatest(epoch_us(r.started_at), $ms) AS a, least(epoch_us(COALESCE(r.ended_at, r.heartbeat_at, r.started_at)), $me) AS b
    FROM run r LEFT JOIN nt_default d ON d.node_type_id = r.node_type_id
    WHERE r.started_at IS NOT NULL AND epoch_us(r.started_at) < $me
      AND epoch_us(COALESCE(r.ended_at, r.heartbeat_at, r.started_at)) > $ms
),
facts AS (
    SELECT sl.*, (b - a) AS us, nodes * (b - a) AS node_us,
           -- tokens pro rata, exact in integers: ⌊tokens·(b−s)/(e−s)⌋ − ⌊tokens·(a−s)/(e−s)⌋
           CASE WHEN tokens IS NULL THEN NULL
                ELSE (tokens::HUGEINT * (b - s)) // (e - s) - (tokens::HUGEINT * (a - s)) // (e - s) END AS tok
    FROM sl WHERE b > a
),
billed AS (  -- billed node-hours of each slice under every elastic offer of its node type
    SELECT f.id, f.node_type_id, f.offer_id, f.project_id, f.status, o.id AS elastic_offer_id,
           f.nodes * greatest(COALESCE(o.minimum_hours, 0),
                              CASE WHEN o.granularity IS NULL THEN (f.e - f.s) / 3600e6
                                   ELSE ceil((f.e - f.s) / 3600e6 / o.granularity) * o.granularity END)
               * (f.b - f.a) / (f.e - f.s) AS billed_nh
    FROM facts f JOIN elastic o ON o.node_type_id = f.node_type_id
),
billed_g AS (
    SELECT node_type_id, offer_id, project_id, status,
           map_from_entries(list({'k': elastic_offer_id, 'v': nh})) AS billed_node_hours
    FROM (SELECT node_type_id, offer_id, project_id, status, elastic_offer_id, sum(billed_nh) AS nh
          FROM billed GROUP BY ALL)
    GROUP BY ALL
),
ev AS (
    SELECT node_type_id, a AS t, nodes AS d FROM facts
    UNION ALL SELECT node_type_id, b AS t, -nodes AS d FROM facts
),
peaks AS (
    SELECT node_type_id, max(cur) AS peak_nodes FROM (
        SELECT node_type_id, sum(d) OVER (PARTITION BY node_type_id ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS cur
        FROM ev) GROUP BY node_type_id
),
g AS (
    SELECT node_type_id, offer_id, project_id, status, count(*) AS slices,
           sum(node_us) / 3600e6 AS node_hours, sum(node_us * gpus_per_node) / 3600e6 AS gpu_hours,
           sum(tok) AS tokens, sum(util * node_us * gpus_per_node) / 3600e6 AS util_gpu_hours,
           sum(CASE WHEN util IS NOT NULL THEN node_us * gpus_per_node END) / 3600e6 AS measured_gpu_hours
    FROM facts GROUP BY ALL
)
SELECT g.*, b.billed_node_hours, p.peak_nodes
FROM g LEFT JOIN billed_g b USING (node_type_id, offer_id, project_id, status)
       LEFT JOIN peaks p USING (node_type_id)
ORDER BY node_type_id, offer_id, project_id, status
"""


def load_duckdb(path) -> Any:
    """The ledger's run, offer and node-type tables in an in-memory DuckDB (untimed setup)."""
    import duckdb
    import pandas as pd
    from sqlmodel import Session, select
    from trainledger.money.rates.catalog import default_offer, load_catalog
    from trainledger.store.db import make_engine
    from trainledger.store.models import Fleet

    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    runs = pd.read_sql_query(
        "SELECT id, node_type_id, offer_id, project_id, status, nodes, gpus_per_node, tokens, gpu_util_mean, "
        "started_at, ended_at, heartbeat_at FROM run", src)
    offers = pd.read_sql_query(
        "SELECT id, node_type_id, kind, CAST(billing_granularity_hours AS DOUBLE) AS granularity, "
        "CAST(minimum_hours AS DOUBLE) AS minimum_hours FROM offer", src)
    src.close()
    # a run without an offer is costed under its node type's default offer (the ledger's own rule)
    engine = make_engine(f"sqlite:///{path}")
    with Session(engine) as s:
        cat = load_catalog(s)
        fleets: dict[int, list] = {}
        for f in s.exec(select(Fleet)).all():
            fleets.setdefault(f.offer_id, []).append(f)
        defaults = pd.DataFrame([(nt, getattr(default_offer(cat, nt, fleets), "id", None)) for nt in cat.node_types],
                                columns=["node_type_id", "offer_id"])
    engine.dispose()
    con = duckdb.connect()
    con.register("runs_df", runs)
    con.execute("CREATE TABLE run AS SELECT id, node_type_id, offer_id::INTEGER AS offer_id, project_id::INTEGER AS project_id, "
                "status, nodes, gpus_per_node, tokens::BIGINT AS tokens, gpu_util_mean, "
                "started_at::TIMESTAMP AS started_at, ended_at::TIMESTAMP AS ended_at, "
                "heartbeat_at::TIMESTAMP AS heartbeat_at FROM runs_df")
    con.unregister("runs_df")
    con.register("offers_df", offers)
    con.execute("CREATE TABLE elastic AS SELECT id, node_type_id, granularity, minimum_hours FROM offers_df "
                "WHERE kind = 'rent_elastic'")
    con.unregister("offers_df")
    con.register("defaults_df", defaults)
    con.execute("CREATE TABLE nt_default AS SELECT node_type_id, offer_id::INTEGER AS offer_id FROM defaults_df")
    con.unregister("defaults_df")
    return con


def duck_month(con, month: str) -> tuple[float, list[tuple]]:
    from zoneinfo import ZoneInfo

    from trainledger.money.rates.months import month_bounds

    ms, me = month_bounds(month, ZoneInfo("UTC"))
    params = {"ms": int(ms.timestamp() * 1e6), "me": int(me.timestamp() * 1e6)}
    t0 = time.perf_counter()
    rows = con.execute(DUCK_QUERY, params).fetchall()
    return time.perf_counter() - t0, rows


def ledger_month(engine, month: str) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds, report) of one ``monthly_report``: a loaded machine stretches the wall time only."""
    from sqlmodel import Session
    from trainledger.money.account.monthly import monthly_report

    kwargs = {"lines": False} if "lines" in inspect.signature(monthly_report).parameters else {}
    with Session(engine) as s:
        c0, t0 = time.process_time(), time.perf_counter()
        rep = monthly_report(s, month, **kwargs)
        took = time.perf_counter() - t0
        cpu = time.process_time() - c0
        s.rollback()
    return took, cpu, rep


def cross_check(rep, rows: list[tuple], names: dict[int, str]) -> list[str]:
    """✓ lines, or the differences, between the ledger's report and DuckDB's figures."""
    out = []
    duck_nh = sum(r[5] for r in rows)
    duck_tok = sum(int(r[7] or 0) for r in rows)
    duck_slices = sum(r[4] for r in rows)
    nh = float(rep.summary["node_hours"])
    tok = int(rep.summary["tokens"])
    rel = abs(nh - duck_nh) / max(1.0, abs(nh))
    out.append(f"node-hours {nh:,.3f} vs DuckDB {duck_nh:,.3f}: " + ("✓" if rel < 1e-9 else f"differ by {nh - duck_nh:+,.6f}"))
    # the ledger floors Decimal shares (28 digits), DuckDB exact integers: at most 1 token per slice apart
    out.append(f"tokens {tok:,} vs DuckDB {duck_tok:,}: " + ("✓" if abs(tok - duck_tok) <= duck_slices
                                                           else f"differ by {tok - duck_tok:+,}"))
    peaks = {}
    for r in rows:
        peaks[names.get(r[0], str(r[0]))] = r[-1]
    mine = {n.node_type: n.peak_nodes for n in rep.node_types if n.node_type in peaks}
    out.append("peak nodes per node type: " + ("✓" if mine == peaks else f"ledger {mine} vs DuckDB {peaks}"))
    return out


def run(quick: bool) -> Result:
    from trainledger.store.db import make_engine

    from bench.gen import generate

    res = Result("rollup", "monthly rollup (report monthly)", "DuckDB, one SQL query over the same tables", 2.0, "<=")
    n_runs, n_samples = (5_000, 50_000) if quick else (1_000_000, 10_000_000)
    repeats = 3 if quick else 5
    path, meta = generate(n_runs, n_samples)
    month = meta["busiest_month"]
    res.measured.update({"runs": n_runs, "samples": n_samples, "month": month,
                         "runs_in_month": meta["runs_per_month"][month],
                         "generate_s": meta.get("generate_s"), "rollup_rebuild_s": meta.get("rollup_rebuild_s")})
    log(f"rollup: loading {n_runs:,} runs into DuckDB …")
    t0 = time.perf_counter()
    con = load_duckdb(path)
    res.measured["duckdb_load_s"] = round(time.perf_counter() - t0, 2)
    engine = make_engine(f"sqlite:///{path}")
    log(f"rollup: monthly_report({month}) × {repeats} and DuckDB × {repeats}, interleaved …")
    first, _, rep = ledger_month(engine, month)  # first call: may fold pending rollup work; reported apart
    res.measured["ledger_first_call_s"] = round(first, 4)
    ours, duck, cpu = [], [], []
    rows: list[tuple] = []
    duck_month(con, month)  # warm-up (plans, column statistics)
    for _ in range(repeats):
        t, c, rep = ledger_month(engine, month)
        ours.append(t)
        cpu.append(c)
        t, rows = duck_month(con, month)
        duck.append(t)
    names = {}
    from sqlmodel import Session, select
    from trainledger.store.models import NodeType

    with Session(engine) as s:
        names = {i: n for i, n in s.exec(select(NodeType.id, NodeType.name)).all()}
    engine.dispose()
    con.close()
    m_ours, m_duck = median(ours), median(duck)
    res.ratio = m_ours / m_duck
    res.measured.update({"ledger_s": round(m_ours, 4), "duckdb_s": round(m_duck, 4),
                         "ledger_all_s": [round(x, 4) for x in ours], "duckdb_all_s": [round(x, 4) for x in duck],
                         "ledger_cpu_s": round(median(cpu), 4),
                         "groups": len(rows)})
    res.extra_targets.append({"what": "ledger seconds", "value": round(m_ours, 4), "op": "<=", "target": 1.0})
    res.target_text = "≤ 2× and ≤ 1 s"
    res.absolute = (f"ledger {m_ours:.3f} s ({median(cpu):.3f} s CPU) vs DuckDB {m_duck:.3f} s ({month}: "
                    f"{meta['runs_per_month'][month]:,} runs of {n_runs:,})")
    res.notes += cross_check(rep, rows, names)
    return res
