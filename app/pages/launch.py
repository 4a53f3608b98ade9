"""Launch: start a tracked run from a listed config, watch it (status, step, heartbeat, loss), cancel it.

Launching is ``trainledger launch CONFIG --detach`` (:func:`trainledger.app.queries.launch.launch_run`:
``trainledger.runs.launch.prepare`` + ``start(detach=True)`` + ``record_process``);
cancelling is ``trainledger runs cancel`` (:func:`trainledger.app.queries.launch.cancel_run`). Both
need the lead role, checked on the server right before they act; the config
path is re-checked there too (:func:`trainledger.app.queries.launch.resolve_config`). Progress is a
fragment that re-reads the ledger every :data:`REFRESH_S` seconds while the
run is queued or running.
"""

from __future__ import annotations

from urllib.parse import quote

import pandas as pd
import streamlit as st
from pydantic import ValidationError
from trainledger.app.queries import data, launch
from trainledger.app.views import access, ui
from trainledger.errors import LedgerInputError

REFRESH_S = 2
MINE = "_launch_mine"  # run ids launched in this session, oldest first
FLASH = "_launch_flash"
DEFAULT_CONFIG = "shipped: dp.yaml"

ident = access.page_gate()
access.team_only(ident, "Launch")  # runs of every project: not for a project-scoped user (docs/SCOPES.md)
url = data.ledger_url()
st.title("Launch")
st.caption("Start a tracked run on this machine (torchrun, one node) from a listed config: the same as "
           "`trainledger launch CONFIG --detach`. Listed: the shipped configs and the YAML files in the "
           f"directories of `${launch.CONFIG_DIRS_ENV}`. For several nodes use `trainledger launch --launcher "
           "deepspeed|slurm`.")
read_only = access.read_only(ident)  # viewers see the form disabled; the server checks the role anyway
if read_only:
    st.info(f"Signed in as {ui.md(ident.user)} ({ident.role}): you can watch runs, but only leads can launch or cancel them.")
missing = launch.trainer_missing()
if missing:
    st.warning(missing)

# --- the form --------------------------------------------------------------------------------
choices = launch.config_choices()
labels = {c.path: c.label for c in choices}
paths = list(labels)


def _config_defaults() -> None:
    d = launch.config_defaults(st.session_state["launch_config"])
    st.session_state["launch_steps"] = d["steps"]
    st.session_state["launch_procs"] = d["processes"]


if not st.session_state.get("launch_config"):
    st.session_state["launch_config"] = next((c.path for c in choices if c.label == DEFAULT_CONFIG), paths[0])
    _config_defaults()
elif st.session_state["launch_config"] not in labels:  # picked, then gone from the list: keep it, Launch refuses it
    paths.append(st.session_state["launch_config"])
    labels[paths[-1]] = f"{paths[-1]} (not listed any more)"

c = st.columns([2, 1, 1])
config = c[0].selectbox("Config", paths, format_func=lambda p: labels.get(p, p), key="launch_config",
                        on_change=_config_defaults, help="A trainer YAML; its plan is validated before anything starts.",
                        disabled=read_only)
node_types = [n.name for n in data.node_types(url)]
node_type = c[1].selectbox("Node type", node_types, key="launch_node_type",
                           index=node_types.index("rtx4090-8x") if "rtx4090-8x" in node_types else 0,
                           help="The hardware the run's node-hours are costed as.", disabled=read_only)
offers = [o.name for o, nt in data.offers(url) if nt == node_type]
offer = c[2].selectbox("Offer", [""] + offers, key=f"launch_offer_{node_type}",
                       format_func=lambda o: o or "(default: the fleet, else elastic rent)",
                       help="What the node-hours are paid under.", disabled=read_only)
c = st.columns([2, 1, 1])
project = c[0].text_input("Project", key="launch_project", max_chars=100, disabled=read_only)
steps = c[1].number_input("Steps", min_value=1, max_value=launch.MAX_STEPS, step=1, key="launch_steps",
                          help="Overrides the config's steps.", disabled=read_only)
procs = c[2].number_input("Processes per node", min_value=1, max_value=launch.MAX_PROCESSES, step=1, key="launch_procs",
                          help="GPUs per node on a GPU machine; on CPU, processes (tp × pp must divide them).",
                          disabled=read_only)
name = st.text_input("Run name (optional)", key="launch_name", max_chars=200,
                     help="Default: strategy-model, e.g. dp-tiny.", disabled=read_only)

