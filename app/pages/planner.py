"""Planner: model-state memory per GPU for every strategy on a cluster, and what training would take and cost.

Memory: :func:`app.planner.plans` (ZeRO paper formulas; plans checked by the
trainer's own rules). Time: FLOPs per token from ``trainer.shapes``. Cost: the
run costed under every offer of the node type as ``trainledger runs show`` does.
"""

from __future__ import annotations

from decimal import Decimal

import altair as alt
import pandas as pd
import streamlit as st

from app import access, data, planner, ui
from ledger.reports.present import fmt_cell
from ledger.runs.registry import cost_under_offers
from trainer.shapes import SHAPES, ModelShape, flops_per_token, param_count

CUSTOM = "custom"

access.page_gate()
url = data.ledger_url()
currency = ui.currency_picker(url)
st.title("Planner")
st.caption("Will a model fit, with which strategy, and what will training cost? Nothing here is saved.")

# --- model ----------------------------------------------------------------------------
st.subheader("Model")
names = list(SHAPES) + [CUSTOM]
c = st.columns(6)
preset = c[0].selectbox("Shape", names, index=names.index("7b") if "7b" in names else 0, key="plan_shape")
base = SHAPES.get(preset) or SHAPES.get("7b") or next(iter(SHAPES.values()))
disabled = preset != CUSTOM
layers = c[1].number_input("Layers", 1, 1000, base.n_layers, disabled=disabled, key=f"plan_layers_{preset}")
d_model = c[2].number_input("Hidden size", 1, 100_000, base.d_model, disabled=disabled, key=f"plan_d_{preset}")
heads = c[3].number_input("Heads", 1, 1000, base.n_heads, disabled=disabled, key=f"plan_heads_{preset}")
seq = c[4].number_input("Sequence length", 1, 1_000_000, base.seq_len, disabled=disabled, key=f"plan_seq_{preset}")
vocab = c[5].number_input("Vocabulary", 1, 10_000_000, base.vocab_size, disabled=disabled, key=f"plan_vocab_{preset}")
try:
    shape = base if disabled else ModelShape(CUSTOM, int(layers), int(d_model), int(heads), int(seq), int(vocab))
except ValueError as exc:
    st.error(str(exc))
    st.stop()
n_params = param_count(shape)
st.caption(f"{n_params:,} parameters ({n_params / 1e9:,.2f} B) · {flops_per_token(shape):,} training FLOPs per token "
           "(6N + 12·L·H·Q·T).")

# --- cluster -----------------------------------------------------------------------------
st.subheader("Cluster")
nts = data.node_types(url)
nt_names = [n.name for n in nts]
c = st.columns(6)
nt_name = c[0].selectbox("Node type", nt_names, index=nt_names.index("rtx4090-8x") if "rtx4090-8x" in nt_names else 0,
                         key="plan_nt")
nt = next(n for n in nts if n.name == nt_name)
nodes = int(c[1].number_input("Nodes", 1, 4096, 8, key="plan_nodes"))
gpn = int(c[2].number_input("GPUs per node", 1, 64, nt.gpus_per_node, key=f"plan_gpn_{nt_name}"))
mem_gb = float(c[3].number_input("GPU memory (GiB)", 1.0, 4096.0, float(nt.gpu_memory_gb), key=f"plan_mem_{nt_name}"))
tp = int(c[4].number_input("TP degree (tp, 3d)", 1, 64, min(gpn, 8), key="plan_tp",
                           help="Tensor parallelism splits each layer across GPUs; keep it within a node."))
pp = int(c[5].number_input("PP degree (pp, 3d)", 1, 1024, min(nodes, 4), key="plan_pp",
                           help="Pipeline stages; must divide the layer count."))
mem_bytes = mem_gb * planner.GIB

rows = [p.as_dict(mem_bytes) for p in planner.plans(shape, nodes, gpn, mem_bytes, tp, pp)]
st.subheader("Model-state memory per GPU")
st.caption(f"Mixed-precision Adam: 2 bytes/param weights + 2 gradients + K = {planner.K_ADAM} optimizer states; "
           "ZeRO-1 shards the optimizer states over dp, ZeRO-2 also the gradients, ZeRO-3 also the weights; "
           "TP and PP divide the parameters. Activations and buffers come on top: keep headroom.")
