"""Per-run lines of a month and the rates that cost them: one run's slice under each option.

:func:`trainledger.money.account.monthly.monthly_report` costs a month per group of runs (node type,
offer, project, status); :class:`_Costing` keeps each charge period's rates so that any
part of a group (a project's share, one run's slice) is costed at exactly those rates,
and :func:`_lines` turns the rollup's slices into :class:`RunSlice` lines that add up
to the group totals (Σ lines = Σ groups, per charge period).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Iterable, Optional

from sqlmodel import Session, select
from trainledger.money.facts import rollup
from trainledger.money.rates import carbon, costs
from trainledger.money.rates.catalog import Catalog, own_energy_kwh
from trainledger.money.rates.costs import ZERO
from trainledger.store.models import WASTE_STATUSES, Offer, OfferKind, Project, Run, User

#: split costs are exact on this grid (a pico-unit of currency)
SLICE_QUANTUM = Decimal("1e-12")
#: a group of runs in the rollup: (node type id, recorded offer id, project id, status)
GroupKey = tuple[int, Optional[int], Optional[int], str]


@dataclass
class RunSlice:
    """The part of one run inside one month, with its cost under each option."""

    run_id: str
    name: str
    project: str
    user: str
    status: str
    strategy: str
    node_type: str
    offer: str
    offer_kind: str
    nodes: int
    gpus_per_node: int
    start: datetime  # clipped to the month
    end: datetime
    node_hours: Decimal
    gpu_hours: Decimal
    tokens: Optional[int]
    gpu_util_mean: Optional[float]
    util_source: Optional[str]
    mfu: Optional[float]
    cost: Decimal = ZERO  # actual: under the run's own offer (allocated for fleets)
    cost_elastic: Optional[Decimal] = None  # if rented elastic
    cost_own: Optional[Decimal] = None  # if owned (allocated from the own alternative)
    split: bool = False  # the run crosses a month boundary
    energy_kwh: Optional[Decimal] = None  # measured, else nominal power × node-hours (co2e_basis says which)
    co2e_kg: Optional[Decimal] = None  # energy × the grid intensity in force
    co2e_basis: Optional[str] = None  # measured | estimated | mixed | unknown
    charge: Optional["ChargeInfo"] = field(default=None, repr=False, compare=False)  # per charge period only
    intensities: list = field(default_factory=list, repr=False, compare=False)  # carbon.Intensity of each period
    lost_gpu_hours: Decimal = ZERO  # lost work in this month (trainledger.money.rates.months.lost_interval)
    lost_work_cost: Decimal = ZERO  # its cost at the run's own rates
    finality: str = "final"  # final | provisional (:func:`cost_finality`, docs/MONEY.md)

    @property
    def waste(self) -> bool:
        return self.status in {s.value for s in WASTE_STATUSES}


def over_months(lines: Iterable[RunSlice]) -> dict[str, RunSlice]:
    """Each run's line over every month given: the monthly report's lines of the run summed where they add up
    (node-hours, GPU-hours, tokens, cost under each option, lost work, energy and CO2e), its interval from the first
    line's start to the last one's end, ``split`` when more than one month, ``provisional`` while any month is; the
    run's own figures (GPU-Util, MFU, name, offer of its first month) as they are. The Runs page's "All months"."""
    out: dict[str, RunSlice] = {}
    for line in lines:
        have = out.get(line.run_id)
        if have is None:
            out[line.run_id] = replace(line, charge=None, intensities=[])
            continue
        for name in ("node_hours", "gpu_hours", "cost", "lost_gpu_hours", "lost_work_cost"):
            setattr(have, name, getattr(have, name) + getattr(line, name))
        for name in ("tokens", "cost_elastic", "cost_own", "energy_kwh", "co2e_kg"):
            a, b = getattr(have, name), getattr(line, name)
            setattr(have, name, None if a is None or b is None else a + b)
        have.start, have.end, have.split = min(have.start, line.start), max(have.end, line.end), True
        have.co2e_basis = _combine_co2e([have.co2e_basis, line.co2e_basis])
        if line.finality != "final":
            have.finality = line.finality
    return out


@dataclass
class ChargeInfo:
    """How one run's part of one charge period was priced (the FOCUS export's unit price and quantity)."""

    start: datetime  # of the charge period
    end: datetime
    pricing_quantity: Decimal  # billed node-hours (elastic) or node-hours (fleets)
    unit_price: Decimal  # per node-hour: cost = pricing_quantity × unit_price
    offer: Any  # the offer at the version in force (money in the presented currency)
    price_version: Optional[int]  # None: an offer with no recorded version
    fleets: Optional[list[str]] = None  # drawn from a fixed-cost offer's fleet: its fleets' names (None: elastic)


def _combine_co2e(bases: list[Optional[str]]) -> Optional[str]:
    known = {b for b in bases if b}
    return known.pop() if len(known) == 1 else ("mixed" if known else None)


@dataclass
class _Costing:
    """The month's rates, to cost any part of a group (a project's share, one run's slice)."""

    by_recorded: dict[tuple[int, Optional[int]], Offer]  # (node type, recorded offer) → offer used
    fleet_months: dict[int, costs.FleetMonth]  # fixed-cost offer id → its month
    own_months: dict[int, tuple[Offer, costs.FleetMonth]]  # node type → the own alternative
    rent_offers: dict[int, Offer]  # node type → the elastic alternative
    start: Optional[datetime] = None  # of the charge period
    intensities: Optional[carbon.IntensityBook] = None
    cat: Optional[Catalog] = None  # priced at the period's start
    group_cost: dict[GroupKey, Decimal] = field(default_factory=dict)  # actual cost of each group of the period
    power_kw: dict[int, Optional[Decimal]] = field(default_factory=dict)  # node type → nominal kW (filled when asked)
    period_end: dict[int, datetime] = field(default_factory=dict)  # node type → the end of its period starting here
    footprints: list[tuple[carbon.Carbon, carbon.Intensity]] = field(default_factory=list)  # per node type

    def offer(self, node_type_id: int, offer_id: Optional[int]) -> Offer:
        return self.by_recorded[(node_type_id, offer_id)]

    def cost(self, offer: Offer, f: rollup.Facts) -> Decimal:
        if offer.kind == OfferKind.rent_elastic:
            return _elastic(offer, f)
        return self.fleet_months[offer.id].allocate(f.node_hours)

    def if_elastic(self, node_type_id: int, f: rollup.Facts) -> Optional[Decimal]:
        o = self.rent_offers.get(node_type_id)
        return _elastic(o, f) if o is not None else None

    def if_own(self, node_type_id: int, f: rollup.Facts) -> Optional[Decimal]:
        pair = self.own_months.get(node_type_id)
        return pair[1].allocate(f.node_hours) if pair is not None else None

    def unit(self, offer: Offer, f: rollup.Facts) -> tuple[Decimal, Decimal]:
        """(pricing quantity, unit price) of ``f`` under ``offer``: billed node-hours × hourly rate for elastic
        rent, node-hours × the fleet's rate per busy node-hour otherwise; their product is :meth:`cost`."""
        if offer.kind == OfferKind.rent_elastic:
            rate, rule = _rate_rule(offer)
            return f.billed.get(rule, ZERO), rate
        return f.node_hours, self.fleet_months[offer.id].allocate(costs.ONE)

    def intensity(self, node_type_id: int) -> carbon.Intensity:
        return self.intensities.at(node_type_id, self.start) if self.intensities is not None else carbon.DEFAULT

    def carbon(self, node_type_id: int, f: rollup.Facts) -> carbon.Carbon:
        """Energy and CO2e of slices of a node type in this charge period (the intensity in force at its start)."""
        if node_type_id not in self.power_kw:
            self.power_kw[node_type_id] = carbon.node_power_kw(self.cat.node_types[node_type_id], self.cat.offers.values())
        return carbon.of_facts(f, self.power_kw[node_type_id], self.intensity(node_type_id))

    def node_type_carbon(self, node_type_id: int, f: rollup.Facts) -> carbon.Carbon:
        """:meth:`carbon` of a node type's whole period, kept for the month's footprint."""
        c = self.carbon(node_type_id, f)
        self.footprints.append((c, self.intensity(node_type_id)))
        return c

    def lost(self, offer: Offer, f: rollup.Facts) -> tuple[Decimal, Decimal]:
        """Cost of lost work at the rates of its runs (elastic: their bill shared by time; fleets: by
        node-hours): ``(runs that never checkpointed, runs since their last checkpoint)``. A run that
        lost everything costs exactly what it cost."""
        whole = self.cost(offer, f.lost(False)) if f.lost_node_us or f.lost_billed else ZERO
        since = self.cost(offer, f.lost(True)) if f.lost_ckpt_node_us or f.lost_ckpt_billed else ZERO
        return whole, since


