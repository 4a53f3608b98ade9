"""The cheapest plan that fits: ``trainledger plan recommend`` and the Planner page.

For a model and a token count, every offer of the ledger × node count ×
strategy × (tp, pp, micro-batch, recompute) is evaluated by the trainer's
planning model (``trainledger.trainer.plan``: plan validation, memory per GPU, step
time), priced with the offer (``trainledger.money.rates.costs.planned_run_cost``), checked
against the deadline and budget, and ranked by total cost (or by time).
Plans that fail are counted by reason, with examples, so the Planner page can
say why a plan is not on the list; each offer's best plan is kept too
(``best_per_offer``), so a reserved offer's whole-month price is seen even when
it ranks far down.

Time: hours = tokens ÷ tokens/s ÷ 3600, tokens/s = tokens per step ÷ step time.
Cost, by offer kind: rent_elastic nodes × billed hours × hourly rate;
rent_reserved nodes × ⌈hours ÷ 730⌉ whole months × monthly price (a reserved
node is paid for the whole month, used or not, as in the monthly report);
own node-hours × full-use rate (depreciation + operations per 730 h + load
power). Cost per 1M tokens = cost ÷ tokens × 10⁶.

The node type's efficiency and links: ``trainledger.runs.hardware``. With a stored
calibration (``trainledger.runs.calibrate``) every plan's time and memory are the
calibrated ones, with the residuals' range; otherwise "uncalibrated".

:func:`trial_sweep` turns the best plans into a pre-scale trial: each plan
shrunk to a small cluster with the same per-GPU layers, micro-batch, tensor
degree and micro-batches per step, written as trainer configs and run as one
tracked sweep (the seed's "test on 2 nodes before scaling to 8/16").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional, Sequence

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates import costs
from trainledger.money.rates.fx import at_list_prices
from trainledger.runs.hardware import (  # noqa: F401
    ASSUMED_LINKS,
    calibrated_efficiencies,
    calibrated_efficiency,
    hardware,
    hardware_summary,
)
from trainledger.store.models import NodeType, Offer, Run
from trainledger.trainer.parallel import STRATEGY_ZERO_STAGE
from trainledger.trainer.plan.memory import GIB, RECOMPUTE
from trainledger.trainer.plan.search import (
    DEFAULT_BATCH_TOKENS,
    MICRO_BATCHES,
    Evaluated,
    candidates,
    evaluate,
    reason_kind,
)
from trainledger.trainer.plan.timing import Hardware
from trainledger.trainer.shapes import ModelShape, flops_per_token, get_shape, param_count

STRATEGIES = tuple(STRATEGY_ZERO_STAGE)
RANK_BY = ("cost", "time")
#: examples kept per discard reason
EXAMPLES_PER_REASON = 5
#: node counts one search may try (each is a few thousand candidate plans for a 70B model)
MAX_NODE_COUNTS = 256


# --------------------------------------------------------------------------- inputs


def parse_tokens(text: str, flag: str = "--tokens") -> float:
    """Tokens as a number: ``2e12``, ``2000000000000``, or with a suffix ``300B`` / ``2T`` / ``5M`` / ``10K``."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KkMmBbTt]?)\s*", text or "")
    if not m:
        raise LedgerInputError(f"{flag}: expected a token count such as 2e12 or 300B, got {text!r}")
    value = float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[m.group(2).upper()]
    if not (math.isfinite(value) and value >= 1):
        raise LedgerInputError(f"{flag}: must be at least 1 token, got {text!r}")
    return value


