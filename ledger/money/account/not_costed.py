"""Runs a report cannot cost: recorded without a node type, or on a node type that has no offer.

Such a run is never priced as something else and never shown as 0.00: the reports count it, list it with
its reason ("no node type", "no offer for node type NAME", :mod:`trainledger.store.defaults`) and its exact
node-hours, and leave it out of every money figure. In the rollup a run without a node type carries node
type key 0 (:data:`trainledger.money.facts.rollup_facts.NO_NODE_TYPE_ID`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Iterable, Optional

from sqlalchemy import select
from sqlmodel import Session
from trainledger.money.facts import rollup
from trainledger.money.facts.rollup_facts import NO_NODE_TYPE_ID
from trainledger.money.rates.costs import ZERO
from trainledger.store.defaults import NOT_COSTED, not_costed_reason
from trainledger.store.models import NodeType, Project, RollupSlice, Run, User

#: the columns of a not-costed run in every table and export
COLUMNS = ["run_id", "name", "project", "user", "status", "node_type", "cost", "reason", "nodes", "start", "end",
           "node_hours", "gpu_hours"]


@dataclass
class NotCostedRun:
    """One run of a period that no offer can cost: its reason and its usage in the period (hours exact)."""

    run_id: str
    name: str
    project: str
    user: str
    status: str
    node_type: str  # "" when the run has none
    reason: str  # "no node type" | "no offer for node type NAME"
    nodes: int
    start: datetime
    end: datetime
    node_hours: Decimal
    gpu_hours: Decimal
    cost: str = NOT_COSTED

    def row(self) -> dict[str, Any]:
        """The run as a table row (:data:`COLUMNS`)."""
        return {c: getattr(self, c) for c in COLUMNS}


def node_type_name(nt_id: Optional[int], names: dict[int, str]) -> str:
    """A node type's name, "" for a run without one (key 0 or None)."""
    return "" if not nt_id or nt_id == NO_NODE_TYPE_ID else names.get(nt_id, str(nt_id))


def reason(nt_id: Optional[int], names: dict[int, str]) -> str:
    """Why runs of node type ``nt_id`` (0/None: none) are not costed."""
    return not_costed_reason(node_type_name(nt_id, names) or None)


def node_type_names(session: Session) -> dict[int, str]:
    """Every node type's name by id."""
    return {i: n for i, n in session.exec(select(NodeType.id, NodeType.name)).all()}


def month_not_costed(session: Session, month: str, live: Iterable[rollup.SliceFact],
                     groups: Iterable[tuple]) -> list[NotCostedRun]:
    """The runs of ``month`` in the rollup groups ``groups`` (keys ``(node type, offer, project, status)`` that
    no offer can cost), one line per run with its node-hours in the month (charge periods added up), in
    start order."""
    wanted = {(k[0], k[1] or None) for k in groups}
    if not wanted:
        return []
    st = RollupSlice.__table__
    q = select(*rollup.SLICE_COLUMNS).where(st.c.month == month, st.c.node_type_id.in_(sorted({k[0] for k in wanted})))
    slices = [rollup._slice_from_row(r) for r in session.connection().execute(q)]
    slices += list(live)
    slices = [s for s in slices if (s.node_type_id, s.offer_id or None) in wanted]
    return _lines(session, slices)


def _lines(session: Session, slices: list[rollup.SliceFact]) -> list[NotCostedRun]:
    """One :class:`NotCostedRun` per run of ``slices`` (its slices' hours added, exactly)."""
    if not slices:
        return []
    names = node_type_names(session)
    ids = sorted({s.run_id for s in slices})
    info: dict[str, tuple] = {}
    for i in range(0, len(ids), 500):
        for row in session.exec(select(Run.id, Run.name, Project.name, User.name, Run.started_at)
                                .outerjoin(Project, Project.id == Run.project_id)
                                .outerjoin(User, User.id == Run.user_id).where(Run.id.in_(ids[i:i + 500]))):
            info[row[0]] = tuple(row)
    out: dict[str, NotCostedRun] = {}
    for s in sorted(slices, key=lambda s: (s.start, s.run_id)):
        line = out.get(s.run_id)
        if line is None:
            _, name, project, user, _ = info.get(s.run_id, (s.run_id, "", "", "", None))
            out[s.run_id] = NotCostedRun(s.run_id, name or "", project or "", user or "", s.status,
                                         node_type_name(s.node_type_id, names), reason(s.node_type_id, names),
                                         s.nodes, s.start, s.end, s.facts.node_hours, s.facts.gpu_hours)
        else:
            line.start, line.end = min(line.start, s.start), max(line.end, s.end)
            line.node_hours += s.facts.node_hours
            line.gpu_hours += s.facts.gpu_hours
    return sorted(out.values(), key=lambda r: (r.start, r.run_id))


def total_node_hours(lines: Iterable[NotCostedRun]) -> Decimal:
    """Σ node-hours of not-costed runs (exact)."""
    return sum((r.node_hours for r in lines), ZERO)
