"""What an import admits: runs that can be costed and that have happened.

Checked on the parsed rows (both parsers, :mod:`trainledger.sources.imports.importer` and
:mod:`trainledger.sources.imports.slurm`, after the parse and before anything is written):

* **no offer to cost it**: a run recorded without an offer is costed under its node
  type's default (its fleet, else elastic rent, :func:`trainledger.money.rates.catalog.default_offer`);
  a node type with no offer at all would leave the run uncostable and block every
  report of its month. Refused, naming the node type and the command that adds an offer.
* **an end in the future**: a finished run that ends after ``now`` is usage that has
  not happened. Refused.

Our CSV is refused whole with FILE:LINE (nothing is written); a sacct record is skipped
and counted in the receipt, as the other sacct records that cannot be costed
(``--strict``: the file is refused).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from trainledger.errors import LedgerInputError
from trainledger.store.models import RunStatus

NO_OFFER = "node type without an offer"
FUTURE_END = "end in the future"
HINTS = {NO_OFFER: "add an offer for the node type with `trainledger pricing import`, then import again",
         FUTURE_END: "import the job once it has ended (a clock ahead of the ledger's?)"}


def admit(spill: Any, receipt: Any, ctx: Any, name: str, fmt: str, now: datetime) -> None:
    """Refuse (our CSV) or skip and count (sacct) every parsed row that cannot be costed or has not happened."""
    offered = {nt_id for _, nt_id in ctx.offers.values()}
    names = {info.id: info.name for info in ctx.node_types.values()}
    dropped = []
    for batch in spill.batches():
        for run_id, line, row in batch:
            problem = _problem(row, offered, names, now)
            if problem is None:
                continue
            reason, field, detail = problem
            where = f"{name}:{line}"
            if fmt == "csv":
                raise LedgerInputError(f"{where}: {field}: {detail}; {HINTS[reason]}")
            receipt.skip(reason, row.get("name") or run_id, where=where, fieldname=field, detail=detail,
                         hint=HINTS[reason])
            dropped.append(run_id)
    for run_id in dropped:
        spill.delete(run_id)


def _problem(row: dict[str, Any], offered: set[int], names: dict[int, str],
             now: datetime) -> Optional[tuple[str, str, str]]:
    if row.get("offer_id") is None and row.get("node_type_id") not in offered:
        nt = names.get(row.get("node_type_id"), str(row.get("node_type_id")))
        return NO_OFFER, "node_type", f"{nt} has no offer to cost its runs"
    end = row.get("ended_at")
    status = getattr(row.get("status"), "value", row.get("status"))
    if end is not None and status != RunStatus.running.value and end > now:
        return FUTURE_END, "end", f"{end.isoformat()} is after now ({now.isoformat(timespec='seconds')})"
    return None
