"""Runs compared side by side on the Runs page (issue 39 item 2): pick 2 to 8 runs, or open ``/runs?compare=A,B,C``.

Everything comes from ``trainledger.runs.compare.compare_runs`` (``trainledger runs compare A B C`` prints the same):
loss, tokens/s, utilization, step time and cumulative cost on shared axes (hours since each run started), then the
runs' figures (as ``runs show``) and their config, the keys that differ marked.
"""

from __future__ import annotations

from typing import Any, Optional

import altair as alt
import pandas as pd
import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import ui
from trainledger.errors import LedgerInputError
from trainledger.runs.compare import CONFIG_KEYS, FIGURE_KEYS, MAX_RUNS, check_ids

#: series → (chart title, y-axis title); utilization's title depends on its source (GPU-Util or CPU)
CHARTS = {"loss": ("Loss", "loss"), "tokens_per_s": ("Throughput", "tokens/s"),
          "utilization": ("Utilization", "busy share"), "step_seconds": ("Step time", "seconds"),
          "cumulative": ("Cumulative cost", "cost")}
CONFIG_LABELS = {"dp": "DP", "tp": "TP", "pp": "PP", "zero_stage": "ZeRO stage", "micro_batch": "micro-batch",
                 "grad_accum": "grad accumulation", "seq_len": "sequence length", "model_shape": "model",
                 "node_type": "node type", "gpus_per_node": "GPUs per node", "world_size": "world size"}


def _param() -> list[str]:
    raw = st.query_params.get("compare")
    if not raw:
        return []
    ids = list(dict.fromkeys(p.strip() for p in raw.split(",") if p.strip()))
    if len(ids) > MAX_RUNS:
        st.warning(f"?compare=: at most {MAX_RUNS} runs in one comparison, got {len(ids)}; showing the first {MAX_RUNS}.")
        ids = ids[:MAX_RUNS]
    return ids


def _chart(rows: list[dict[str, Any]], name: str, y_title: str, title: str) -> alt.Chart:
    df = pd.DataFrame(rows)
    return (alt.Chart(df, title=title).mark_line(point=len(df) <= 60)
            .encode(x=alt.X("hours:Q", title="hours since the run started"),
                    y=alt.Y(f"{name}:Q", title=y_title, scale=alt.Scale(zero=name == "cumulative")),
                    color=alt.Color("run:N", title="run"),
                    tooltip=["run", alt.Tooltip("hours:Q", format=",.2f"), alt.Tooltip(f"{name}:Q", format=",.4g")])
            .interactive())


def section(url: str, currency: str, candidates: list[str], names: dict[str, str], scope: data.Scope = None) -> None:
    """The Compare section: a multiselect of the runs listed above (and any from ``?compare=``), kept in the URL;
    a run outside ``scope`` (the user's projects) fails as an unknown run id does."""
    st.header("Compare runs")
    wanted = _param()
    options = list(dict.fromkeys([*wanted, *candidates]))
    if "runs_compare" not in st.session_state:
        st.session_state["runs_compare"] = wanted
    picked = st.multiselect("Runs to compare", options, key="runs_compare", max_selections=MAX_RUNS,
                            format_func=lambda i: f"{i} — {names[i]}" if names.get(i) else i,
                            help=f"2 to {MAX_RUNS} runs; the URL keeps them (?compare=A,B). "
                                 "`trainledger runs compare A B` prints the same figures.")
    if picked and len(picked) >= 2:
        st.query_params["compare"] = ",".join(picked)
    elif "compare" in st.query_params and not wanted:
        del st.query_params["compare"]
    if len(picked) < 2:
        st.caption("Pick two or more runs to see their loss, throughput, utilization, step time and cost side by side.")
        return
    try:
        d = data.compare_runs(url, tuple(check_ids(picked, "?compare=")), currency, scope)
    except LedgerInputError as exc:
        st.error(ui.error_line(exc))
        return
    runs = d["runs"]
    st.caption("Hours since each run started on every x axis; `trainledger runs compare "
               + " ".join(ui.code(i) for i in picked) + "` prints the same figures. The cumulative cost is each month's cost of the run (its monthly report "
               "line) drawn evenly over its hours in that month; its last point is the run's cost.")
    sources = {r["utilization_metric"] for r in runs}
    util_title = ui.GPU_UTIL if sources == {"gpu_util"} else ("CPU utilization" if sources == {"cpu_util"}
                                                              else "Utilization (GPU-Util or CPU, per run)")
    cols = st.columns(2)
    i = 0
    for name, (title, y_title) in CHARTS.items():
        if name == "utilization":
            title = util_title
        if name == "cumulative":
            y_title = f"cost ({ui.md(currency)})"
        rows = [{"run": r["id"], "hours": float(p["hours"]), name: float(p["cost"] if name == "cumulative" else p[name])}
                for r in runs for p in r["series"][name]]
        with cols[i % 2]:
            if rows:
                st.altair_chart(_chart(rows, name, y_title, title), use_container_width=True)
            else:
                st.caption(f"{title}: no samples recorded for these runs.")
        i += 1
    st.subheader("Figures")
    figures = [{"figure": k, **{r["id"]: r["figures"][k] for r in runs}} for k in FIGURE_KEYS]
    st.dataframe(_transposed(figures, [r["id"] for r in runs], "figure", currency), hide_index=True,
                 key="compare_figures")
    st.subheader("Config")
    config = [{"config": k, **{r["id"]: r["config"][k] for r in runs}} for k in CONFIG_KEYS]
    st.dataframe(_transposed(config, [r["id"] for r in runs], "config", currency, d["differs"]), hide_index=True,
                 key="compare_config")
    if d["differs"]:
        st.caption("Differs between the runs: " + ", ".join(CONFIG_LABELS.get(k, k.replace("_", " ")) for k in d["differs"])
                   + " (marked ≠).")
    else:
        st.caption("The runs have the same config.")


def _transposed(rows: list[dict[str, Any]], ids: list[str], head: str, currency: Optional[str],
                differs: Optional[list[str]] = None) -> pd.DataFrame:
    """One row per figure or config key (its label from the metrics layer), one column per run, each cell as the
    figure's own format shows it."""
    tz = ui.display_tz()
    out = []
    for row in rows:
        key = row[head]
        label = CONFIG_LABELS.get(key) or (ui.column(key, currency) if key not in ("status", "finality") else key)
        label = {"cost_actual": f"cost ({currency})", "finality": "cost is"}.get(key, label)
        if label == key:
            label = key.replace("_", " ")
        if differs is not None and key in differs:
            label = "≠ " + label
        out.append({head: label, **{i: _text(ui.cell(key, row[i], tz), key) for i in ids}})
    return pd.DataFrame(out, columns=[head, *ids])


def _text(value: Any, key: str) -> str:
    """A cell as text (columns of a transposed table mix kinds): numbers grouped as the figure's format groups them."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ui.grouped(key, value)
    return "" if value is None else str(value)