if st.button("Launch", type="primary", key="launch_go", disabled=read_only):
    if access.require_lead("launch runs", "Nothing was started."):
        try:
            form = launch.LaunchForm(config=config, node_type=node_type, offer=offer, project=project, name=name,
                                     steps=steps, processes_per_node=procs)
            started = launch.launch_run(url, form, user=ident.user if ident.signed_in else None)
        except ValidationError as exc:
            st.error(launch.form_error(exc))
        except LedgerInputError as exc:
            st.error(ui.error_line(exc))
        else:
            st.session_state.setdefault(MINE, []).append(started["run_id"])
            st.session_state["launch_watch"] = started["run_id"]
            data.clear_caches()  # the Runs page lists it at once
            st.success(f"Launched run {ui.md(started['run_id'])} (supervisor pid {started['pid']}); log: "
                       f"{ui.md(started['log'])}. It goes on if this page is closed.")

# --- progress ----------------------------------------------------------------------------------
st.header("Progress")
if FLASH in st.session_state:
    st.success(st.session_state.pop(FLASH))  # composed below from escaped values
active = data.active_runs(url)
names = {r["id"]: r["name"] for r in active}
ids = list(dict.fromkeys([*reversed(st.session_state.get(MINE, [])), *names]))
for wanted in (ui.run_id_param(), st.session_state.get("launch_watch")):
    if wanted and wanted not in ids:
        ids.insert(0, wanted)
if not ids:
    ui.empty("No run in progress. Launch one above; runs started with `trainledger launch` or `trainledger sweep` "
             "show up here too while they run.")
    st.stop()
run_id = st.selectbox("Run", ids, key="launch_watch",
                      format_func=lambda i: f"{i} — {names[i]}" if names.get(i) else i)
try:
    live = data.run_progress(url, run_id)["active"]
except LedgerInputError as exc:
    st.error(ui.error_line(exc))
    st.stop()


@st.fragment(run_every=REFRESH_S if live else None)
def progress() -> None:
    p = data.run_progress(url, run_id)
    if live and not p["active"]:
        data.clear_caches()
        st.rerun()  # it ended: draw the page once more, without the timer
    done, planned = p["steps_done"], p["steps_planned"]
    c = st.columns(4)
    c[0].metric("Status", p["status"], border=True)
    c[1].metric("Step", f"{done} of {planned}" if planned else str(done), border=True)
    age = p["heartbeat_age_s"]
    c[2].metric("Heartbeat", f"{age:.0f} s ago" if p["active"] and age is not None else ui.DASH, border=True,
                help="Rank 0 heartbeats every few seconds; a run silent for 60 s is marked crashed.")
    c[3].metric("Loss", f"{p['last_loss']:.4f}" if p["last_loss"] is not None else ui.DASH, border=True,
                help="The latest loss: the run's last 'loss' sample in the ledger, or its log if that is newer.")
    if planned:
        st.progress(min(1.0, done / planned), text=f"{done} of {planned} steps")
    if p["status"] == "succeeded":
        st.success(f"Run {ui.md(p['id'])} succeeded: {done} steps, {p['tokens_per_s']:,.0f} tokens/s, final loss "
                   f"{p['final_loss']:.4f}." if p["tokens_per_s"] and p["final_loss"] is not None
                   else f"Run {ui.md(p['id'])} succeeded.")
    elif p["error"]:
        st.error(f"Run {ui.md(p['id'])} {ui.md(p['status'])}: {ui.md(p['error'], 1000)}")
    if p["loss"]:
        st.line_chart(pd.DataFrame(p["loss"]), x="ts", y="value", x_label="time (UTC)", y_label="loss", height=ui.MIN_CHART_HEIGHT)
    elif p["active"]:
        st.caption("The loss curve appears as rank 0 hands its samples to the ledger (in batches, and at the end); "
                   "the step and loss above follow the run's log.")
    if p["log_tail"]:
        with st.expander("Log (last lines)", expanded=p["active"] and not p["loss"]):
            st.code("\n".join(p["log_tail"]), language=None)
    st.caption(f"Run {ui.md(p['id'])} · log {ui.md(p['log_path'] or ui.DASH)} · "
               f"[run detail](runs?run={quote(p['id'], safe='')})")  # our own link, the id URL-quoted
    if p["active"] and st.button("Cancel run", key=f"launch_cancel_{p['id']}", disabled=read_only,
                                 help="SIGTERM to the run (it ends cancelled); SIGKILL after "
                                      f"{launch.CANCEL_GRACE_S:.0f} s if it does not stop."):
        if access.require_lead("cancel runs", "Nothing was stopped."):
            try:
                with st.spinner("Cancelling…"):
                    out = launch.cancel_run(url, p["id"])
            except LedgerInputError as exc:
                st.error(ui.error_line(exc))
            else:
                st.session_state[FLASH] = f"Run {ui.md(out['run_id'])} {out['status']}." + (
                    " Its processes were killed after the grace period." if out.get("killed_after_grace") else "")
                data.clear_caches()
                st.rerun()


progress()
