"""The Slurm mapping: which node type (and offer) a job's partition, GPU type or node names stand for.

Edited with ``trainledger slurm map add|list|remove`` and on the dashboard's
Settings page; read by ``trainledger.sources.imports.slurm`` when sacct output is imported
or synced. A rule sets at least one of *partition*, *GPU type* (the ``TYPE``
of ``gres/gpu:TYPE=N``) and *node pattern* (a shell glob over host names, e.g.
``gpu-a*``), optionally a *cluster*; a job matches when every field the rule
sets matches (names compare case-insensitively: Slurm's database keeps them in
lower case). Of the rules that match, the most specific wins: see
:func:`specificity`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.audit import record_change
from trainledger.store.models import NodeType, Offer, SlurmMap

#: printable text without spaces, commas or '|' (they separate values in sacct output)
NAME_RE = re.compile(r"[^\s,|\x00-\x1f\x7f]+")
#: a TRES list as Slurm writes it: NAME=VALUE[,NAME=VALUE...]
TRES_RE = re.compile(r"[A-Za-z0-9_/:.\-]+=[0-9.]+[KMGTP]?(,[A-Za-z0-9_/:.\-]+=[0-9.]+[KMGTP]?)*", re.I)
LIMITS = {"cluster": 64, "partition": 100, "gpu_type": 100, "node_pattern": 200}
FLAGS = {"cluster": "--cluster", "partition": "--partition", "gpu_type": "--gpu-type", "node_pattern": "--nodes"}


@dataclass(frozen=True)
class Rule:
    """One mapping rule as plain values (what the importer needs, detached from any session)."""

    id: int
    cluster: str
    partition: str
    gpu_type: str
    node_pattern: str
    node_type: str
    node_type_id: int
    offer: Optional[str]
    offer_id: Optional[int]
    by_node: bool
    billing_weights: str = ""
    max_tres: bool = False
    node_tres: str = ""

    @property
    def share_rule(self) -> str:
        """How a job under this rule pays for a node: ``node`` (the whole node), ``billing`` (Slurm's billing ÷ a
        whole node's) or ``gpus`` (GPUs held ÷ GPUs of the node type)."""
        return "node" if self.by_node else ("billing" if self.billing_weights else "gpus")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("node_type_id")
        d.pop("offer_id")
        d["specificity"] = specificity(self)
        d["share_rule"] = self.share_rule
        return d


def specificity(rule: Any) -> tuple[int, int, int]:
    """Sort key of a rule, higher first: node pattern (4) + GPU type (2) + partition (1), then a cluster
    name over any cluster, then the older rule (lower id) first.

    A node pattern names the hardware most exactly, a GPU type next, a
    partition (which may span several kinds of node) least.
    """
    fields = 4 * bool(rule.node_pattern) + 2 * bool(rule.gpu_type) + bool(rule.partition)
    return fields, int(bool(rule.cluster)), -int(rule.id or 0)


def _check(field: str, value: str) -> str:
    value = (value or "").strip()
    if not value:
        return ""
    if len(value) > LIMITS[field]:
        raise LedgerInputError(f"{FLAGS[field]}: at most {LIMITS[field]} characters, got {len(value)}")
    if not NAME_RE.fullmatch(value):
        raise LedgerInputError(f"{FLAGS[field]}: {value!r} may not contain spaces, commas, '|' or control characters")
    return value


def _node_type(session: Session, name: str) -> NodeType:
    nt = session.exec(select(NodeType).where(NodeType.name == name)).first()
    if nt is None:
        names = session.exec(select(NodeType.name).order_by(NodeType.name)).all()
        raise LedgerInputError(f"--node-type: unknown {name!r}; use one of {', '.join(names)}")
    return nt


def _offer(session: Session, name: Optional[str], nt: NodeType) -> Optional[Offer]:
    if not name:
        return None
    o = session.exec(select(Offer).where(Offer.name == name)).first()
    if o is None or o.node_type_id != nt.id:
        valid = session.exec(select(Offer.name).where(Offer.node_type_id == nt.id).order_by(Offer.name)).all()
        raise LedgerInputError(f"--offer: {name!r} is not an offer for {nt.name}; use one of {', '.join(valid) or '(none)'}")
    return o


def add_rule(session: Session, *, node_type: str, offer: Optional[str] = None, partition: str = "",
             gpu_type: str = "", node_pattern: str = "", cluster: str = "", by_node: bool = False,
             replace: bool = False, billing_weights: str = "", max_tres: bool = False,
             node_tres: str = "") -> tuple[Rule, str]:
    """Add a rule (or, with ``replace``, change the node type/offer/by-node of the rule with the same
    match fields); validated first, one-line :class:`LedgerInputError`. Returns (rule, "added"|"updated")."""
    key = {f: _check(f, v) for f, v in
           (("cluster", cluster), ("partition", partition), ("gpu_type", gpu_type), ("node_pattern", node_pattern))}
    if not (key["partition"] or key["gpu_type"] or key["node_pattern"]):
        raise LedgerInputError("slurm map: give at least one of --partition, --gpu-type or --nodes")
    nt = _node_type(session, node_type)
    o = _offer(session, offer, nt)
    billing_weights, node_tres = _billing(billing_weights, node_tres, by_node, nt, max_tres)
    row = session.exec(select(SlurmMap).where(*(getattr(SlurmMap, f) == v for f, v in key.items()))).first()
    if row is not None and not replace:
        raise LedgerInputError(f"slurm map: rule {row.id} already matches {_describe(key)}; "
                               "pass --replace to change it, or remove it first")
    result = "updated" if row is not None else "added"
    before = _audited(session, row)
    if row is None:
        row = SlurmMap(**key, node_type_id=nt.id)
        session.add(row)
    row.node_type_id, row.offer_id, row.by_node = nt.id, o.id if o else None, bool(by_node)
    row.billing_weights, row.max_tres, row.node_tres = (billing_weights or None, bool(max_tres) if billing_weights else None,
                                                        node_tres or None)
    session.flush()
    record_change(session, "slurm_map.add" if before is None else "slurm_map.set", f"rule {row.id}", before,
                  _audited(session, row))
    return _rule(row, nt.name, o.name if o else None), result


def _audited(session: Session, row: Optional[SlurmMap]) -> Optional[dict[str, Any]]:
    """A rule as the audit log records it: its match fields and what it maps to (by name)."""
    if row is None:
        return None
    nt, o = session.get(NodeType, row.node_type_id), session.get(Offer, row.offer_id) if row.offer_id else None
    return {"cluster": row.cluster, "partition": row.partition, "gpu_type": row.gpu_type,
            "node_pattern": row.node_pattern, "node_type": nt.name if nt else row.node_type_id,
            "offer": o.name if o else None, "by_node": bool(row.by_node), "billing_weights": row.billing_weights or "",
            "max_tres": bool(row.max_tres), "node_tres": row.node_tres or ""}


def _billing(weights: str, node_tres: str, by_node: bool, nt: NodeType, max_tres: bool = False) -> tuple[str, str]:
    """The billing weights and whole-node TRES of a rule, checked (Slurm's own spelling kept)."""
    from trainledger.store.mappings.slurm_billing import parse_weights, slurm_billing, slurm_billing_units, tres_counts

    weights, node_tres = (weights or "").strip(), (node_tres or "").strip()
    if not weights:
        if node_tres:
            raise LedgerInputError("--node-tres: only with --billing-weights (the TRES of one node the billing divides by)")
        return "", ""
    if by_node:
        raise LedgerInputError("--billing-weights: a --by-node rule pays the whole node; drop one of them")
    for f, v, limit in (("--billing-weights", weights, 400), ("--node-tres", node_tres, 200)):
        if len(v) > limit or not TRES_RE.fullmatch(v):
            raise LedgerInputError(f"{f}: {v!r} must be NAME=NUMBER[,...] as Slurm writes it (e.g. CPU=1.0,Mem=0.25G,"
                                   f"GRES/gpu=2.0), at most {limit} characters")
    w = parse_weights(weights)
    if not node_tres:
        node_tres = f"gres/gpu={nt.gpus_per_node}" if nt.gpus_per_node else ""
    counts = tres_counts(dict(p.partition("=")[::2] for p in node_tres.split(",") if p))
    if slurm_billing_units(slurm_billing(counts, w, max_tres)) <= 0:  # as Slurm keeps it: a whole number
        raise LedgerInputError(f"--node-tres: one node ({node_tres or 'nothing'}) bills 0 under {weights}; give the "
                               "TRES of one whole node of the partition, e.g. cpu=64,mem=512G,gres/gpu=8")
    return weights, node_tres


def _describe(key: dict[str, str]) -> str:
    return " ".join(f"{FLAGS[f]} {v}" for f, v in key.items() if v)


def _rule(row: SlurmMap, nt_name: str, offer_name: Optional[str]) -> Rule:
    return Rule(id=row.id, cluster=row.cluster, partition=row.partition, gpu_type=row.gpu_type,
                node_pattern=row.node_pattern, node_type=nt_name, node_type_id=row.node_type_id,
                offer=offer_name, offer_id=row.offer_id, by_node=bool(row.by_node),
                billing_weights=row.billing_weights or "", max_tres=bool(row.max_tres), node_tres=row.node_tres or "")


def load_rules(session: Session) -> list[Rule]:
    """Every rule, most specific first (the order in which they are tried)."""
    rows = session.exec(select(SlurmMap, NodeType.name, Offer.name)
                        .join(NodeType, NodeType.id == SlurmMap.node_type_id)
                        .join(Offer, Offer.id == SlurmMap.offer_id, isouter=True)).all()
    rules = [_rule(r, nt, off) for r, nt, off in rows]
    return sorted(rules, key=specificity, reverse=True)


def list_rules(session: Session) -> list[dict[str, Any]]:
    """The rules as dicts (``slurm map list --json``, the Settings page), in the order they are tried."""
    return [r.as_dict() for r in load_rules(session)]


def remove_rule(session: Session, rule_id: int) -> Rule:
    """Delete rule ``rule_id`` (the id ``slurm map list`` shows); returns what it was."""
    rules = {r.id: r for r in load_rules(session)}
    if rule_id not in rules:
        shown = ", ".join(str(i) for i in sorted(rules)) or "(none)"
        raise LedgerInputError(f"RULE_ID: no Slurm mapping rule {rule_id}; rules: {shown} (see `trainledger slurm map list`)")
    row = session.get(SlurmMap, rule_id)
    before = _audited(session, row)
    session.delete(row)
    session.flush()
    record_change(session, "slurm_map.remove", f"rule {rule_id}", before, None)
    return rules[rule_id]
