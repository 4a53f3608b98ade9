"""Slurm's billing of an allocation (``TRESBillingWeights``, ``PriorityFlags=MAX_TRES``), as pure functions.

Kept with the Slurm mapping (whose rules carry a partition's weights) so the mapping can check them;
:mod:`trainledger.money.allocation.shares` divides a job's billing by a whole node's to get its share.
"""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal

from trainledger.errors import LedgerInputError

_UNIT = {"K": Decimal(1) / 1024, "M": Decimal(1), "G": Decimal(1024), "T": Decimal(1024 ** 2), "P": Decimal(1024 ** 3)}
_NODE_TRES = ("cpu", "mem", "node")


def parse_weights(weights: str, field: str = "--billing-weights") -> dict[str, Decimal]:
    """``CPU=1.0,Mem=0.25G,GRES/gpu=2.0`` → {"cpu": 1.0, "mem": per MB, "gres/gpu": 2.0} (names in lower case;
    a memory weight with a unit suffix is per that unit, Slurm's default being per MB)."""
    out: dict[str, Decimal] = {}
    for part in (p.strip() for p in (weights or "").split(",")):
        if not part:
            continue
        name, _, value = part.partition("=")
        name = name.strip().lower()
        value = value.strip()
        if not name or not value:
            raise LedgerInputError(f"{field}: {part!r} is not NAME=WEIGHT (e.g. CPU=1.0,Mem=0.25G,GRES/gpu=2.0)")
        unit = value[-1].upper() if value[-1].isalpha() else ""
        try:
            w = Decimal(value[:-1] if unit else value)
        except ArithmeticError:
            raise LedgerInputError(f"{field}: {part!r}: the weight is not a number") from None
        if unit and unit not in _UNIT:
            raise LedgerInputError(f"{field}: {part!r}: unknown unit {unit!r} (K, M, G, T or P)")
        if w < 0:
            raise LedgerInputError(f"{field}: {part!r}: a weight cannot be negative")
        out[name] = w / _UNIT[unit] if unit and name == "mem" else w
    return out


def tres_counts(alloc: dict[str, str]) -> dict[str, Decimal]:
    """An AllocTRES (``trainledger.sources.imports.slurm.tres``) as counts: memory in MB, the rest as numbers."""
    out: dict[str, Decimal] = {}
    for k, v in alloc.items():
        k = k.lower()
        if k == "billing" or not v:
            continue
        unit = v[-1].upper() if v[-1].isalpha() else ""
        try:
            n = Decimal(v[:-1] if unit else v)
        except ArithmeticError:
            continue
        if unit in _UNIT:
            n *= _UNIT[unit]
        out[k] = n
    return out


def slurm_billing(counts: dict[str, Decimal], weights: dict[str, Decimal], max_tres: bool = False) -> Decimal:
    """Slurm's billable TRES of an allocation before Slurm truncates it (:func:`slurm_billing_units`):
    Σ count × weight, or with ``PriorityFlags=MAX_TRES`` the largest
    weighted node TRES (cpu, mem, node, gres/*) plus the sum of the others (licenses, burst buffers). A typed
    GPU weight (``gres/gpu:a100``) applies to its typed count, the untyped one to ``gres/gpu``."""
    node = glob = Decimal(0)
    for name, w in weights.items():
        v = counts.get(name, Decimal(0)) * w
        if max_tres and (name in _NODE_TRES or name.startswith("gres/")):
            node = max(node, v)
        else:
            glob += v
    return node + glob


def slurm_billing_units(billing: Decimal) -> int:
    """As Slurm keeps it: the whole part. Slurm computes the weighted sum as a double
    (``assoc_mgr_tres_weighted``) and stores it in an integer TRES count, truncated: a job's
    ``tres_alloc_cnt[TRES_ARRAY_BILLING]`` (``billing=`` in ``AllocTRES``) and a node's
    ``tres_cnt[TRES_ARRAY_BILLING]`` alike (Slurm's TRES page: "the final billing amount is stored as an
    integer and truncated if needed")."""
    return int(billing.to_integral_value(rounding=ROUND_FLOOR))
