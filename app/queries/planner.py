"""The Planner page's reads: ``trainledger.runs.plan`` behind ``data.cached`` (no arithmetic here).

The ranking is the one ``trainledger plan recommend`` prints for the same
inputs; the strategy table is ``trainledger.runs.plan.strategy_table``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Optional

from trainledger.app.queries.data import cached, read_session
from trainledger.runs import plan


@cached(show_spinner="Evaluating plans…")
def recommend(url: str, model: str, tokens: float, node_types: Optional[tuple[str, ...]], nodes: tuple[int, ...],
              deadline_days: Optional[float], budget: Optional[Decimal], rank_by: str, top: int,
              currency: Optional[str] = None) -> dict[str, Any]:
    req = plan.RecommendRequest(model=model, tokens=tokens, node_types=list(node_types) if node_types else None,
                                nodes=list(nodes), deadline_days=deadline_days, budget=budget, rank_by=rank_by, top=top, currency=currency)
    with read_session(url) as s:
        return plan.recommend(s, req)


@cached()
def strategy_table(url: str, model: str, tokens: float, node_type: str, nodes: int) -> dict[str, Any]:
    with read_session(url) as s:
        return plan.strategy_table(s, model, tokens, node_type, nodes)


def cli_command(model: str, tokens: float, node_types: Optional[tuple[str, ...]], nodes: tuple[int, ...],
                deadline_days: Optional[float], budget: Optional[Decimal], rank_by: str, top: int,
                currency: Optional[str] = None) -> str:
    """The ``trainledger plan recommend`` line that prints the same ranking."""
    parts = ["trainledger plan recommend", f"--model {model}", f"--tokens {tokens:g}",
             f"--nodes {nodes[0]}..{nodes[-1]}" if len(nodes) > 1 else f"--nodes {nodes[0]}"]
    if node_types:
        parts.append(f"--node-type {','.join(node_types)}")
    if deadline_days:
        parts.append(f"--deadline {deadline_days:g}d")
    if budget is not None:
        parts.append(f"--budget {budget}")
    if rank_by != "cost":
        parts.append(f"--rank-by {rank_by}")
    if top != 10:
        parts.append(f"--top {top}")
    if currency:
        parts.append(f"--currency {currency}")
    return " ".join(parts)


def span_text(span: Optional[list[float]]) -> str:
    """``1.10–1.40`` for a calibrated range; ``uncalibrated`` without one."""
    return f"{span[0]:,.3g}–{span[1]:,.3g}" if span else "uncalibrated"


def with_ranges(plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranked plans with their calibrated ranges as text columns (the figures are ``trainledger.runs.plan``'s)."""
    return [dict(p, step_range=span_text(p["step_time_range_s"]), memory_range=span_text(p["memory_range_gib"]))
            for p in plans]
