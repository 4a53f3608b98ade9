"""The invoice mapping: which offer (and node) a provider's billed resource stands for (``trainledger invoice map``).

A rule names a *pattern* (a resource id as the invoice writes it, or a shell glob over them such as
``gpu-node-*``), optionally a *provider* ("" = any), the *offer* the resource is paid under and optionally the
*node* (a host name as ``run_node`` records it) it is; node ``*`` means the resource id is the host name. Of the rules that match a line, a provider's own rule wins
over an any-provider rule, then an exact pattern over a glob, then the longer pattern (:func:`resolve`).
The reconciliation (``trainledger.money.invoice``) matches invoice lines to the ledger's charges through it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.audit import record_change
from trainledger.store.lookup import by_name
from trainledger.store.models import InvoiceMap, Offer

LIMITS = {"provider": 100, "pattern": 300, "node": 200}
GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class MapRule:
    """One mapping rule as plain values (detached from any session)."""

    id: int
    provider: str
    pattern: str
    offer: str
    offer_id: int
    node: str

    @property
    def is_glob(self) -> bool:
        return bool(GLOB_CHARS & set(self.pattern))

    def matches(self, provider: str, resource: str) -> bool:
        if self.provider and self.provider != provider:
            return False
        return fnmatch.fnmatchcase(resource, self.pattern) if self.is_glob else resource == self.pattern

    def as_dict(self) -> dict[str, Any]:
        return {"provider": self.provider or "(any)", "pattern": self.pattern, "offer": self.offer,
                "node": self.node or None}


def _check(value: str, flag: str, limit: int) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise LedgerInputError(f"{flag}: contains a control character; remove it")
    if len(value) > limit:
        raise LedgerInputError(f"{flag}: at most {limit} characters, got {len(value)}")
    return value


def load_rules(session: Session) -> list[MapRule]:
    rows = session.exec(select(InvoiceMap, Offer.name).join(Offer, Offer.id == InvoiceMap.offer_id)).all()
    return [MapRule(m.id, m.provider, m.pattern, name, m.offer_id, m.node) for m, name in rows]


def resolve(rules: list[MapRule], provider: str, resource: str) -> Optional[MapRule]:
    """The rule that maps ``resource`` of ``provider``: the provider's own first, then exact before glob, then the
    longest pattern; None when no rule matches."""
    found = [r for r in rules if r.matches(provider, resource)]
    if not found:
        return None
    return min(found, key=lambda r: (not r.provider, r.is_glob, -len(r.pattern), r.id))


def set_rule(session: Session, pattern: str, offer: str, *, provider: str = "", node: str = "") -> MapRule:
    """Add or replace the rule for (provider, pattern)."""
    _check(pattern, "PATTERN", LIMITS["pattern"])
    _check(provider, "--provider", LIMITS["provider"])
    _check(node, "--node", LIMITS["node"])
    if not pattern.strip():
        raise LedgerInputError("PATTERN: give a resource id or a glob such as 'gpu-node-*'")
    off = by_name(session, Offer, offer, "--offer", "offer")
    row = session.exec(select(InvoiceMap).where(InvoiceMap.provider == provider,
                                                InvoiceMap.pattern == pattern)).first()
    before = _audited(session, row)
    if row is None:
        row = InvoiceMap(provider=provider, pattern=pattern, offer_id=off.id, node=node)
    else:
        row.offer_id, row.node = off.id, node
    session.add(row)
    session.flush()
    record_change(session, "invoice_map.set", _target(provider, pattern), before, _audited(session, row))
    return MapRule(row.id, provider, pattern, off.name, off.id, node)


def remove_rule(session: Session, pattern: str, *, provider: str = "") -> None:
    row = session.exec(select(InvoiceMap).where(InvoiceMap.provider == provider,
                                                InvoiceMap.pattern == pattern)).first()
    if row is None:
        raise LedgerInputError(f"PATTERN: no mapping {pattern!r} for {provider or 'any provider'}; "
                               "see `trainledger invoice map`")
    before = _audited(session, row)
    session.delete(row)
    session.flush()
    record_change(session, "invoice_map.remove", _target(provider, pattern), before, None)


def _target(provider: str, pattern: str) -> str:
    return f"{provider or '(any provider)'}: {pattern}"


def _audited(session: Session, row: Optional[InvoiceMap]) -> Optional[dict[str, Any]]:
    if row is None:
        return None
    off = session.get(Offer, row.offer_id)
    return {"offer": off.name if off else row.offer_id, "node": row.node or ""}
