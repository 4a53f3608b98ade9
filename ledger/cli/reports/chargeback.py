"""``trainledger report chargeback``: the statements of a month written to a folder, all or nothing."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional

from sqlmodel import Session
from trainledger.errors import LedgerInputError


def write_statements(session: Session, month: str, output: Path, *, project: Optional[str] = None,
                     currency: Optional[str] = None, force: bool = False,
                     now: Optional[datetime] = None,
                     progress: Optional[Callable[[int, Optional[int]], None]] = None) -> dict[str, Any]:
    """Render every file first, check every target, then write the set at once: a bad input or a kill writes nothing.
    ``progress(files rendered, files to render)`` as the statements are rendered."""
    from trainledger.money.account.chargeback import chargeback
    from trainledger.reports.chargeback import files, presented, summary_rows
    from trainledger.store.files import write_folder

    output = Path(output)
    if output.exists() and not output.is_dir():
        raise LedgerInputError(f"--output: {output} is a file; give a folder for the statements")
    if not output.exists() and not output.parent.is_dir():
        raise LedgerInputError(f"--output: the folder {output.parent} does not exist")
    cb = chargeback(session, month, currency=currency, now=now)
    if project is not None:
        cb.statement(project)  # one line naming the projects when it has none
    p = presented(cb)
    out = files(p, project, progress)
    write_folder(output, out, force=force)  # the whole set or none, even under kill -9 (issue 37)
    return {"month": month, "currency": p["summary"]["currency"], "spend": p["summary"]["spend"],
            "idle_not_charged_back": p["summary"]["idle_not_charged_back"], "output": str(output),
            "files": sorted(out), "lines": summary_rows(p)[:-1],
            **({"not_costed_runs": p["summary"]["not_costed_runs"],
                "not_costed_node_hours": p["summary"]["not_costed_node_hours"]} if p.get("not_costed") else {})}
