"""Run counts of a month: runs, not charge-period slices.

The rollup cuts a run where a price, exchange rate or carbon intensity takes effect
inside a month (:mod:`trainledger.money.facts.rollup`), so its facts hold one slice per run and
charge period: adding their ``slices`` counts such a run twice. A run belongs to
exactly one group (node type, recorded offer, project, status), so the number of
distinct runs per group adds up over groups: Σ groups = the month's runs.

Where a node type has no cut inside the month, each of its runs has exactly one slice in the
month, so a group's runs are its ``slices`` fact, read from the month facts with no query; only
the groups of node types cut inside the month are counted from the stored slices (SQL
``count(distinct run_id)``, which reads every slice row of those node types).
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


def runs_per_group(session: Session, facts: rollup.MonthFacts) -> dict[GroupKey, int]:
    """Distinct runs of ``facts.month`` per group (live runs included): a group's ``slices`` fact where its node
    type has no cut inside the month; else the stored slices' runs (SQL ``count(distinct run_id)``) plus live ones."""
    cut = set(facts.cuts)
    out: dict[GroupKey, int] = {k: f.slices for k, f in facts.groups.items() if f.slices and k[0] not in cut}
    if not cut:
        return out
    st = RollupSlice.__table__
    q = (select(st.c.node_type_id, st.c.offer_id, st.c.project_id, st.c.status, func.count(func.distinct(st.c.run_id)))
         .where(st.c.month == facts.month, st.c.node_type_id.in_(sorted(cut)))
         .group_by(st.c.node_type_id, st.c.offer_id, st.c.project_id, st.c.status))
    counted: dict[GroupKey, int] = defaultdict(int)
    for nt_id, offer_id, project_id, status, n in session.connection().execute(q):
        counted[(nt_id, offer_id or None, project_id or None, getattr(status, "value", status))] += n
    seen: set[str] = set()
    for s in facts.live:
        if s.node_type_id in cut and s.run_id not in seen:
            seen.add(s.run_id)
            counted[(s.node_type_id, s.offer_id or None, s.project_id or None, s.status)] += 1
    out.update(counted)
    return out


def count(per_group: dict[GroupKey, int], keys: Iterable[GroupKey], by_project: bool = True) -> int:
    """Runs in the given groups; ``by_project=False``: keys whose project is None stand for every project."""
    wanted = set(keys)
    if by_project:
        return sum(per_group.get(k, 0) for k in wanted)
    return sum(n for k, n in per_group.items() if (k[0], k[1], None, k[3]) in wanted)
