"""Strategies: the runs of a sweep (``trainledger sweep``) side by side.

Numbers: ``trainledger.reports.weekly.strategy_comparison`` — the table of
``trainledger report weekly --sweep ID`` (time per epoch, memory per GPU, comm
share, GPU-Util, MFU, cost per 1M tokens under every offer, cheapest marked).
Progress of a sweep that is still running (``trainledger.runs.sweep.sweep_progress``:
"3 of 5 strategies measured", the running one and its step): the page part
below the picker is a fragment that re-reads the ledger every
:data:`REFRESH_S` seconds until the sweep is done, so the table fills in.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import access, predictions, ui
from trainledger.errors import LedgerInputError
from trainledger.money.rates.costs import cents
from trainledger.reports.present import fmt_cell

REFRESH_S = 3
md = ui.md
LIVE = ("running", "unknown")  # sweep states worth refreshing for (unknown: driven from another host)
MEM_KIND = {"cuda_max_allocated": "CUDA peak allocated", "cpu_max_rss": "CPU peak RSS"}

access.team_only(access.page_gate(), "Strategies")  # team totals: not for a project-scoped user (docs/SCOPES.md)
url = data.ledger_url()
chosen = ui.currency_picker(url)
st.title("Strategies")
st.caption("A sweep runs several parallel strategies for a few steps on a small cluster, before scaling up.")

sweeps = data.sweeps(url)
if not sweeps:
    ui.empty("No sweep yet: run `trainledger sweep ...` to try several strategies for N steps as tracked runs "
             "sharing a sweep id; they show up here side by side.")
    st.stop()

ids = [s["sweep_id"] for s in sweeps]
info = {s["sweep_id"]: s for s in sweeps}
wanted = st.query_params.get("sweep")
if wanted and wanted not in ids:
    st.warning(f"?sweep={md(wanted, 80)}: no such sweep in this ledger; showing the latest.")
sweep_id = st.selectbox("Sweep", ids, index=ids.index(wanted) if wanted in ids else 0, key="strategies_sweep",
                        format_func=lambda i: f"{i} · {info[i]['runs']} run{'' if info[i]['runs'] == 1 else 's'}"
                        + (f" · {info[i]['started_at']:%Y-%m-%d %H:%M}" if info[i]["started_at"] else ""))
live = data.sweep_progress(url, sweep_id)["state"] in LIVE
currency = {o.name: o.currency for o, _ in data.offers(url, chosen)}  # offer -> its currency (after conversion)


def show_progress(p: dict) -> None:
    """The progress line ("3 of 5 strategies measured · running: pp (run …, step 4 of 10) · waiting: tp, 3d") and a bar."""
    total, measured = p["total"], p["measured"]
    if not p["planned"] and p["state"] != "running":
        return  # a sweep without a recorded plan (older trainledger): the table says it all
    parts = [f"**{measured} of {total} strategies measured**"]
    for slot in p["running"]:
        if slot["status"] == "queued":  # registered; its processes are starting
            parts.append(f"starting: {md(slot['strategy'])} (run {md(slot['run_id'])})")
            continue
        try:
            rp = data.run_progress(url, slot["run_id"])
        except LedgerInputError:
            rp = None
        step = (f", step {rp['steps_done']} of {rp['steps_planned']}" if rp and rp["steps_planned"] else "")
        parts.append(f"running: {md(slot['strategy'])} (run {md(slot['run_id'])}{step})")
    if p["not_measured"]:
        parts.append("not measured: " + ", ".join(f"{md(x['strategy'])} ({md(x['status'])})" for x in p["not_measured"]))
    if p["waiting"]:
        parts.append(("waiting" if p["state"] == "running" else "not run") + ": "
                     + ", ".join(md(x["strategy"]) for x in p["waiting"]))
    text = " · ".join(parts)
    if p["state"] == "running":
        st.info(text)
        st.progress((total - len(p["waiting"]) - len(p["running"])) / total if total else 0.0,
                    text=f"{total - len(p['waiting']) - len(p['running'])} of {total} strategies done")
    elif p["state"] == "stopped":
        why = {"error": "an error"}.get(p["stopped_by"], md(p["stopped_by"])) if p["stopped_by"] else "its process is gone"
        st.warning(f"The sweep stopped early ({why}). {text}" + (f" · log {md(p['log'])}" if p.get("log") else ""))
    elif p["state"] == "unknown":
        st.info(f"{text} · the sweep's driver runs on {md(p['host'])}; the next strategy starts from there.")
    else:
        st.caption(f"Sweep finished: {text}.")


def cost_column(offer: str) -> str:
    """The table's column of an offer's cost per 1M tokens: "per 1M tokens, rtx4090-rent (CNY)"."""
    return f"per 1M tokens, {offer} ({currency.get(offer, '')})"


def cpu_note(rows: list[dict]) -> None:
    """Says so when CPU-only runs are priced as the GPU nodes they were recorded on (a tiny CPU model as a full node)."""
    cpu = [r for r in rows if r["util_source"] == "cpu"]
    if not cpu:
        return
    gpus = {n.name: n.gpus_per_node for n in data.node_types(url)}
    kinds = sorted({(r["node_type"], r["nodes"]) for r in cpu})
    st.caption(f"{len(cpu)} of {len(rows)} runs ran on CPU only, but are priced as the GPU nodes they were recorded on: "
               + ", ".join(f"{n} × {md(nt)} ({gpus.get(nt, '?')} GPUs each)" for nt, n in kinds)
               + ". Their cost per 1M tokens is what that throughput would cost on whole GPU nodes (a tiny CPU model priced "
               "as full GPU nodes): useful to compare the strategies with each other, not as a price to expect.")


@st.fragment(run_every=REFRESH_S if live else None)
def sweep_view() -> None:
    p = data.sweep_progress(url, sweep_id)
    if live and p["state"] not in LIVE:
        data.sweeps.clear()
        st.rerun()  # done: draw the page once more, without the timer
    show_progress(p)
    if p["total"] == 0:
        return
    st.caption(f"The same table as trainledger report weekly --sweep {md(sweep_id)}.")
    comparison = data.strategy_comparison(url, sweep_id, p["version"], chosen)
    rows = comparison["rows"]
    offers = sorted({o for r in rows for o in r["cost_per_1m_tokens"]})

    # the point of the page first (cost per 1M tokens under each offer, tokens/s), so it is seen without scrolling
    # at 1280 px; the layout and the measures behind it after
    table = []
    for r in rows:
        row = {"": "★ cheapest" if r["cheapest"] else "", "strategy": r["strategy"]}
        for o in offers:
            row[cost_column(o)] = fmt_cell("cost_per_1m_tokens", r["cost_per_1m_tokens"].get(o))
        if any(x.get("not_costed") for x in rows):  # no node type, or no offer for it: said, never priced
            row["not costed"] = r.get("not_costed") or ""
        row.update({"tokens/s": f"{r['tokens_per_s']:,.0f}", "nodes": r["nodes"],
                    "layout": f"dp {r['dp']}, tp {r['tp']}, pp {r['pp']}, ZeRO-{r['zero_stage']}" if r["dp"] is not None else ui.DASH,
                    "time per epoch": (fmt_cell("time_per_epoch_hours", r["time_per_epoch_hours"]) + " h")
                    if r["time_per_epoch_hours"] is not None else ui.DASH,
                    "memory per GPU": ui.gib(r["peak_mem_per_gpu_bytes"])
                    + (f" ({MEM_KIND.get(r['mem_kind'], r['mem_kind'])})" if r["mem_kind"] and r["peak_mem_per_gpu_bytes"] else ""),
                    "comm share": ui.pct(r["comm_share"]),
                    ui.gpu_util_label(r["util_source"]): ui.pct(r["gpu_util_mean"]),
                    ui.MFU: ui.mfu_text(r["mfu"], [r["util_source"]]), "run": r["run_id"]})
        if ui.gpu_util_label(r["util_source"]) != ui.GPU_UTIL:
            row.setdefault(ui.GPU_UTIL, ui.DASH)
        table.append(row)

    if table:
        st.dataframe(pd.DataFrame(table), hide_index=True)
        st.caption("Sorted by the cheapest cost per 1M tokens: a node-hour's price under each offer × nodes ÷ tokens "
                   "per hour (a reserved offer: its monthly price ÷ 730 h, a reservation kept busy; a whole job is "
                   f"billed by whole months, see Planner). {ui.GPU_UTIL} and {ui.MFU} are different measures (see Overview); on a CPU-only run the "
                   "busy share is the process CPU utilization and MFU is n/a.")
        cpu_note(rows)
        predictions.sweep_table(url, [(r["strategy"], r["run_id"]) for r in rows])
        chart = [{"strategy": r["strategy"] if [x["strategy"] for x in rows].count(r["strategy"]) == 1
                  else f"{r['strategy']} · {r['run_id']}", "offer": o, "cost": float(cents(v))}
                 for r in rows for o, v in r["cost_per_1m_tokens"].items() if v is not None]
        if chart:
            st.markdown("**Cost per 1M tokens**")
            ui.show_chart(ui.grouped_bars(pd.DataFrame(chart), "strategy", "cost", "offer",
                                          y_title=f"{comparison['currency'] or ''} per 1M tokens".strip()))
    else:
        ui.empty(f"No run of sweep {md(sweep_id)} finished with a measured throughput yet.")
    ended = [x for x in comparison["not_measured"] if x["status"] not in ("queued", "running")]  # running: above
    if ended:
        st.warning("Not measured (not succeeded, or no tokens/s): " + ", ".join(
            f"{md(x['strategy'] or x['run_id'])} ({md(x['status'])}{': ' + md(x['error'].splitlines()[0]) if x.get('error') else ''})"
            for x in ended))


sweep_view()