def parse_duration_days(text: str, flag: str = "--deadline") -> float:
    """A duration in days: ``30d``, ``36h``, ``2w`` or a plain number of days."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([hdwHDW]?)\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise LedgerInputError(f"{flag}: expected a positive duration such as 30d, 36h or 2w, got {text!r}")
    return float(m.group(1)) * {"": 1, "H": 1 / 24, "D": 1, "W": 7}[m.group(2).upper()]


def parse_nodes(text: str, flag: str = "--nodes") -> list[int]:
    """Node counts: ``8``, ``1..64`` (every count in the range) or a comma list ``2,4,8``."""
    try:
        if ".." in text:
            lo, hi = (int(p) for p in text.split("..", 1))
            counts = list(range(lo, hi + 1))
        else:
            counts = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise LedgerInputError(f"{flag}: expected a count (8), a range (1..64) or a list (2,4,8), got {text!r}") from None
    if not counts or counts[0] < 1 or counts[-1] > 4096:
        raise LedgerInputError(f"{flag}: node counts must be 1 to 4096, got {text!r}")
    if len(counts) > MAX_NODE_COUNTS:
        raise LedgerInputError(f"{flag}: at most {MAX_NODE_COUNTS} node counts per search, got {len(counts)}: "
                               f"narrow the range or give a list such as 8,16,32,64")
    return counts


def parse_choices(text: str, allowed: Sequence[str], flag: str) -> list[str]:
    """A comma list, each one of ``allowed``."""
    names = [s.strip() for s in (text or "").split(",") if s.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise LedgerInputError(f"{flag}: unknown {bad[0] if bad else '(empty)'!r}; use a comma list of {','.join(allowed)}")
    return names


def parse_ints(text: str, flag: str, low: int = 1, high: int = 4096) -> list[int]:
    try:
        values = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise LedgerInputError(f"{flag}: expected a comma list of whole numbers, got {text!r}") from None
    if not values or values[0] < low or values[-1] > high:
        raise LedgerInputError(f"{flag}: values must be {low} to {high}, got {text!r}")
    return values


@dataclass
class RecommendRequest:
    """What to plan: model × tokens on the ledger's offers, with the search space and limits."""

    model: str
    tokens: float
    node_types: Optional[list[str]] = None
    offers: Optional[list[str]] = None
    nodes: list[int] = field(default_factory=lambda: list(range(1, 65)))
    deadline_days: Optional[float] = None
    budget: Optional[Decimal] = None
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    micro_batches: Sequence[int] = MICRO_BATCHES
    strategies: Sequence[str] = STRATEGIES
    recompute: Sequence[str] = RECOMPUTE
    rank_by: str = "cost"
    top: int = 10
    currency: Optional[str] = None  # present costs in it (list prices at today's rate); None: Settings, else the offers'

    def shape(self) -> ModelShape:
        try:
            return get_shape(self.model)
        except ValueError as exc:
            raise LedgerInputError(f"--model: {exc}") from None

    def global_batch(self, shape: ModelShape) -> int:
        """Sequences per step: the batch tokens ÷ seq_len, at least 1."""
        return max(1, round(self.batch_tokens / shape.seq_len))


# --------------------------------------------------------------------------- hardware


def planning_hardware(session: Session, nt: NodeType,
                      efficiency: Optional[tuple[float, str]] = None) -> tuple[Hardware, str]:
    """The node type as ``plan recommend`` plans on it: with its newest GPU calibration (``trainledger.runs.calibrate``;
    factors on the default efficiency, its residual ranges) when there is one, else :func:`hardware` as is
    (``efficiency``: its ``calibrated_efficiency`` when the caller has read it)."""
    from trainledger.runs.calibrate import latest, model_hardware, summary

    cal = latest(session, nt.id, "gpu")
    if cal is None:
        return hardware(session, nt, efficiency)
    hw = model_hardware(session, nt, "gpu", nt.gpus_per_node)
    info = {k: v for k, v in summary(session, cal).items() if k != "runs"}
    _, links = hardware(session, nt, efficiency)
    return replace(hw, efficiency_source=info["label"], calibration=info), links


def calibration_factors(hw: Hardware):
    """The calibration's factors for ``trainledger.trainer.plan.search.evaluate`` (None: uncalibrated)."""
    from trainledger.trainer.plan.factors import Factors

    return Factors(**hw.calibration["factors"]) if hw.calibration else None


def calibration_columns(hw: Hardware, step_s: float, memory_bytes: float) -> dict[str, Any]:
    """Per plan: how it was predicted and the range of its step time and memory from the residuals."""
    from trainledger.runs.calibrate import with_range

    c = hw.calibration
    if not c:
        return {"calibration": "uncalibrated", "step_time_range_s": None, "memory_range_gib": None}
    mem = with_range(memory_bytes / GIB, c["memory_range"])
    return {"calibration": c["label"], "step_time_range_s": with_range(step_s, c["step_range"]),
            "memory_range_gib": mem}


