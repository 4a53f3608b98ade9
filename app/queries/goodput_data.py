"""Cached reads for the goodput figures (issue #25): the ledger functions ``trainledger goodput`` calls.

As :mod:`trainledger.app.queries.data`: every reader takes the ledger URL first and the sidebar's currency; a month that has
not ended is to date at :func:`trainledger.app.queries.data.now`.
"""

from __future__ import annotations

from typing import Any, Optional

from trainledger.app.queries.data import cached, now, read_session


@cached()
def idle_occupancy(url: str, month: str, currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger goodput idle --month M --json``: the fleets' occupancy by hour, presented (money in cents)."""
    from trainledger.money.goodput.occupancy import month_occupancy, occupancy_to_dict
    from trainledger.reports.present import jsonable

    with read_session(url) as s:
        return jsonable(occupancy_to_dict(month_occupancy(s, month, now=now(), currency=currency)))


@cached()
def account(url: str, month: str, currency: Optional[str] = None, project: Optional[str] = None) -> Any:
    """``trainledger goodput --month M [--project P]``: the month's goodput account (``GoodputReport``); the whole
    month's from the cached monthly report with its lines (:func:`trainledger.app.queries.data.report`, as the export's),
    so a page computes a month's account once."""
    from trainledger.app.queries.data import month_goodput
    from trainledger.money.goodput.account import goodput_account

    if project is None:
        return month_goodput(url, month, currency)
    with read_session(url) as s:
        return goodput_account(s, month=month, project=project, currency=currency, now=now())


def sections(url: str, month: str, currency: Optional[str] = None) -> tuple[list[dict[str, Any]], list[Any]]:
    """The month's runs summed per project (``GoodputReport.projects``) and its runs of most badput
    (``trainledger.money.goodput.goodput_core.ranked_by_badput``): stored with the month's totals once the month is
    over (:func:`trainledger.app.queries.data.month_totals`), else from the month's whole account (:func:`account`)."""
    from trainledger.app.queries.data import month_totals
    from trainledger.money.goodput.goodput_core import ranked_by_badput

    t = month_totals(url, month, currency)
    if t.projects is not None and t.ranked is not None:
        return t.projects, t.ranked
    acct = account(url, month, currency)
    return acct.projects, ranked_by_badput(acct.runs)


@cached()
def timeline(url: str, run_id: str, scope: Optional[tuple[str, ...]] = None) -> list[dict[str, Any]]:
    """``trainledger.money.goodput.account.phase_timeline``: per node and phase of a run, seconds, count, first and last
    time; a run outside ``scope`` (``trainledger.app.queries.data.check_run``): the unknown run's error."""
    from trainledger.app.queries.data import check_run
    from trainledger.money.goodput.account import phase_timeline

    with read_session(url) as s:
        check_run(s, run_id, scope)
        return phase_timeline(s, run_id)
