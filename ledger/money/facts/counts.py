"""Run counts of a month: runs, not charge-period slices.

The rollup cuts a run where a price, exchange rate or carbon intensity takes effect
inside a month (:mod:`trainledger.money.facts.rollup`), so its facts hold one slice per run and
charge period: adding their ``slices`` counts such a run twice. A run belongs to
exactly one group (node type, recorded offer, project, status), so the number of
distinct runs per group adds up over groups: Σ groups = the month's runs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Optional

from sqlalchemy import func, select
from sqlmodel import Session
from trainledger.money.facts import rollup
from trainledger.store.models import RollupSlice

#: a group of runs in the rollup: (node type id, recorded offer id, project id, status)
GroupKey = tuple[int, Optional[int], Optional[int], str]


def runs_per_group(session: Session, month: str, live: Iterable[rollup.SliceFact]) -> dict[GroupKey, int]:
    """Distinct runs of ``month`` per group: the stored slices' runs (SQL ``count(distinct run_id)``) plus live ones."""
    st = RollupSlice.__table__
    q = (select(st.c.node_type_id, st.c.offer_id, st.c.project_id, st.c.status, func.count(func.distinct(st.c.run_id)))
         .where(st.c.month == month).group_by(st.c.node_type_id, st.c.offer_id, st.c.project_id, st.c.status))
    out: dict[GroupKey, int] = defaultdict(int)
    for nt_id, offer_id, project_id, status, n in session.connection().execute(q):
        out[(nt_id, offer_id or None, project_id or None, getattr(status, "value", status))] += n
    seen: set[str] = set()
    for s in live:
        if s.run_id not in seen:
            seen.add(s.run_id)
            out[(s.node_type_id, s.offer_id or None, s.project_id or None, s.status)] += 1
    return dict(out)


def count(per_group: dict[GroupKey, int], keys: Iterable[GroupKey], by_project: bool = True) -> int:
    """Runs in the given groups; ``by_project=False``: keys whose project is None stand for every project."""
    wanted = set(keys)
    if by_project:
        return sum(n for k, n in per_group.items() if k in wanted)
    return sum(n for k, n in per_group.items() if (k[0], k[1], None, k[3]) in wanted)
