"""Planner: the cheapest plan that fits, the seven strategies on one cluster, and why plans were discarded.

Everything shown comes from ``trainledger.runs.plan`` (``trainledger plan
recommend`` prints the same ranking for the same inputs); the figures are the
planning model's predictions (docs/PLANNER.md), labelled as such.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Optional

import altair as alt
import pandas as pd
import streamlit as st
from trainledger.app.queries import data, planner
from trainledger.app.views import access, ui
from trainledger.errors import LedgerInputError
from trainledger.trainer.shapes import SHAPES, param_count


def _one(currencies: set) -> Optional[str]:
    """The currency a table's money is in, when all its priced rows share one (else each money header says none)."""
    currencies = {c for c in currencies if c}
    return next(iter(currencies)) if len(currencies) == 1 else None


def _labels(currency: Optional[str]) -> dict[str, str]:
    """:data:`LABELS` with the predicted cost headed by its currency (the figures' headers take it from ui.frame)."""
    return {**LABELS, "cost": f"cost ({ui.md(currency)})"} if currency else LABELS


# what decides first (offer, size, time, cost), so it is in view at 1280 px; the model's details after
RANKING = ["rank", "offer", "nodes", "days", "cost", "cost_per_1m_tokens", "plan", "node_type", "total_gib",
           "memory_range", "step_time_s", "step_range", "calibration", "tokens_per_s", "bottleneck", "comm_share", "mfu"]
LABELS = {"total_gib": "memory per GPU (GiB)", "tokens_per_s": "tokens/s",
          "comm_share": "comm share", "mfu": "MFU (predicted)", "node_type": "node type", "offer_kind": "kind",
          "reserved_months": "months reserved", "step_time_s": "step time (s)",
          "step_range": "step time range (s)", "memory_range": "memory range (GiB)"}
PER_OFFER = ["offer", "offer_kind", "rank", "nodes", "plan", "days", "reserved_months", "cost", "cost_per_1m_tokens"]
STRATEGY_COLS = ["strategy", "fits", "plan", "total_gib", "days", "comm_share", "cost_per_1m_tokens", "offer",
                 "bottleneck", "reason"]

access.team_only(access.page_gate(), "Planner")  # team totals: not for a project-scoped user (docs/SCOPES.md)
url = data.ledger_url()
currency = ui.currency_picker(url)
st.title("Planner")
st.caption("Which cluster, strategy and offer trains a model on T tokens most cheaply? Every figure below is "
           "**predicted** by the planning model (memory after DeepSpeed and Korthikanti et al., time from FLOPs and "
           "an alpha-beta network model); nothing here is saved.")

# --- inputs -----------------------------------------------------------------------------
names = list(SHAPES)
c = st.columns(4)
model = c[0].selectbox("Model", names, index=names.index("llama2-70b"), key="plan_model")
shape = SHAPES[model]
tokens_b = c[1].number_input("Tokens (billions)", 0.001, 1_000_000.0, 2000.0, key="plan_tokens_b",
                             help="Llama 2 was trained on 2T tokens; Chinchilla-optimal is ~20 per parameter.")
rank_by = c[2].selectbox("Rank by", ["cost", "time"], key="plan_rank_by")
top = int(c[3].number_input("Plans to list", 1, 100, 10, key="plan_top"))
st.caption(f"{shape.name}: {param_count(shape):,} ({ui.compact(param_count(shape))}) parameters · {shape.arch} · L={shape.n_layers} d={shape.d_model} "
           f"H={shape.n_heads} KV={shape.n_kv_heads} · {shape.seq_len} tokens per sequence.")
nts = [n.name for n in data.node_types(url)]
with_offers = sorted({name for _, name in data.offers(url)})
c = st.columns(4)
chosen_nts = c[0].multiselect("Node types", nts, default=with_offers, key="plan_node_types")
lo, hi = c[1].slider("Nodes", 1, 128, (1, 64), key="plan_nodes")
deadline = c[2].number_input("Deadline (days, 0 = none)", 0.0, 100_000.0, 0.0, key="plan_deadline")
budget_text = c[3].text_input(f"Budget ({currency}, empty = none)", "", key="plan_budget")
try:
    budget = Decimal(budget_text) if budget_text.strip() else None
except InvalidOperation:
    st.error(f"Budget: expected a number, got {ui.md(repr(budget_text))}")
    st.stop()
if not chosen_nts:
    ui.empty("Pick at least one node type with an offer (Settings lists the offers).")
    st.stop()
args = (model, tokens_b * 1e9, tuple(chosen_nts), tuple(range(lo, hi + 1)), deadline or None, budget, rank_by, top,
        currency)
try:
    result = planner.recommend(url, *args)
except LedgerInputError as exc:
    st.error(ui.error_line(exc))
    st.stop()

# --- ranking ----------------------------------------------------------------------------
st.subheader("Ranking (predicted)", help=ui.RESERVED_RULE)
counts = result["counts"]
st.caption(f"{counts['candidates']:,} candidate plans ({counts['plans_evaluated']:,} layouts × offers), "
           f"{counts['kept']:,} fit and pass the trainer's plan validation; ranked by {rank_by}. "
           f"The same list: `{planner.cli_command(*args)}`.")