def _calibrations(hw_rows: list[dict[str, Any]]) -> dict[str, str]:
    return {h["node_type"]: h["calibration"] for h in hw_rows}


def _select_offers(session: Session, req: RecommendRequest) -> list[tuple[NodeType, list[Offer]]]:
    """The node types to plan on with their offers (``--node-type``/``--offers`` narrow it); one currency."""
    nts = {nt.id: nt for nt in session.exec(select(NodeType).order_by(NodeType.name)).all()}
    offers = session.exec(select(Offer).order_by(Offer.name)).all()
    for flag, wanted, known in (("--node-type", req.node_types, [n.name for n in nts.values()]),
                                ("--offers", req.offers, [o.name for o in offers])):
        unknown = [w for w in (wanted or []) if w not in known]
        if unknown:
            raise LedgerInputError(f"{flag}: unknown {unknown[0]!r}; use one of {', '.join(known)}")
    chosen = [o for o in offers if (not req.offers or o.name in req.offers)
              and (not req.node_types or nts[o.node_type_id].name in req.node_types)]
    if not chosen:
        raise LedgerInputError("no offer for the chosen node types: add one (trainledger pricing import) "
                               "or widen --node-type/--offers")
    chosen = at_list_prices(session, chosen, req.currency)  # what-ifs: list prices, in the presentation currency
    currencies = sorted({o.currency for o in chosen})
    if len(currencies) > 1:
        raise LedgerInputError(f"--offers: the offers are priced in {', '.join(currencies)}; ranking needs one "
                               f"currency: pick offers of one currency with --offers")
    by_nt: dict[int, list[Offer]] = {}
    for o in chosen:
        by_nt.setdefault(o.node_type_id, []).append(o)
    return [(nts[k], v) for k, v in sorted(by_nt.items(), key=lambda kv: nts[kv[0]].name)]


# --------------------------------------------------------------------------- the search


