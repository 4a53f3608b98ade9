"""Goodput and badput per run line for the monthly export and the FOCUS export (trainledger.money.goodput.account).

A run line's ``goodput_cost`` is the part of its cost that bought kept training progress (``productive``), its
``badput_cost`` the rest of its own cost (start-up, data and straggler waits, checkpoints, eval, lost work,
unattributed): they add up to the line's cost. Recovery is not in a run line (in the monthly report it is part
of idle; ``trainledger goodput`` moves it to the resumed run).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from trainledger.money.account.monthly import MonthlyReport
from trainledger.money.goodput.goodput_core import Category


def run_goodput(session: Any, rep: MonthlyReport, now: Optional[datetime] = None) -> dict[str, tuple[Decimal, Decimal]]:
    """Run id → (goodput cost, badput cost) of its line in the report (its own cost, exactly split)."""
    if not rep.runs:
        return {}
    from trainledger.money.goodput.goodput_ledger import run_accounts

    return {a.run_id: (a.cost[Category.productive], a.run_cost - a.cost[Category.productive])
            for a in run_accounts(session, rep, now)}