def _elastic(offer: Offer, facts: rollup.Facts) -> Decimal:
    """Elastic rent of a set of slices = hourly rate × their billed node-hours under the offer's rule."""
    rate, rule = _rate_rule(offer)
    return rate * facts.billed.get(rule, ZERO)


def _rate_rule(offer: Offer) -> tuple[Decimal, str]:
    key = (offer.id, offer.price_per_node_hour, offer.price_per_node_month, offer.billing_granularity_hours,
           offer.minimum_hours)
    found = _RATE_RULE.get(key)
    if found is None:
        found = _RATE_RULE[key] = (costs.hourly_rate(offer), rollup.offer_rule(offer))
    return found


_RATE_RULE: dict[tuple, tuple[Decimal, str]] = {}


def _fleet_energy_kwh(offer: Offer, facts: rollup.Facts, capacity_nh: Decimal) -> tuple[Optional[Decimal], str]:
    """The kWh that replaces an own fleet's nominal power term (measured runs, ``trainledger collect``), and its basis.

    None (nominal power) when no run of the fleet was measured or the offer is not ``own``.
    A run counts as measured when it has ended and every one of its nodes has a
    RunNode with an energy figure; a slice of it gets its share of the kWh by time.
    """
    if offer.kind != OfferKind.own or not facts.kwh_slices:
        return None, "nominal"
    return own_energy_kwh(offer, facts.kwh, facts.unmeasured_node_hours, facts.node_hours, capacity_nh,
                          facts.kwh_slices == facts.slices)


