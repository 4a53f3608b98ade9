"""Allocation shares: the part of each node a run held, and so the part of the node it pays for.

A run on a shared node pays for its share of the node, an exact fraction kept on the run as text
``"N/D"`` (``run.share``; None = the whole node, as every run recorded before shares existed):

* **gpus** (the default): GPUs held ÷ GPUs of the node type (``gres/gpu=2`` on an 8-GPU node: 1/4);
* **mig:PROFILE**: a MIG slice's compute slices ÷ 7 of one GPU, ÷ the node type's GPUs
  (:data:`MIG_FILE`: NVIDIA's published profiles of the A100 and H100; ``1g.10gb`` = 1/7 of a GPU);
* **billing**: Slurm's billing of the job ÷ the billing of one whole node, with the partition's
  ``TRESBillingWeights`` (and ``PriorityFlags=MAX_TRES``: the largest weighted TRES instead of the sum),
  both truncated to whole numbers as Slurm keeps them: the job's is the ``billing=`` sacct reports in
  ``AllocTRES``, else :func:`slurm_billing` truncated (:func:`job_billing_units`);
* **exclusive** / **node**: the whole node (``--exclusive``, a whole-node launch, an offer or Slurm
  mapping billed by node): share None.

Node-hours held, GPU-hours, billed hours, capacity and peaks are counted in shares: two 4-GPU runs on
one 8-GPU node are one node. Peaks are swept in whole multiples of 1/:data:`UNITS` of a node (every
fraction k/G with G ≤ 16 GPUs and every seventh is exact), and a node partly held counts as held.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Iterable, Optional

from trainledger.errors import LedgerInputError
from trainledger.store.mappings.slurm_billing import parse_weights, slurm_billing, slurm_billing_units, tres_counts  # noqa: F401

#: node units of a peak: 720720 = lcm(1..16), so k/G for G ≤ 16 and every k/7/G with G | 8... are whole units
UNITS = 720_720
MIG_FILE = "mig_profiles.toml"
WHOLE = (None, None)


def parse(share: Optional[str]) -> Optional[Fraction]:
    """``"N/D"`` → Fraction (None: the whole node)."""
    if share is None or share == "":
        return None
    return Fraction(share)


def text(fr: Optional[Fraction]) -> Optional[str]:
    """A share as stored: ``"N/D"`` in lowest terms; None for the whole node (1 is stored as None too)."""
    if fr is None or fr == 1:
        return None
    return f"{fr.numerator}/{fr.denominator}"


def held_units(nodes: int, share: Optional[str]) -> int:
    """Nodes × share in 1/:data:`UNITS` node units, rounded up (a node partly held is held)."""
    fr = parse(share)
    if fr is None:
        return nodes * UNITS
    return -(-nodes * fr.numerator * UNITS // fr.denominator)


def peak_nodes(units: int) -> int:
    """A peak swept in node units, as whole nodes (rounded up)."""
    return -(-units // UNITS)


def scaled_micros(nodes: int, micros: int, share: Optional[str], per_node: int = 1) -> int:
    """``nodes × micros × share × per_node`` rounded half-down to an integer (exact for the whole node)."""
    fr = parse(share)
    if fr is None:
        return nodes * micros * per_node
    num = nodes * micros * per_node * fr.numerator
    q, r = divmod(num, fr.denominator)
    return q + (1 if 2 * r > fr.denominator else 0)


def scale(amount: Decimal, share: Optional[str]) -> Decimal:
    """A Decimal amount × the share (multiplied first, then divided: exact whenever the result is)."""
    fr = parse(share)
    if fr is None:
        return amount
    return amount * fr.numerator / fr.denominator


# --- the rules ---------------------------------------------------------------------------------------------

def gpu_share(gpus_held: int, node_gpus: int, node_type: str, field: str = "gpus") -> Optional[Fraction]:
    """GPUs held ÷ GPUs of the node type; one-line errors for more GPUs than the node has and for none."""
    if node_gpus <= 0:
        return None  # a CPU node type: the node (gpus mean nothing)
    if gpus_held > node_gpus:
        raise LedgerInputError(f"{field}: {gpus_held} GPUs exceed the {node_gpus} of node type {node_type} (a share "
                               "above 1); map the job to the right node type or record fewer GPUs")
    if gpus_held <= 0:
        raise LedgerInputError(f"{field}: 0 GPUs held on GPU node type {node_type}; record the GPUs the run held, "
                               "or mark it exclusive (it held the whole node)")
    return Fraction(gpus_held, node_gpus)


@lru_cache(maxsize=1)
def mig_catalog() -> dict[str, dict[str, int]]:
    """GPU model key → MIG profile → compute slices (of 7), from :data:`MIG_FILE`."""
    import tomllib
    from importlib import resources
    from pathlib import Path

    here = Path(__file__).resolve().parents[2] / "data" / MIG_FILE  # a source checkout: its own data/
    raw = here.read_bytes() if here.exists() else resources.files("trainledger.data").joinpath(MIG_FILE).read_bytes()
    return {row["gpu"]: dict(row["profiles"]) for row in tomllib.loads(raw.decode())["mig_profile"]}


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def mig_profiles(gpu_model: str) -> dict[str, int]:
    """The MIG profiles of a GPU model (empty: it has none in the catalog)."""
    model = _norm(gpu_model)
    for key, profiles in mig_catalog().items():
        if _norm(key) in model:
            return profiles
    return {}


def mig_share(profiles: Iterable[str], gpu_model: str, node_gpus: int, node_type: str,
              field: str = "mig") -> Fraction:
    """Σ compute slices ÷ 7 of the MIG slices held, ÷ the node type's GPUs."""
    known = mig_profiles(gpu_model)
    if not known:
        raise LedgerInputError(f"{field}: node type {node_type} ({gpu_model}) has no MIG profiles in the catalog; "
                               "MIG is known for A100 and H100 node types")
    total = Fraction(0)
    for p in profiles:
        if p not in known:
            raise LedgerInputError(f"{field}: {p!r} is not a MIG profile of {gpu_model}; use one of "
                                   f"{', '.join(known)}")
        total += Fraction(known[p], 7)
    return gpu_share_fraction(total, node_gpus, node_type, field)


