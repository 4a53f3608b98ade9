"""``trainledger audit``: the audit log, newest first (docs/AUDIT.md).

Every change of configuration from the CLI or the dashboard (budgets, offers and prices, fleets and their
idle policy, exchange rates, carbon intensity, settings, the Slurm and invoice mappings, sign-in users) is
recorded in the ledger with who made it, when, from where, and the changed object's fields before and
after. The log is append-only; this command only reads it.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, session

COLUMNS = ["when", "who", "from", "where", "what", "target", "before → after"]


@command
def audit(since: Annotated[Optional[str], typer.Option("--since", metavar="WHEN", help="Only changes at or after WHEN: YYYY-MM-DD (the start of that day in the display time zone) or an ISO date-time (without a zone: the display time zone).", show_default=False)] = None,
          limit: Annotated[Optional[int], typer.Option("--limit", metavar="N", min=1, help="At most N entries (the newest).", show_default=False)] = None,
          db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Who changed what, when and from where (newest first): budgets, prices, fleets, FX, carbon, settings, mappings, users."""
    from trainledger.errors import LedgerInputError
    from trainledger.reports.present import table, when
    from trainledger.store.audit import change_text, entries
    from trainledger.store.catalog.prices import parse_valid_from
    from trainledger.store.settings import display_timezone
    from trainledger.store.types import utcnow

    with session(db) as s:
        tz = display_timezone(s)
        start = None
        if since is not None:
            if not since.strip():
                raise LedgerInputError("--since: expected YYYY-MM-DD or an ISO date-time such as 2026-12-01T09:00, got ''")
            start = parse_valid_from(since, tz, "--since") or utcnow()
        rows = entries(s, since=start, limit=limit)

    def text(rows: list[dict[str, Any]]) -> str:
        if not rows:
            return "no changes recorded" + (f" since {when(start, tz)}" if start else "")
        shown = [{"when": when(r["at"], tz), "who": r["actor"], "from": r["origin"], "where": r["client"] or "—",
                  "what": r["action"], "target": r["target"], "before → after": change_text(r["before"], r["after"], 120)}
                 for r in rows]
        return table(shown, COLUMNS)

    emit(rows, as_json, text)


def register(root: typer.Typer) -> None:
    root.command("audit")(audit)