@dataclass
class _Tally:
    """Discarded plans: counts per reason kind and a few examples each."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[tuple[float, int, dict]]] = field(default_factory=dict)

    def add(self, kind: str, example_fn, score: float = 0.0) -> None:
        """Count one; keep its example if it is among the lowest ``score`` (e.g. closest to fitting) so far."""
        n = self.counts[kind] = self.counts.get(kind, 0) + 1
        kept = self.examples.setdefault(kind, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append((score, n, example_fn()))
        elif score < kept[-1][0]:
            kept[-1] = (score, n, example_fn())
        else:
            return
        kept.sort(key=lambda e: (e[0], e[1]))

    def listing(self) -> list[dict]:
        return [dict(e, kind=k) for k, ex in sorted(self.examples.items()) for _, _, e in ex]


def _discard_example(nt: NodeType, ev: Evaluated, reason: str, offer: Optional[Offer] = None) -> dict[str, Any]:
    c = ev.candidate
    return {"node_type": nt.name, "offer": offer.name if offer else None, "nodes": c.nodes, "plan": c.label(),
            "strategy": c.strategy, "dp": c.dp, "tp": c.tp, "pp": c.pp, "zero_stage": c.zero_stage,
            "micro_batch": c.micro_batch, "recompute": c.recompute,
            "memory_gib": ev.memory.total / GIB if ev.memory else None, "reason": reason}


def _plan_row(shape: ModelShape, tokens: float, nt: NodeType, hw: Hardware, o: Offer, ev: Evaluated,
              hours: Decimal, cost: Decimal) -> dict[str, Any]:
    c, mem, t = ev.candidate, ev.memory, ev.time
    gpus = c.nodes * c.gpus_per_node
    tps = ev.tokens_per_s
    return {
        "offer": o.name, "offer_kind": getattr(o.kind, "value", o.kind), "currency": o.currency,
        "node_type": nt.name, "nodes": c.nodes, "gpus": gpus, "plan": c.label(), "strategy": c.strategy,
        "dp": c.dp, "tp": c.tp, "pp": c.pp, "zero_stage": c.zero_stage, "micro_batch": c.micro_batch,
        "grad_accum": c.grad_accum, "global_batch": c.global_batch, "recompute": c.recompute,
        **{k: v for k, v in mem.as_gib().items() if k != "stage"}, "fullest_stage": mem.stage,
        "gpu_memory_gib": hw.gpu_memory_bytes / GIB,
        "step_time_s": t.total_s, "tokens_per_s": tps, "hours": float(hours), "days": float(hours) / 24,
        "cost": cost, "cost_per_1m_tokens": costs.cost_per_million_tokens(cost, int(tokens)),
        "bottleneck": t.bottleneck, "comm_share": t.comm_share, "bubble_share": t.bubble_s / t.total_s,
        "mfu": costs.mfu(tps, flops_per_token(shape), hw.peak_tflops, gpus),
        "efficiency": hw.efficiency, **calibration_columns(hw, t.total_s, mem.total),
    }


def _search_node_type(shape: ModelShape, req: RecommendRequest, nt: NodeType, hw: Hardware, offers: list[Offer],
                      tally: _Tally, kept: list[tuple], counts: dict[str, int], memo: Optional[dict] = None) -> None:
    """Evaluate every candidate on this node type; price the ones that fit under every offer."""
    deadline_h = req.deadline_days * 24 if req.deadline_days is not None else None
    factors = calibration_factors(hw)
    memo = {} if memo is None else memo
    for nodes in req.nodes:
        key = ("candidates", nodes, nt.gpus_per_node)  # the same on every node type of as many GPUs per node
        if key not in memo:
            memo[key] = list(candidates(shape, nodes, nt.gpus_per_node, req.global_batch(shape), req.strategies,
                                        req.micro_batches, req.recompute))
        for c in memo[key]:
            ev = evaluate(shape, c, hw, factors=factors, memo=memo)
            counts["plans_evaluated"] += 1
            counts["candidates"] += len(offers)
            if not ev.kept:
                tally.add(reason_kind(ev.reason), lambda: _discard_example(nt, ev, ev.reason),
                          ev.memory.total if ev.memory else 0.0)
                continue
            hours_f = req.tokens / ev.tokens_per_s / 3600
            if deadline_h is not None and hours_f > deadline_h:
                tally.add("misses the deadline", lambda: _discard_example(
                    nt, ev, f"misses the deadline: {hours_f / 24:,.1f} days > {req.deadline_days:g}"), hours_f)
                continue
            hours = Decimal(repr(hours_f))
            for o in offers:
                cost = costs.planned_run_cost(o, nodes, hours)
                if req.budget is not None and cost > req.budget:
                    tally.add("over budget", lambda: _discard_example(
                        nt, ev, f"over budget: {costs.cents(cost):,} > {req.budget:,} {o.currency}", o), float(cost))
                    continue
                key = (cost, hours_f) if req.rank_by == "cost" else (hours_f, cost)
                kept.append((key, counts["candidates"], nt, hw, o, ev, hours, cost))


def recommend(session: Session, req: RecommendRequest) -> dict[str, Any]:
    """Every plan for ``req`` evaluated, the best ``req.top`` ranked, and why the others were discarded."""
    if req.rank_by not in RANK_BY:
        raise LedgerInputError(f"--rank-by: use one of {', '.join(RANK_BY)}, got {req.rank_by!r}")
    shape = req.shape()
    tally, kept = _Tally(), []
    counts = {"candidates": 0, "plans_evaluated": 0}
    hw_rows, memo = [], {}  # memo: candidates, their validation and each layout's memory, once for every node type
    chosen = _select_offers(session, req)
    efficiency = calibrated_efficiencies(session, [nt for nt, _ in chosen])  # every node type's in one read
    for nt, offers in chosen:
        hw, links = planning_hardware(session, nt, efficiency[nt.id])
        hw_rows.append(hardware_summary(hw, links, [o.name for o in offers]))
        _search_node_type(shape, req, nt, hw, offers, tally, kept, counts, memo)
    kept.sort(key=lambda k: (k[0], k[1]))
    plans = [{"rank": i, **_plan_row(shape, req.tokens, nt, hw, o, ev, hours, cost)}
             for i, (_, _, nt, hw, o, ev, hours, cost) in enumerate(kept[: req.top], 1)]
    per_offer: dict[str, dict[str, Any]] = {}
    for i, (_, _, nt, hw, o, ev, hours, cost) in enumerate(kept, 1):  # each offer's best, however far down the ranking
        if o.name not in per_offer:
            reserved = getattr(o.kind, "value", o.kind) == "rent_reserved"
            per_offer[o.name] = {"rank": i, **_plan_row(shape, req.tokens, nt, hw, o, ev, hours, cost),
                                 "reserved_months": costs.reserved_months(hours) if reserved else None}
    return {
        "model": {**shape.to_dict(), "params": param_count(shape), "flops_per_token": flops_per_token(shape)},
        "tokens": req.tokens, "global_batch": req.global_batch(shape),
        "tokens_per_step": req.global_batch(shape) * shape.seq_len, "rank_by": req.rank_by,
        "deadline_days": req.deadline_days, "budget": req.budget,
        "currency": kept[0][4].currency if kept else None,
        "counts": {**counts, "kept": len(kept), "discarded": dict(sorted(tally.counts.items()))},
        "hardware": hw_rows, "plans": plans, "best_per_offer": sorted(per_offer.values(), key=lambda r: r["rank"]),
        "discarded": tally.listing(), "calibrations": _calibrations(hw_rows),
        "predicted": "every figure is the planning model's prediction (docs/PLANNER.md), not a measurement",
    }


# --------------------------------------------------------------------------- the pre-scale trial


def _trial_layouts(row: dict[str, Any], shape: ModelShape, nodes: int, gpus_per_node: int):
    """(dp, tp, pp, layers) options for the plan on ``nodes`` trial nodes, most faithful first.

    tp is kept; every stage keeps its L/pp layers, so a GPU holds and
    computes what it would at scale; dp is kept when it fits (ZeRO shards
    over it), else the largest that does; pipelines keep at least 2 stages.
    ZeRO-3 data parallelism keeps the per-GPU share P/N by scaling the layers
    with the GPU count. The trial may use fewer GPUs per node than there are.
    """
    tp, pp, dp, strategy = row["tp"], row["pp"], row["dp"], row["strategy"]
    options = []
    for pp_t in (d for d in range(pp, 0, -1) if pp % d == 0):
        if strategy in ("pp", "3d") and pp_t < 2:
            continue
        for dp_t in range(min(dp, nodes * gpus_per_node // (tp * pp_t)), 0, -1):
            world = dp_t * tp * pp_t
            if world % nodes or world // nodes > gpus_per_node:
                continue
            layers = shape.n_layers // pp * pp_t
            if strategy == "zero3":
                layers = max(1, shape.n_layers * world // row["gpus"])
            options.append(((dp_t == dp, pp_t, dp_t), (dp_t, tp, pp_t, layers)))
    for _, layout in sorted(options, key=lambda o: o[0], reverse=True):
        yield layout


def _trial_config(row: dict[str, Any], shape: ModelShape, dp: int, tp: int, pp: int, layers: int,
                  steps: int) -> dict[str, Any]:
    """The trainer config (YAML mapping) of one trial run."""
    parallel: dict[str, Any] = {"strategy": row["strategy"], "micro_batch": row["micro_batch"],
                                "global_batch": row["micro_batch"] * row["grad_accum"] * dp}
    if row["strategy"] in ("tp", "3d"):
        parallel["tp"] = tp
    if row["strategy"] in ("pp", "3d"):
        parallel["pp"] = pp
    if row["strategy"] in ("pp", "tp"):
        parallel["zero_stage"] = row["zero_stage"]
    model: dict[str, Any] = {"shape": shape.name, "activation_checkpointing": row["recompute"] == "full"}
    if layers != shape.n_layers:
        model["n_layers"] = layers
    return {"model": model, "parallel": parallel, "steps": steps, "log_every": 1}


def _trial_entry(session: Session, row: dict[str, Any], shape: ModelShape, nodes: int, steps: int,
                 index: int) -> tuple[Optional[dict[str, Any]], str]:
    """The first trial layout of ``row`` that fits on the trial cluster, with its predictions; or the reason none does."""
    from trainledger.trainer.plan.search import Candidate

    nt = session.exec(select(NodeType).where(NodeType.name == row["node_type"])).one()
    hw, _ = hardware(session, nt)
    why = f"tp {row['tp']} × 2 stages needs more than the trial's {nodes * nt.gpus_per_node} GPUs"
    for dp, tp, pp, layers in _trial_layouts(row, shape, nodes, nt.gpus_per_node):
        trial_shape = replace(shape, name=f"{shape.name}+custom", n_layers=layers)
        gpn = dp * tp * pp // nodes
        cand = Candidate(row["strategy"], dp, tp, pp, row["zero_stage"], row["micro_batch"], row["grad_accum"],
                         row["recompute"], nodes, gpn)
        ev = evaluate(trial_shape, cand, replace(hw, gpus_per_node=gpn))
        if not ev.kept:
            why = ev.reason
            continue
        return {
            "name": f"{index}-{row['strategy']}", "from_plan": row["plan"], "from_rank": row["rank"],
            "node_type": nt.name, "nodes": nodes, "gpus_per_node": gpn, "dp": dp, "tp": tp, "pp": pp,
            "n_layers": layers, "config": _trial_config(row, shape, dp, tp, pp, layers, steps),
            "predicted_step_time_s": ev.time.total_s, "predicted_memory_gib": ev.memory.total / GIB,
            "note": "per GPU: the plan's layers per stage, micro-batch and tensor degree"
                    + ("" if dp == row["dp"] else f"; dp {dp} instead of {row['dp']} (ZeRO shards over fewer GPUs)"),
        }, ""
    return None, why


def trial_plan(session: Session, result: dict[str, Any], *, nodes: int = 2, count: int = 3,
               steps: int = 10) -> dict[str, Any]:
    """The best ``count`` distinct plans of ``result`` as trial runs on ``nodes`` nodes, with predictions."""
    shape = get_shape(result["model"]["name"])
    entries, skipped, seen = [], [], set()
    for row in result["plans"]:
        if len(entries) >= count:
            break
        key = (row["node_type"], row["strategy"], row["tp"], row["pp"], row["zero_stage"], row["micro_batch"],
               row["recompute"])
        if key in seen:
            continue
        seen.add(key)
        entry, why = _trial_entry(session, row, shape, nodes, steps, len(entries) + 1)
        if entry is None:
            skipped.append({"plan": row["plan"], "nodes": row["nodes"], "reason": why})
        else:
            entries.append(entry)
    return {"nodes": nodes, "steps": steps, "runs": entries, "skipped": skipped}


def write_trial(trial: dict[str, Any], sweep_id: str) -> dict[str, Path]:
    """Write each trial run's config as YAML under the sweep config directory; name → path."""
    import yaml
    from trainledger.runs.sweep import config_dir

    out = config_dir() / sweep_id
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for e in trial["runs"]:
        path = out / f"{e['name']}.yaml"
        path.write_text(yaml.safe_dump(e["config"], sort_keys=False), encoding="utf-8")
        paths[e["name"]] = path
        e["config_path"] = str(path)
    return paths