def _total(facts: Iterable[rollup.Facts]) -> rollup.Facts:
    out = rollup.Facts()
    for f in facts:
        out.add(f)
    return out


def _add(a: Optional[Decimal], b: Optional[Decimal], seen: bool = True) -> Optional[Decimal]:
    """a + b where None is unknown: the first part as it is, then None only when both are."""
    if not seen or a is None:
        return b
    return a if b is None else a + b

def _lines(session: Session, m: Any, run_ids: Optional[set[str]], costings: dict[datetime, _Costing],
           per_period: bool = False) -> list[RunSlice]:
    """Per-run lines of the month (``m``: :class:`trainledger.money.account.monthly._Month`), costed with the same rates as the group totals (each charge period's);
    one line per run, or with ``per_period`` one per run and charge period (with its :class:`ChargeInfo`)."""
    slices = rollup.month_slices(session, m.name, m.facts.live, run_ids)
    info: dict[str, tuple] = {}
    ids = sorted({s.run_id for s in slices})
    for i in range(0, len(ids), 500):
        for row in session.exec(
                select(Run.id, Run.name, Run.strategy, Run.util_source, Run.gpu_util_mean, Run.mfu, Run.tokens,
                       Run.started_at, Project.name, User.name)
                .outerjoin(Project, Project.id == Run.project_id).outerjoin(User, User.id == Run.user_id)
                .where(Run.id.in_(ids[i:i + 500]))):
            info[row[0]] = tuple(row)
    out: list[RunSlice] = []
    for s in sorted(slices, key=lambda s: (info[s.run_id][7], s.run_id, s.start)):
        _, name, strategy, usrc, util, mfu_, tokens, _, project, user = info[s.run_id]
        costing = costings[s.charge_from]
        if (s.node_type_id, s.offer_id) not in costing.by_recorded:  # unpriced: no offer can cost it
            continue
        offer = costing.offer(s.node_type_id, s.offer_id)
        f = s.facts
        nh = f.node_hours
        nt_id = offer.node_type_id
        footprint = costing.carbon(s.node_type_id, f)
        line = RunSlice(
            run_id=s.run_id, name=name or "", project=project or "", user=user or "", status=s.status,
            strategy=strategy or "", node_type=m.cat.node_types[s.node_type_id].name, offer=offer.name,
            offer_kind=offer.kind.value, nodes=s.nodes, gpus_per_node=s.gpus_per_node, start=s.start, end=s.end,
            node_hours=nh, gpu_hours=f.gpu_hours, tokens=None if tokens is None else f.tokens, gpu_util_mean=util,
            util_source=usrc, mfu=mfu_, cost=costing.cost(offer, f), cost_elastic=costing.if_elastic(nt_id, f),
            cost_own=costing.if_own(nt_id, f), split=s.split, energy_kwh=footprint.energy_kwh,
            co2e_kg=None if footprint.basis == "unknown" else footprint.co2e_kg, co2e_basis=footprint.basis,
            lost_gpu_hours=f.lost_gpu_hours, lost_work_cost=sum(costing.lost(offer, f), ZERO),
            intensities=[costing.intensity(s.node_type_id)])
        line.finality = cost_finality(offer.kind, s.status, m.period.is_partial)
        if per_period:
            quantity, unit = costing.unit(offer, f)
            line.charge = ChargeInfo(s.charge_from, costing.period_end.get(s.node_type_id, m.end), quantity, unit, offer,
                                     getattr(offer, "price_version", None),
                                     None if offer.kind == OfferKind.rent_elastic else
                                     sorted(f.name for f in m.fleets.get(offer.id, [])))
            out.append(line)
        else:
            _add_slice(out, line)
    return out


