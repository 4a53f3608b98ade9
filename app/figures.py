"""Page sections shared by the Overview and Monthly ROI pages (issue #18)."""

from __future__ import annotations

from typing import Optional

import pandas as pd
import streamlit as st

from app import data, ui


def spend_by_project(url: str, month: str, currency: Optional[str], cur: str, spend: str, key: str) -> None:
    """Spend by project with idle as its own line (``ledger.money.spend.spend_by_project``): table and bars.
    The lines add up to the month's spend (``spend``, as presented) to the cent."""
    lines = data.spend_by_project(url, month, currency)
    st.caption(f"Projects + idle = spend {ui.money('actual_cost', spend)} {cur} "
               "(fleet node-hours no run used are idle, no project's; each line half-up to the cent, the cents "
               "they leave as a rounding line).")
    left, right = st.columns([1, 2])
    left.dataframe(ui.frame(lines, ["line", "cost"], {"line": "project", "cost": f"spend ({cur})"}), hide_index=True,
                   key=key)
    right.bar_chart(pd.DataFrame([{"project": x["line"], "spend": float(x["cost"])} for x in lines]),
                    x="project", y="spend", y_label=cur, height=250, horizontal=True)