def attach_measured(session: Session, trial: dict[str, Any], ran: list[dict[str, Any]]) -> None:
    """Put each trial run's measured median step time and peak memory beside its prediction."""
    by_name = {r["strategy"]: r for r in ran}  # run_sweep names its entries by the trial run names
    for e in trial["runs"]:
        r = by_name.get(e["name"])
        run = session.get(Run, r["run_id"]) if r else None
        e["run_id"] = run.id if run else None
        e["status"] = run.status.value if run else "not run"
        e["measured_step_time_s"] = run.step_time_median_s if run else None
        e["measured_memory_gib"] = run.peak_mem_bytes / GIB if run and run.peak_mem_bytes else None
        e["memory_kind"] = run.mem_kind if run else None


# --------------------------------------------------------------------------- the seven strategies on one cluster


def strategy_table(session: Session, model: str | ModelShape, tokens: float, node_type: str, nodes: int,
                   batch_tokens: int = DEFAULT_BATCH_TOKENS) -> dict[str, Any]:
    """Each strategy's best layout on ``nodes`` nodes of ``node_type``: the cheapest that fits, else the one
    needing the least memory (with what it would take on cards big enough), priced with the cheapest offer.

    The seed's weekly strategy comparison, predicted: memory per GPU, time for the tokens, communication
    share and cost per 1M tokens for dp, zero1, zero2, zero3, pp, tp and 3d.
    """
    req = RecommendRequest(model=model if isinstance(model, str) else model.name, tokens=tokens,
                           node_types=[node_type], nodes=[nodes], batch_tokens=batch_tokens)
    shape = model if isinstance(model, ModelShape) else req.shape()
    ((nt, offers),) = _select_offers(session, req)
    hw, links = planning_hardware(session, nt)
    rows, factors = [], calibration_factors(hw)
    for strategy in STRATEGIES:
        best = None
        for c in candidates(shape, nodes, nt.gpus_per_node, req.global_batch(shape), [strategy]):
            ev = evaluate(shape, c, hw, time_if_too_big=True, factors=factors)
            if ev.memory is None or ev.time is None:
                continue
            key = (not ev.kept, ev.memory.total if not ev.kept else ev.time.total_s)
            if best is None or key < best[0]:
                best = (key, ev)
        rows.append(_strategy_row(shape, tokens, nt, hw, offers, strategy, best[1] if best else None))
    return {"model": shape.name, "node_type": nt.name, "nodes": nodes, "gpus": nodes * nt.gpus_per_node,
            "tokens": tokens, "hardware": hardware_summary(hw, links, [o.name for o in offers]), "strategies": rows,
            "predicted": "every figure is the planning model's prediction (docs/PLANNER.md), not a measurement"}


