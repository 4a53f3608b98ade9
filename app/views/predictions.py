"""Planned vs measured on the Runs and Strategies pages: ``trainledger.runs.predictions`` behind ``data.cached``.

The rows are the ones ``trainledger runs show`` prints (predicted, the calibration's range, measured,
error); this module only lays them out.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd
import streamlit as st
from trainledger.app.queries.data import cached, read_session
from trainledger.app.views import ui
from trainledger.runs.predictions import planned_vs_measured_of

HELP = ("What the planner predicted when the run was launched (its plan on its node type, scaled by the node "
        "type's calibration when there is one: `trainledger plan calibrate`) beside what the run measured. "
        "Error = (predicted − measured) ÷ measured. Cost: predicted steps × step time vs the run's wall time, "
        "both at the offer's list price.")


@cached()
def planned_vs_measured(url: str, run_id: str) -> dict[str, Any]:
    with read_session(url) as s:
        return planned_vs_measured_of(s, run_id)


def _cell(v: Any) -> str:
    if v is None:
        return ui.DASH
    return f"{v:,.2f}" if not isinstance(v, float) else f"{v:,.4g}"


def _span(r: dict[str, Any]) -> str:
    return f"{_cell(r['range'][0])}–{_cell(r['range'][1])}" if r.get("range") else ui.DASH


def _error(v: Optional[float]) -> str:
    return ui.DASH if v is None else f"{v:+.1%}"


def show(url: str, run_id: str) -> None:
    """The run detail's "Planned vs measured" section."""
    pvm = planned_vs_measured(url, run_id)
    st.markdown("**Planned vs measured**", help=HELP)
    if not pvm["rows"]:
        st.caption(ui.md(pvm["note"]))
        return
    st.caption(ui.md(pvm["note"]))
    st.dataframe(pd.DataFrame([{"": r["quantity"], "predicted": _cell(r["predicted"]), "range": _span(r),
                                "measured": _cell(r["measured"]), "error": _error(r["error"])} for r in pvm["rows"]]),
                 hide_index=True)


def sweep_table(url: str, runs: list[tuple[str, str]]) -> None:
    """The Strategies page's planned vs measured: one row per (strategy, run id)."""
    rows = []
    found = {run_id: planned_vs_measured(url, run_id) for _, run_id in runs}
    if not any(p["rows"] for p in found.values()):
        st.caption("Planned vs measured: no prediction stored for these runs (`trainledger launch` and "
                   "`trainledger sweep` store one for every run they start).")
        return
    for strategy, run_id in runs:
        pvm = found[run_id]
        by = {r["quantity"].split(" (")[0]: r for r in pvm["rows"]}
        row = {"strategy": strategy, "run": run_id, "prediction": pvm["note"]}
        for key, label in (("step time", "step time (s)"), ("memory per GPU", "memory per GPU (GiB)"), ("cost", "cost")):
            r = by.get(key) or {"predicted": None, "measured": None, "error": None}
            row.update({f"{label} predicted": _cell(r["predicted"]), f"{label} measured": _cell(r["measured"]),
                        f"{label} error": _error(r["error"])})
        rows.append(row)
    if rows:
        st.markdown("**Planned vs measured**", help=HELP)
        st.dataframe(pd.DataFrame(rows), hide_index=True)
