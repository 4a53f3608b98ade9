"""A realistic synthetic ledger for the benchmarks, written straight through raw sqlite3.

``generate(runs, samples)`` returns the path of a SQLite ledger (schema by
``trainledger.store.db.make_engine``, rows by ``executemany`` of plain tuples) holding:

* the preset node types (rtx4090-8x, a100-8x, h100-8x, h200-8x) with their
  preset offers, the h100 example offers (``data/examples/h100-offers.toml``)
  and bench elastic offers for a100/h200 (different billing granularities and
  minimums), all in CNY; one owned fleet (``bench-own-4090``);
* 50 projects (Zipf-like popularity), 200 users;
* ``runs`` runs over ``months`` calendar months (UTC) ending last month, more
  in later months; ~88% succeeded, the rest failed / crashed / cancelled;
  lognormal durations (minutes to days; some cross month boundaries); 1–32
  nodes; tokens, GPU-Util and MFU on most runs;
* ``RunNode`` rows (one per node) for ~10% of runs, half of them with energy;
* ``samples`` ``MetricSample`` rows: loss series of ~200 points on ~5% of runs.

The file is cached under ``bench/results/`` keyed by its parameters, the
generator version and the schema revision, with a JSON sidecar (busiest month,
per-month counts, timings). After generating, ``trainledger.money.facts.rollup.rebuild(session)``
is called when that module exists; on a cached file only when asked
(``--rebuild-rollup`` or ``$TRAINLEDGER_BENCH_REBUILD_ROLLUP=1``: minutes on 1M
runs); a note says when ``ledger/money/facts/rollup.py``, ``ledger/money/account/monthly.py`` or ``ledger/store/models.py``
changed since the cached rollup was built.

``python -m bench.gen --runs N --samples M`` builds (or finds) one and prints its path.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import sqlite3
import sys
import time
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Optional

from bench import RESULTS_DIR, log

GEN_VERSION = 3
ENV_REBUILD = "TRAINLEDGER_BENCH_REBUILD_ROLLUP"
SEED = 20261202
N_PROJECTS = 50
N_USERS = 200
FLEET_NAME = "bench-own-4090"
FLEET_NODES = 256

#: offers the presets lack, for node types the presets ship (besides the h100 example file)
BENCH_PRICING = """
[[offer]]
name = "a100-rent"
node_type = "a100-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_hour = "62.5"
billing_granularity_hours = "0.5"
minimum_hours = "2"
notes = "bench: elastic A100, billed per started half hour, 2 h minimum"