def gpu_share_fraction(gpus: Fraction, node_gpus: int, node_type: str, field: str) -> Fraction:
    if gpus <= 0:
        raise LedgerInputError(f"{field}: no GPU or MIG slice held on GPU node type {node_type}")
    fr = gpus / node_gpus
    if fr > 1:
        raise LedgerInputError(f"{field}: {gpus} GPUs exceed the {node_gpus} of node type {node_type} (a share above 1)")
    return fr


def alloc_share(alloc: dict, node_type: str, gpu_model: str, node_gpus: int) -> tuple[Optional[str], Optional[str]]:
    """(share, basis) of what a wrapped or tracked run holds on each node (``topology.allocation``):
    exclusive → the whole node; MIG devices → their slices; GPUs → GPUs held ÷ the node type's. An allocation
    that says nothing (no GPU list, or an empty one: a CPU run) keeps the whole node, as before."""
    if not alloc:
        return None, None
    if alloc.get("exclusive"):
        return None, "exclusive"
    if alloc.get("mig"):
        profile = alloc.get("mig_profile")
        if not profile:
            raise LedgerInputError("--mig-profile: the run holds MIG devices (MIG-… in CUDA_VISIBLE_DEVICES); give "
                                   "their profile (e.g. 1g.10gb) with --mig-profile or $TRAINLEDGER_MIG_PROFILE")
        full = int(alloc.get("gpus") or 0) - int(alloc["mig"])
        fr = mig_share([profile] * int(alloc["mig"]), gpu_model, node_gpus, node_type, "--mig-profile")
        fr += gpu_share(full, node_gpus, node_type, "CUDA_VISIBLE_DEVICES") if full > 0 else 0
        if fr > 1:
            raise LedgerInputError(f"CUDA_VISIBLE_DEVICES: more than the {node_gpus} GPUs of node type {node_type}")
        return text(fr), f"mig:{profile}"
    held = alloc.get("gpus")
    if not held or not node_gpus:
        return None, None
    return text(gpu_share(int(held), node_gpus, node_type, "CUDA_VISIBLE_DEVICES / SLURM_GPUS_ON_NODE")), "gpus"