table = []
for r in rows:
    fits = ui.DASH if r["fits"] is None else ("✓ fits" if r["fits"] else "✗ too big")
    table.append({"strategy": r["strategy"], "dp × tp × pp": f"{r['dp']} × {r['tp']} × {r['pp']}",
                  "ZeRO": r["zero_stage"],
                  "weights GiB": r["params_gib"], "gradients GiB": r["grads_gib"], "optimizer GiB": r["optimizer_gib"],
                  "total GiB": r["total_gib"], "headroom GiB": r["headroom_gib"], f"fits {mem_gb:g} GiB": fits,
                  "why not": r["error"] or ""})
st.dataframe(pd.DataFrame(table), hide_index=True,
             column_config={k: st.column_config.NumberColumn(format="%.2f") for k in
                            ("weights GiB", "gradients GiB", "optimizer GiB", "total GiB", "headroom GiB")})
valid = [r for r in rows if r["error"] is None]
if valid:
    stacked = pd.DataFrame([{"strategy": r["strategy"], "part": part, "GiB": r[key]}
                            for r in valid for part, key in (("weights", "params_gib"), ("gradients", "grads_gib"),
                                                             ("optimizer states", "optimizer_gib"))])
    bars = alt.Chart(stacked).mark_bar().encode(
        x=alt.X("strategy:N", sort=None, title=None), y=alt.Y("GiB:Q", title="GiB per GPU"),
        color=alt.Color("part:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["strategy", "part", alt.Tooltip("GiB:Q", format=",.2f")])
    limit = alt.Chart(pd.DataFrame([{"GiB": mem_gb}])).mark_rule(color="red", strokeDash=[6, 3]).encode(y="GiB:Q")
    ui.show_chart((bars + limit).properties(height=300))
    fitting = [r["strategy"] for r in valid if r["fits"]]
    if fitting:
        st.success(f"Model states fit in {mem_gb:g} GiB with: {', '.join(fitting)}.")
    else:
        st.error(f"No strategy fits the model states in {mem_gb:g} GiB per GPU: add nodes, raise tp/pp, or pick a smaller model.")

# --- time and cost ------------------------------------------------------------------------
st.subheader("Training time and cost")
c = st.columns(3)
tokens_b = c[0].number_input("Tokens to train on (billions)", 0.001, 100_000.0, round(20 * n_params / 1e9, 3),
                             key=f"plan_tokens_{preset}", help="Default: 20 tokens per parameter (Chinchilla).")
mfu = c[1].number_input("Assumed MFU", 0.01, 1.0, 0.35, 0.01, key="plan_mfu",
                        help="Model FLOPs utilization you expect; see the MFU the ledger measured on Overview.")
peak = c[2].number_input("Peak bf16 TFLOPs per GPU", 0.1, 100_000.0, float(nt.peak_bf16_tflops), key=f"plan_peak_{nt_name}")
hours = planner.training_hours(tokens_b * 1e9, shape, float(mfu), float(peak), nodes * gpn)
st.metric("Wall-clock time", f"{hours:,.1f} h ({hours / 24:,.1f} days)", border=True,
          help="tokens × FLOPs per token ÷ (MFU × peak × GPUs).")
offers = [o for o, name in data.offers(url, currency) if name == nt_name]
if offers:
    under = cost_under_offers(offers, nodes, Decimal(str(hours)))
    st.dataframe(ui.frame(under, ["offer", "kind", "cost", "basis"]), hide_index=True)
    best = min(under, key=lambda u: u["cost"])
    st.caption(f"Cheapest: {best['offer']} at {fmt_cell('cost', best['cost'])} {best['currency']} "
               f"for {nodes} nodes × {hours:,.1f} h.")
else:
    st.caption(f"No offer for {nt_name}: add one under Settings to see the cost.")
