"""``trainledger sweep``: the pre-scaling trial. One tracked run per strategy,
for N steps, sharing a sweep id, one after another on the same nodes."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

import yaml

from ledger.errors import LedgerInputError

STRATEGIES = ("dp", "zero1", "zero2", "zero3", "pp", "tp", "3d")


def strategy_config(base: dict, strategy: str, processes: int) -> dict:
    """The base config with ``parallel`` set for ``strategy`` on ``processes`` ranks per node.

    dp/zero*: all ranks data-parallel; tp: all ranks tensor-parallel; pp: all
    ranks pipeline stages; 3d: tp = 2, pp = 2, the rest data-parallel.
    """
    cfg = yaml.safe_load(yaml.safe_dump(base))  # deep copy
    par = {k: v for k, v in (cfg.get("parallel") or {}).items() if k in ("micro_batch", "global_batch", "grad_accum")}
    par["strategy"] = strategy
    if strategy == "tp":
        par["tp"] = processes
    elif strategy == "pp":
        par["pp"] = processes
    elif strategy == "3d":
        par["tp"], par["pp"] = 2, 2
    cfg["parallel"] = par
    return cfg


def parse_strategies(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGIES]
    if bad or not names:
        raise LedgerInputError(f"--strategies: unknown {bad[0] if bad else '(empty)'!r}; use a comma list of {','.join(STRATEGIES)}")
    return names


def config_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("trainledger", appauthor=False)) / "sweeps"


def write_configs(base_path: Path, strategies: list[str], processes: int, sweep_id: str) -> dict[str, Path]:
    try:
        base = yaml.safe_load(base_path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise LedgerInputError(f"CONFIG: cannot read {base_path}: {exc}") from None
    out_dir = config_dir() / sweep_id
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for s in strategies:
        p = out_dir / f"{s}.yaml"
        p.write_text(yaml.safe_dump(strategy_config(base, s, 4 if s == "3d" and processes < 4 else processes), sort_keys=False))
        paths[s] = p
    return paths