# --- Slurm billing (TRESBillingWeights) ----------------------------------------------------------------------

def billing_share(job: dict[str, Decimal], node: dict[str, Decimal], weights: dict[str, Decimal], max_tres: bool,
                  nodes: int, node_type: str, field: str = "AllocTRES", reported: Optional[int] = None) -> Fraction:
    """The job's billing ÷ (nodes × one whole node's billing): the part of each node it pays for.

    Both billings as Slurm keeps them, whole numbers: Slurm stores the weighted sum in an integer TRES
    count, so the job's ``billing=`` in ``AllocTRES`` and a node's ``billing=`` in its TRES are truncated
    (:func:`job_billing_units`, :func:`slurm_billing_units`). ``reported``: the ``billing=`` sacct wrote
    for the job, which is its billing when present."""
    whole = slurm_billing_units(slurm_billing(node, weights, max_tres))
    if whole <= 0:
        raise LedgerInputError(f"node_tres: one node of {node_type} bills {whole} under these weights (Slurm truncates "
                               "the weighted sum to a whole number); give its TRES (e.g. cpu=64,mem=512G,gres/gpu=8)")
    billed = job_billing_units(job, weights, max_tres, reported)
    fr = Fraction(billed, whole * nodes)
    if fr > 1:
        raise LedgerInputError(f"{field}: billing {billed} exceeds {nodes} whole node(s) of {node_type} ({whole} each; "
                               "a share above 1); check the mapping's --node-tres")
    if fr <= 0:
        raise LedgerInputError(f"{field}: the job bills 0 under the partition's weights (Slurm truncates the weighted "
                               "sum to a whole number); check --billing-weights")
    return fr


def job_billing_units(job: dict[str, Decimal], weights: dict[str, Decimal], max_tres: bool,
                      reported: Optional[int] = None) -> int:
    """A job's billing as Slurm writes ``billing=`` in ``AllocTRES``: the one sacct reported, else the
    weighted sum (:func:`slurm_billing`) truncated to a whole number."""
    if reported is not None:
        return reported
    return slurm_billing_units(slurm_billing(job, weights, max_tres))


def reported_billing(alloc: dict[str, str]) -> Optional[int]:
    """The ``billing=N`` of an ``AllocTRES`` (``trainledger.sources.imports.slurm.tres``); None when absent or not a
    whole number (then the ledger computes it)."""
    value = (alloc.get("billing") or "").strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None


def check_overlaps(runs: Iterable[tuple[str, str, object, object, Optional[str]]]) -> None:
    """``(run id, host, start, end, share)``: one-line error when an exclusive (whole-node) run overlaps a
    shared run on the same host (the node cannot have been held whole and shared at once)."""
    by_host: dict[str, list] = {}
    for rid, host, s, e, share in runs:
        by_host.setdefault(host, []).append((s, e, rid, share))
    for host, items in sorted(by_host.items()):
        items.sort(key=lambda x: (x[0], x[2]))
        for i, (s, e, rid, share) in enumerate(items):
            for s2, e2, rid2, share2 in items[i + 1:]:
                if s2 >= e:
                    break
                if (share is None) != (share2 is None):
                    whole, shared = (rid, rid2) if share is None else (rid2, rid)
                    raise LedgerInputError(f"share: run {whole} held node {host} exclusively while run {shared} "
                                           "shared it; fix the runs' times, hosts or exclusive flag")