def _strategy_row(shape: ModelShape, tokens: float, nt: NodeType, hw: Hardware, offers: list[Offer], strategy: str,
                  ev: Optional[Evaluated]) -> dict[str, Any]:
    if ev is None:
        return {"strategy": strategy, "fits": False, "plan": None, "reason": "no valid layout on this cluster"}
    hours = Decimal(repr(tokens / ev.tokens_per_s / 3600))
    priced = sorted((costs.planned_run_cost(o, ev.candidate.nodes, hours), o.name) for o in offers)
    cost, offer_name = priced[0]
    offer = next(o for o in offers if o.name == offer_name)
    row = _plan_row(shape, tokens, nt, hw, offer, ev, hours, cost)
    return {"strategy": strategy, "fits": ev.kept, "reason": ev.reason, **row}


# --------------------------------------------------------------------------- predicted vs measured


def predict_run(run: Run, hw: Hardware, precision: str = "bf16", reserved: Optional[float] = None) -> dict[str, Any]:
    """The planning model's step time and memory for a measured run (its own config and plan) beside the
    measurements, with the relative errors (predicted − measured) ÷ measured.

    ``reserved`` replaces the per-GPU reserve of the allowance (on CPU: the
    measured RSS of a process with torch, DeepSpeed and gloo loaded).
    """
    from trainledger.trainer.config import config_from_dict
    from trainledger.trainer.plan.memory import RESERVED_BYTES, memory_per_gpu
    from trainledger.trainer.plan.timing import step_time

    cfg = config_from_dict((run.config or {}).get("train") or {})
    shape = cfg.shape
    recompute = "full" if cfg.model.activation_checkpointing else "none"
    dims = dict(dp=run.dp, tp=run.tp, pp=run.pp, zero_stage=run.zero_stage, micro_batch=run.micro_batch)
    mem = memory_per_gpu(shape, **dims, micro_batches=run.grad_accum, recompute=recompute, precision=precision,
                         reserved=RESERVED_BYTES if reserved is None else reserved)
    t = step_time(shape, hw, **dims, micro_batches=run.grad_accum, stage_params=mem.params, recompute=recompute,
                  precision=precision)

    def err(pred, meas):
        return (pred - meas) / meas if pred is not None and meas else None

    return {"run_id": run.id, "strategy": run.strategy, "world_size": run.world_size, **dims,
            "grad_accum": run.grad_accum, "model": shape.name, "recompute": recompute,
            "measured_step_time_s": run.step_time_median_s, "predicted_step_time_s": t.total_s if t else None,
            "step_time_error": err(t.total_s if t else None, run.step_time_median_s),
            "measured_comm_share": run.comm_share, "predicted_comm_share": t.comm_share if t else None,
            "predicted_bottleneck": t.bottleneck if t else None,
            "measured_memory_bytes": run.peak_mem_bytes, "memory_kind": run.mem_kind,
            "predicted_memory_bytes": mem.total, "memory_error": err(mem.total, run.peak_mem_bytes),
            "predicted_parts_bytes": {"model_states": mem.states.total, "activations": mem.activations.total,
                                      "allowance": mem.allowance}}
