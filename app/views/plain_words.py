"""Figures in plain words: large numbers compact with the exact value on hover, and "never breaks even".

* :func:`compact`: ``23,132,713,824.923`` → ``"23.1 B"`` (three significant digits; k, M, B, T); numbers below
  10,000 as the CLI prints them. :func:`compact_metric` shows the compact value on a metric card and the
  exact one (the CLI's) in its hover help.
* Rent vs own: an owned option whose break-even utilization is 100% or more, or whose payback is longer
  than its depreciation (or never comes), "never breaks even": it is not shown as a percentage above
  100% or a payback of 70.773 months. The exact figures stay in the hover help.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Optional

from trainledger.app.views import ui
from trainledger.reports.present import fmt_cell

NEVER = "never breaks even"
SCALES = ((Decimal(10) ** 12, "T"), (Decimal(10) ** 9, "B"), (Decimal(10) ** 6, "M"), (Decimal(10) ** 3, "k"))
COMPACT_FROM = Decimal(10_000)


def compact(value: Any, key: str = "") -> str:
    """A number in three significant digits with k / M / B / T: 23,132,713,824.923 → "23.1 B"; below 10,000
    as the CLI shows the column ``key``."""
    if value is None:
        return ui.DASH
    v = Decimal(str(value))
    if abs(v) < COMPACT_FROM:
        return fmt_cell(key, v)
    i = next(i for i, (scale, _) in enumerate(SCALES) if abs(v) >= scale)
    x = v / SCALES[i][0]
    if i > 0 and abs(round(x)) >= 1000:  # 999,999 is "1 M", not "1e+03 k"
        i, x = i - 1, x / 1000
    return f"{x:.3g} {SCALES[i][1]}"


def compact_metric(col, label: str, key: str, value: Any, help: Optional[str] = None, **kw) -> None:
    """A metric card showing :func:`compact` of ``value``, the exact figure (``fmt_cell(key, value)``) on hover."""
    exact = f"Exact: {ui.DASH if value is None else fmt_cell(key, Decimal(str(value)))}."
    col.metric(label, compact(value, key), help=f"{help} {exact}" if help else exact, **kw)


def break_even(u: Optional[Decimal]) -> str:
    """A break-even utilization, or :data:`NEVER` when there is none below 100%."""
    return NEVER if u is None or Decimal(u) >= 1 else ui.pct(u)


def breaks_even(r: dict[str, Any]) -> bool:
    """Whether owning pays back within its depreciation (``compare_offers``' result)."""
    return bool(r["pays_back_within_depreciation"]) and not r["renting_always_cheaper"]


def payback(r: dict[str, Any]) -> str:
    """The payback in months, or :data:`NEVER` when it never comes or comes after the depreciation."""
    return fmt_cell("payback_months", r["payback_months"]) + " months" if breaks_even(r) else NEVER


def payback_help(r: dict[str, Any]) -> str:
    """What the payback card means, with the exact figures behind "never breaks even"."""
    text = "Capex ÷ (rent avoided − owning's power and operations)."
    if r["payback_months"] is None:
        return text + " Owning's running cost is not below the rent it avoids: it never pays back."
    if not breaks_even(r) and not r["pays_back_within_depreciation"]:
        return (text + f" {fmt_cell('payback_months', r['payback_months'])} months, longer than the "
                f"{r['depreciation_months']}-month depreciation: the nodes are written off before they pay back.")
    if not breaks_even(r):
        return text + " Renting is cheaper at every utilization."
    return text


def payback_sentence(r: dict[str, Any]) -> str:
    """The payback sentence of the verdict: when buying pays back, or that it never breaks even."""
    if r["payback_months"] is None:
        return ""
    if breaks_even(r):
        return (f" Buying pays back in {fmt_cell('payback_months', r['payback_months'])} months at this utilization, "
                f"within the {r['depreciation_months']}-month depreciation.")
    if r["pays_back_within_depreciation"]:  # renting is cheaper at every utilization all the same
        return f" Buying **{NEVER}**: owning costs more than renting at every utilization."
    return (f" At this utilization buying **{NEVER}**: it would pay back only after "
            f"{fmt_cell('payback_months', r['payback_months'])} months, beyond the {r['depreciation_months']}-month "
            "depreciation.")