plans = result["plans"]
if plans:
    best = plans[0]
    m = [*st.columns(3), *st.columns(3)]  # two rows of three: a cost of millions is read whole at 1280 px
    m[0].metric("Cheapest plan" if rank_by == "cost" else "Fastest plan", f"{best['nodes']} × {ui.md(best['node_type'])}",
                border=True, help=ui.md(best["plan"]))
    m[1].metric("Predicted cost", f"{ui.money('cost', best['cost'])} {best['currency']}", border=True,
                help=f"Under {ui.md(best['offer'])}. {ui.RESERVED_RULE}")
    m[2].metric("Predicted time", f"{best['days']:,.1f} days", border=True)
    m[3].metric("Predicted throughput", f"{ui.compact(best['tokens_per_s'])} tokens/s", border=True,
                help=f"{best['tokens_per_s']:,.0f} tokens/s for {ui.compact(tokens_b * 1e9)} tokens.")
    m[4].metric("Memory per GPU", f"{best['total_gib']:.1f} of {best['gpu_memory_gib']:g} GiB", border=True)
    m[5].metric("Predicted cost per 1M tokens", f"{ui.money('cost_per_1m_tokens', best['cost_per_1m_tokens'])} {best['currency']}",
                border=True)
    st.dataframe(ui.frame(planner.with_ranges(plans), RANKING, _labels(best["currency"]), currency=best["currency"]),
                 hide_index=True)
    parts = pd.DataFrame([{"plan": f"{p['rank']}. {p['plan']}", "part": part, "GiB": p[key]} for p in plans
                          for part, key in (("model states", "model_states_gib"), ("activations", "activations_gib"),
                                            ("allowance", "allowance_gib"))])
    bars = alt.Chart(parts).mark_bar().encode(
        x=alt.X("plan:N", sort=None, title=None), y=alt.Y("GiB:Q", title="GiB per GPU (predicted)"),
        color=alt.Color("part:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["plan", "part", alt.Tooltip("GiB:Q", format=",.2f")])
    limit = alt.Chart(pd.DataFrame([{"GiB": best["gpu_memory_gib"]}])).mark_rule(color="red", strokeDash=[6, 3]).encode(y="GiB:Q")
    ui.show_chart((bars + limit).properties(height=300))
else:
    st.error("No plan fits: see why below. Add nodes, a node type with more memory, or a smaller model.")
if result["best_per_offer"]:
    st.markdown("**Best plan under each offer (predicted)**", help=ui.RESERVED_RULE)
    per_offer_cur = _one({r.get("currency") for r in result["best_per_offer"]})
    st.dataframe(ui.frame(result["best_per_offer"], PER_OFFER, _labels(per_offer_cur), currency=per_offer_cur),
                 hide_index=True)
    st.caption(ui.md(ui.RESERVED_RULE) + " Elastic rent bills the node-hours used (per its granularity); owning "
               "prices the node-hours at the fleet's full-use rate.")
for h in result["hardware"]:
    st.caption(f"{ui.md(h['node_type'])}: **{ui.md(h['calibration'])}** (`trainledger plan calibrate`); "
               f"compute efficiency {h['efficiency']:.0%} ({ui.md(h['efficiency_source'])}); "
               f"links {ui.md(h['links'])} ({h['intra_node_gbytes_per_s']:g} GB/s in a node, "
               f"{h['inter_node_gbits_per_s']:g} Gb/s between nodes).")

# --- why plans were discarded -----------------------------------------------------------
st.subheader("Why plans were discarded")
if counts["discarded"]:
    st.dataframe(pd.DataFrame([{"reason": k, "plans": n} for k, n in counts["discarded"].items()]), hide_index=True)
    st.caption("Examples (the closest to fitting, for memory):")
    st.dataframe(pd.DataFrame([{"reason": e["kind"], "nodes": e["nodes"], "node type": e["node_type"],
                                "plan": e["plan"], "memory per GPU (GiB)": e["memory_gib"], "why": e["reason"]}
                               for e in result["discarded"]]), hide_index=True)
else:
    st.caption("None: every candidate fits.")

# --- the seven strategies on one cluster --------------------------------------------------
st.subheader("The seven strategies on one cluster (predicted)")
c = st.columns(2)
nt_name = c[0].selectbox("Node type", chosen_nts, key="plan_table_nt")
nodes = int(c[1].number_input("Nodes", 1, 4096, 8, key="plan_table_nodes"))
try:
    table = planner.strategy_table(url, model, tokens_b * 1e9, nt_name, nodes)
except LedgerInputError as exc:
    st.info(ui.error_line(exc))
    st.stop()
st.caption(f"Each strategy's best layout on {nodes} × {ui.md(nt_name)} ({table['gpus']} GPUs): the cheapest that fits, else "
           "the one needing the least memory, with what it would take on cards big enough.")
rows = [dict(r, fits="✓ fits" if r["fits"] else "✗ " + (r["reason"] or "").split(":")[0]) for r in table["strategies"]]
table_cur = _one({r.get("currency") for r in rows})
st.dataframe(ui.frame(rows, STRATEGY_COLS, _labels(table_cur), currency=table_cur), hide_index=True)