[[offer]]
name = "h200-rent"
node_type = "h200-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_month = "131400"
billing_granularity_hours = "0.1"
notes = "bench: elastic H200, monthly price ÷ 730 h, billed per started 6 minutes, no minimum"
"""

#: node type → (share of runs, offers with their share, tokens/s per GPU at full MFU-ish speed)
MIX = {
    "rtx4090-8x": (0.45, {"rtx4090-own": 0.55, "rtx4090-rent": 0.40, None: 0.05}, 1400.0),
    "a100-8x": (0.20, {"a100-rent": 0.95, None: 0.05}, 2600.0),
    "h100-8x": (0.25, {"h100-rent": 0.95, None: 0.05}, 7800.0),
    "h200-8x": (0.10, {"h200-rent": 1.0}, 8600.0),
}
STATUSES = (("succeeded", 0.88), ("failed", 0.05), ("cancelled", 0.04), ("crashed", 0.03))
STRATEGIES = ("dp", "zero1", "zero2", "zero3", "pp", "tp", "3d")
SHAPES = (("1b", 1_312_768_000, 24, 2048, 16, 2048), ("7b", 6_607_400_960, 32, 4096, 32, 4096),
          ("13b", 12_752_855_040, 40, 5120, 40, 4096), ("70b", 64_686_981_120, 80, 8192, 64, 4096))
NODE_CHOICES = (1, 2, 4, 8, 16, 32)
NODE_WEIGHTS = (0.34, 0.25, 0.18, 0.12, 0.07, 0.04)
SAMPLES_PER_SERIES = 200
US = 1_000_000


def month_starts(end_month: str, months: int) -> list[datetime]:
    """UTC starts of ``months`` months ending with ``end_month``, plus the start of the month after."""
    y, m = map(int, end_month.split("-"))
    idx = y * 12 + m - 1
    return [datetime(i // 12, i % 12 + 1, 1, tzinfo=timezone.utc) for i in range(idx - months + 1, idx + 2)]


def last_month(today: Optional[date] = None) -> str:
    today = today or date.today()
    y, m = (today.year - 1, 12) if today.month == 1 else (today.year, today.month - 1)
    return f"{y:04d}-{m:02d}"


def _source_hash() -> str:
    root = Path(__file__).resolve().parents[1] / "ledger"
    h = hashlib.sha1()
    for name in ("money/facts/rollup.py", "money/account/monthly.py", "store/models.py"):
        p = root / name
        h.update(p.read_bytes() if p.exists() else b"-")
    return h.hexdigest()[:12]


def _key(runs: int, samples: int, months: int, end: str) -> str:
    from trainledger.store.db import head_revision

    return f"ledger-r{runs}-s{samples}-m{months}-e{end}-g{GEN_VERSION}-{head_revision()}"


def generate(runs: int, samples: int, *, months: int = 24, end_month: Optional[str] = None,
             directory: Path = RESULTS_DIR, force: bool = False,
             rebuild: Optional[bool] = None) -> tuple[Path, dict[str, Any]]:
    """The cached ledger for these parameters (built when missing); returns (path, metadata).

    The rollup is rebuilt after generating, and on a cached file only when asked
    (``rebuild``, default ``$TRAINLEDGER_BENCH_REBUILD_ROLLUP=1``): on 1M runs it takes minutes.
    """
    if rebuild is None:
        rebuild = os.environ.get(ENV_REBUILD) == "1"
    end_month = end_month or last_month()
    directory.mkdir(parents=True, exist_ok=True)
    key = _key(runs, samples, months, end_month)
    path = directory / f"{key}.db"
    meta_path = directory / f"{key}.json"
    meta: dict[str, Any] = {}
    if path.exists() and meta_path.exists() and not force:
        meta = json.loads(meta_path.read_text())
        meta["cached"] = True
        log(f"gen: cached ledger {path.name} ({runs:,} runs, {samples:,} samples)")
    else:
        for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), meta_path):
            p.unlink(missing_ok=True)
        tmp = path.with_suffix(".tmp.db")
        for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            p.unlink(missing_ok=True)
        t0 = time.perf_counter()
        meta = _build(tmp, runs, samples, months, end_month)
        meta["generate_s"] = round(time.perf_counter() - t0, 2)
        os.replace(tmp, path)
        tmp.with_suffix(".migrate.lock").unlink(missing_ok=True)
        meta["cached"] = False
        meta["path"] = str(path)
        log(f"gen: wrote {path.name} in {meta['generate_s']:.1f} s")
    has_rollup = importlib.util.find_spec("trainledger.money.facts.rollup") is not None
    if has_rollup and (not meta.get("cached") or rebuild or "rollup_source" not in meta):
        meta["rollup_rebuild_s"] = rebuild_rollup(path)
        meta["rollup_source"] = _source_hash()
    elif has_rollup and meta.get("rollup_source") != _source_hash():
        log(f"gen: note: the rollup of {path.name} was built by an older ledger/money/facts/rollup.py, money/account/monthly.py or "
            f"store/models.py; set {ENV_REBUILD}=1 (or bench.gen --rebuild-rollup) if its facts changed")
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "cached"}, indent=2))
    return path, meta


def rebuild_rollup(path: Path) -> Optional[float]:
    """``trainledger.money.facts.rollup.rebuild(session)`` on the ledger at ``path``; returns seconds (None without the module)."""
    if importlib.util.find_spec("trainledger.money.facts.rollup") is None:
        return None
    from trainledger.money.facts import rollup
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(f"sqlite:///{path}")
    log("gen: trainledger.money.facts.rollup.rebuild …")
    t0 = time.perf_counter()
    with session_scope(engine) as s:
        rollup.rebuild(s)
    took = time.perf_counter() - t0
    engine.dispose()
    log(f"gen: trainledger.money.facts.rollup.rebuild took {took:.2f} s")
    return round(took, 3)


# --- building -----------------------------------------------------------------------

def _ts_strings(us) -> list[str]:
    """int64 µs since the epoch → SQLAlchemy's SQLite DATETIME text."""
    import numpy as np

    s = np.datetime_as_string(us.astype("datetime64[us]"), unit="us")
    return [x.replace("T", " ") for x in s.tolist()]