def _add_slice(out: list[RunSlice], line: RunSlice) -> None:
    """One line per run and month: ``line`` (a charge period's slice, in the month's line order) appended, or added
    to the run's line when it is the run's next charge period in this month."""
    if out and out[-1].run_id == line.run_id:
        _extend_line(out[-1], line)
    else:
        out.append(line)


def merged_lines(per_period: list[RunSlice]) -> list[RunSlice]:
    """The month's lines, one per run (``_lines(...)``), from its lines per charge period (``_lines(...,
    per_period=True)``, left as they are): the same slices added up the same way, without costing them again."""
    out: list[RunSlice] = []
    for line in per_period:
        _add_slice(out, replace(line, charge=None, intensities=list(line.intensities)))
    return out


def _extend_line(line: RunSlice, part: RunSlice) -> None:
    """One line per run and month: add the slice of a later charge period to it."""
    line.end = part.end
    line.node_hours += part.node_hours
    line.gpu_hours += part.gpu_hours
    if line.tokens is not None:
        line.tokens += part.tokens
    line.cost += part.cost
    line.cost_elastic = _add(line.cost_elastic, part.cost_elastic)
    line.cost_own = _add(line.cost_own, part.cost_own)
    line.lost_gpu_hours += part.lost_gpu_hours
    line.lost_work_cost += part.lost_work_cost
    line.energy_kwh = _add(line.energy_kwh, part.energy_kwh)
    line.co2e_kg = _add(line.co2e_kg, part.co2e_kg)
    line.co2e_basis = _combine_co2e([line.co2e_basis, part.co2e_basis])
    line.intensities += [i for i in part.intensities if i not in line.intensities]
    if part.finality == PROVISIONAL:
        line.finality = PROVISIONAL


PROVISIONAL, FINAL = "provisional", "final"


def cost_finality(offer_kind: Any, status: str, month_is_partial: bool) -> str:
    """Whether a run's cost in a month can still change: the rule of docs/MONEY.md ("Final or provisional").

    A running run's cost is provisional (it grows). A finished run's cost is final when it ends on
    elastic rent (its bill is its own), and provisional until its month closes when it is drawn from
    an owned or reserved fleet: the fleet's month is shared by the node-hours used in it, so later
    runs of the month change every run's share.
    """
    if status == "running":
        return PROVISIONAL
    kind = getattr(offer_kind, "value", offer_kind)
    return PROVISIONAL if month_is_partial and kind != OfferKind.rent_elastic.value else FINAL
