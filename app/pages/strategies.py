"""Strategies: the runs of a sweep (``trainledger sweep``) side by side.

Numbers: ``ledger.reports.weekly.strategy_comparison`` — the table of
``trainledger report weekly --sweep ID`` (time per epoch, memory per GPU, comm
share, GPU-Util, MFU, cost per 1M tokens under every offer, cheapest marked).
Progress of a sweep that is still running (``ledger.runs.sweep.sweep_progress``:
"3 of 5 strategies measured", the running one and its step): the page part
below the picker is a fragment that re-reads the ledger every
:data:`REFRESH_S` seconds until the sweep is done, so the table fills in.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import access, data, ui
from ledger.errors import LedgerInputError
from ledger.money.costs import cents
from ledger.reports.present import fmt_cell

REFRESH_S = 3
md = ui.md
LIVE = ("running", "unknown")  # sweep states worth refreshing for (unknown: driven from another host)
MEM_KIND = {"cuda_max_allocated": "CUDA peak allocated", "cpu_max_rss": "CPU peak RSS"}

access.page_gate()
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
    currency = {o.name: o.currency for o, _ in data.offers(url, chosen)}

    table = []
    for r in rows:
        plan = r["strategy"] + (f" (dp {r['dp']}, tp {r['tp']}, pp {r['pp']}, ZeRO-{r['zero_stage']})"
                                if r["dp"] is not None else "")
        row = {"": "★ cheapest" if r["cheapest"] else "", "strategy": plan, "run": r["run_id"], "nodes": r["nodes"],
               "time per epoch": (fmt_cell("time_per_epoch_hours", r["time_per_epoch_hours"]) + " h")
               if r["time_per_epoch_hours"] is not None else ui.DASH,
               "tokens/s": f"{r['tokens_per_s']:,.0f}",
               "memory per GPU": ui.gib(r["peak_mem_per_gpu_bytes"])
               + (f" ({MEM_KIND.get(r['mem_kind'], r['mem_kind'])})" if r["mem_kind"] and r["peak_mem_per_gpu_bytes"] else ""),
               "comm share": ui.pct(r["comm_share"]),
               ui.gpu_util_label(r["util_source"]): ui.pct(r["gpu_util_mean"]),
               ui.MFU: ui.mfu_text(r["mfu"], [r["util_source"]])}
        if ui.gpu_util_label(r["util_source"]) != ui.GPU_UTIL:
            row.setdefault(ui.GPU_UTIL, ui.DASH)
        for o in offers:
            row[f"per 1M tokens, {o} ({currency.get(o, '')})"] = fmt_cell("cost_per_1m_tokens", r["cost_per_1m_tokens"].get(o))
        table.append(row)

    if table:
        st.dataframe(pd.DataFrame(table), hide_index=True)
        st.caption("Sorted by the cheapest cost per 1M tokens: a node-hour's price under each offer × nodes ÷ tokens "
                   f"per hour. {ui.GPU_UTIL} and {ui.MFU} are different measures (see Overview); on a CPU-only run the "
                   "busy share is the process CPU utilization and MFU is n/a.")
        chart = [{"strategy": r["strategy"] if [x["strategy"] for x in rows].count(r["strategy"]) == 1
                  else f"{r['strategy']} · {r['run_id']}", "offer": o, "cost": float(cents(v))}
                 for r in rows for o, v in r["cost_per_1m_tokens"].items() if v is not None]
        if chart:
            st.markdown("**Cost per 1M tokens**")
            ui.show_chart(ui.grouped_bars(pd.DataFrame(chart), "strategy", "cost", "offer", y_title="per 1M tokens"))
    else:
        ui.empty(f"No run of sweep {md(sweep_id)} finished with a measured throughput yet.")
    ended = [x for x in comparison["not_measured"] if x["status"] not in ("queued", "running")]  # running: above
    if ended:
        st.warning("Not measured (not succeeded, or no tokens/s): " + ", ".join(
            f"{md(x['strategy'] or x['run_id'])} ({md(x['status'])}{': ' + md(x['error'].splitlines()[0]) if x.get('error') else ''})"
            for x in ended))


sweep_view()