def _build(path: Path, n_runs: int, n_samples: int, months: int, end_month: str) -> dict[str, Any]:
    import numpy as np
    from sqlmodel import Session
    from trainledger.store.catalog.presets import apply_pricing, parse_pricing
    from trainledger.store.db import make_engine

    log(f"gen: building {n_runs:,} runs, {n_samples:,} samples over {months} months ending {end_month} → {path.name}")
    engine = make_engine(f"sqlite:///{path}")
    example = Path(__file__).resolve().parents[1] / "data" / "examples" / "h100-offers.toml"
    with Session(engine) as s:
        apply_pricing(s, parse_pricing(example.read_text(), "h100-offers.toml"), source="user", replace=False)
        apply_pricing(s, parse_pricing(BENCH_PRICING, "bench"), source="user", replace=False)
        s.commit()
    engine.dispose()

    rng = np.random.default_rng(SEED)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-1000000")
    con.execute("PRAGMA foreign_keys=OFF")  # ids are generated consistently below
    nt_ids = dict(con.execute("SELECT name, id FROM node_type"))
    offer_ids = dict(con.execute("SELECT name, id FROM offer"))
    starts = month_starts(end_month, months)
    con.execute("BEGIN")
    con.executemany("INSERT INTO project (id, name) VALUES (?, ?)", [(i + 1, f"project-{i:02d}") for i in range(N_PROJECTS)])
    con.executemany("INSERT INTO user_account (id, name, role) VALUES (?, ?, 'viewer')",
                    [(i + 1, f"user-{i:03d}") for i in range(N_USERS)])
    con.execute("INSERT INTO fleet (name, offer_id, node_count, valid_from, valid_to) VALUES (?, ?, ?, ?, NULL)",
                (FLEET_NAME, offer_ids["rtx4090-own"], FLEET_NODES, starts[0].date().isoformat()))
    con.execute("COMMIT")

    # --- runs: arrays first (vectorised), then tuples in start order ---------------
    n = n_runs
    t_cut = int(starts[-1].timestamp() * US) + 86_400 * US  # nothing ends after the 1st day of this month
    weights = np.array([1.0 + i / 12.0 for i in range(months)])
    month_idx = rng.choice(months, size=n, p=weights / weights.sum())
    mstart = np.array([int(x.timestamp() * US) for x in starts], dtype=np.int64)
    start = mstart[month_idx] + (rng.random(n) * (mstart[month_idx + 1] - mstart[month_idx])).astype(np.int64)
    start.sort()
    dur_h = np.exp(rng.normal(math.log(1.5), 1.6, n))  # median 1.5 h
    dur_h = np.clip(dur_h, 2 / 60, 14 * 24)
    status_names = np.array([s for s, _ in STATUSES])
    status = rng.choice(len(STATUSES), size=n, p=[p for _, p in STATUSES])
    dur_h = np.where(status > 0, dur_h * rng.uniform(0.05, 1.0, n), dur_h)  # unsuccessful runs stop early
    end = np.minimum(start + (dur_h * 3600 * US).astype(np.int64), t_cut)
    end = np.maximum(end, start + 60 * US)
    nts = list(MIX)
    nt_pick = rng.choice(len(nts), size=n, p=[MIX[k][0] for k in nts])
    offer_col = np.empty(n, dtype=object)
    for i, name in enumerate(nts):
        mask = nt_pick == i
        offs = list(MIX[name][1])
        pick = rng.choice(len(offs), size=int(mask.sum()), p=[MIX[name][1][o] for o in offs])
        offer_col[mask] = [offer_ids[offs[j]] if offs[j] else None for j in pick]
    nodes = np.where(rng.random(n) < 0.9, np.array(NODE_CHOICES)[rng.choice(6, size=n, p=NODE_WEIGHTS)],
                     rng.integers(1, 33, n))
    zipf = 1.0 / np.arange(1, N_PROJECTS + 1) ** 0.9
    project = rng.choice(N_PROJECTS, size=n, p=zipf / zipf.sum()) + 1
    user = rng.integers(1, N_USERS + 1, n)
    strategy = rng.integers(0, len(STRATEGIES), n)
    shape = np.minimum(rng.geometric(0.45, n) - 1, len(SHAPES) - 1)
    has_util = rng.random(n) < 0.85
    util = np.clip(rng.beta(8, 2.5, n), 0.05, 0.99)
    has_mfu = has_util & (rng.random(n) < 0.85)
    mfu = np.clip(util * rng.uniform(0.25, 0.55, n), 0.01, 0.7)
    has_tokens = rng.random(n) < 0.9
    tps_gpu = np.array([MIX[k][2] for k in nts])[nt_pick] / np.array([1, 4.5, 8.5, 40])[shape]
    seconds = (end - start) / US
    tokens = (tps_gpu * 8 * nodes * seconds * np.where(has_util, util, 0.7)).astype(np.int64)
    created = start - rng.integers(0, 600 * US, n)
    s_txt, e_txt, c_txt = _ts_strings(start), _ts_strings(end), _ts_strings(created)
    ids = [f"b{i:07d}" for i in range(n)]
    loss = np.round(1.6 + 2.0 * rng.random(n), 4)

    cols = ("id, name, project_id, user_id, launcher, node_type_id, offer_id, nodes, gpus_per_node, world_size, "
            "strategy, model_shape, params, n_layers, hidden, heads, seq_len, status, created_at, started_at, "
            "ended_at, heartbeat_at, steps, tokens, tokens_per_s, mfu, gpu_util_mean, gpu_util_p95, util_source, "
            "final_loss, exit_code, error")
    nt_id_of = [nt_ids[k] for k in nts]
    launchers = ("deepspeed", "torchrun", "slurm", "import")
    statuses = status_names.tolist()

    def run_rows():
        for i in range(n):
            sh = SHAPES[shape[i]]
            st = statuses[status[i]]
            u = float(util[i]) if has_util[i] else None
            tok = int(tokens[i]) if has_tokens[i] else None
            secs = float(seconds[i])
            yield (ids[i], f"{STRATEGIES[strategy[i]]}-{sh[0]}", int(project[i]), int(user[i]), launchers[i % 4],
                   nt_id_of[nt_pick[i]], offer_col[i], int(nodes[i]), 8, int(nodes[i]) * 8, STRATEGIES[strategy[i]],
                   sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], st, c_txt[i], s_txt[i], e_txt[i], e_txt[i],
                   None, tok, (tok / secs) if tok else None, float(mfu[i]) if has_mfu[i] else None, u,
                   min(0.99, u + 0.04) if u is not None else None,
                   ("nvml" if i % 10 < 7 else "dcgm") if u is not None else None,
                   float(loss[i]) if st == "succeeded" else None, 0 if st == "succeeded" else (130 if st == "cancelled" else 1),
                   None if st in ("succeeded", "cancelled") else ("heartbeat stopped; marked crashed at the last heartbeat"
                                                                 if st == "crashed" else "RuntimeError: CUDA error"))

    t0 = time.perf_counter()
    con.execute("BEGIN")
    con.executemany(f"INSERT INTO run ({cols}) VALUES ({', '.join('?' * len(cols.split(', ')))})", run_rows())
    con.execute("COMMIT")
    log(f"gen: {n:,} runs in {time.perf_counter() - t0:.1f} s")

    # --- RunNode for ~10% of runs (half with measured energy) ---------------------------
    t0 = time.perf_counter()
    with_nodes = np.flatnonzero(rng.random(n) < 0.10)
    kw = {"rtx4090-8x": 4.0, "a100-8x": 6.5, "h100-8x": 10.2, "h200-8x": 10.2}
    node_rows = []
    for i in with_nodes.tolist():
        energy = (i % 2 == 0)
        base = float(util[i]) if has_util[i] else 0.7
        hours = seconds[i] / 3600
        for k in range(int(nodes[i])):
            u = min(0.99, max(0.01, base + (k % 5 - 2) * 0.02))
            node_rows.append((ids[i], f"{nts[nt_pick[i]][:-3]}-n{(i * 7 + k) % 997:03d}-{k}", k, u, min(0.99, u + 0.04),
                              "nvml", 20 * 2**30, (kw[nts[nt_pick[i]]] * hours * (0.6 + 0.3 * u)) if energy else None,
                              1.2e9, 1.1e9, 0.9, 0))
    con.execute("BEGIN")
    con.executemany("INSERT INTO run_node (run_id, hostname, node_rank, gpu_util_mean, gpu_util_p95, util_source, "
                    "mem_peak_bytes, energy_kwh, nic_rx_bytes_per_s, nic_tx_bytes_per_s, step_time_share, straggler) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", node_rows)
    con.execute("COMMIT")
    log(f"gen: {len(node_rows):,} run_node rows for {len(with_nodes):,} runs in {time.perf_counter() - t0:.1f} s")

    # --- MetricSample: loss series on ~5% of runs ------------------------------------
    t0 = time.perf_counter()
    n_series = max(1, n_samples // SAMPLES_PER_SERIES)
    series_runs = np.sort(rng.choice(n, size=min(n, n_series), replace=False))
    per = np.full(len(series_runs), n_samples // len(series_runs))
    per[: n_samples - int(per.sum())] += 1
    done = 0
    sql = "INSERT INTO metric_sample (run_id, node, gpu, metric, ts, value) VALUES (?, '', -1, 'loss', ?, ?)"
    batch_runs = max(1, 400_000 // max(1, int(per.max())))
    for b in range(0, len(series_runs), batch_runs):
        chunk = series_runs[b:b + batch_runs]
        counts = per[b:b + batch_runs]
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(chunk)), counts)
        j = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)  # point index within its series
        k = counts[owner]
        s0, e0 = start[chunk][owner], end[chunk][owner]
        ts = s0 + ((e0 - s0) * (j + 1) // k)
        frac = (j + 1) / k
        val = np.round(2.0 + 8.0 * np.exp(-5 * frac) + rng.normal(0, 0.05, total), 5)
        ts_txt = _ts_strings(ts)
        rid = [ids[x] for x in chunk[owner].tolist()]
        con.execute("BEGIN")
        con.executemany(sql, zip(rid, ts_txt, val.tolist()))
        con.execute("COMMIT")
        done += total
        log(f"gen: samples {done:,}/{n_samples:,} ({time.perf_counter() - t0:.0f} s)", progress=True)
    log(f"gen: {done:,} samples for {len(series_runs):,} runs in {time.perf_counter() - t0:.1f} s")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()

    # per-month overlap counts (UTC months; the display time zone of a fresh ledger is UTC)
    counts = {}
    for a, b in zip(starts[:-1], starts[1:]):
        ms, me = int(a.timestamp() * US), int(b.timestamp() * US)
        counts[a.strftime("%Y-%m")] = int(((start < me) & (end > ms)).sum())
    busiest = max(counts, key=lambda m: (counts[m], m))
    return {"runs": n_runs, "samples": done,
            "run_nodes": len(node_rows), "months": list(counts), "runs_per_month": counts,
            "busiest_month": busiest, "end_month": end_month, "generator_version": GEN_VERSION}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gen", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--months", type=int, default=24)
    ap.add_argument("--end-month", default=None)
    ap.add_argument("--force", action="store_true", help="generate again even if cached")
    ap.add_argument("--rebuild-rollup", action="store_true", help="run trainledger.money.facts.rollup.rebuild on a cached file too")
    a = ap.parse_args(argv)
    path, meta = generate(a.runs, a.samples, months=a.months, end_month=a.end_month, force=a.force,
                          rebuild=a.rebuild_rollup or None)
    print(path)
    print(json.dumps(meta, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
