"""The cost engine (SPEC §4): pure functions on ``Decimal`` money.

Units are in the names: ``*_hours`` are hours, ``*_kw`` kilowatts, money is in
the offer's currency. Nothing here rounds; presentation rounds, by the one rule of the metrics layer
(:func:`trainledger.money.metrics.rounding.cents`, re-exported here as :func:`cents`).

Conventions
-----------
* A *node-month* for pricing is :data:`HOURS_PER_MONTH` = 730 h (8,760 h / 12);
  a monthly elastic price converts to an hourly rate at 730 h. Ledger months
  are calendar months; fleet power and capacity use the month's real hours.
* Three utilizations are kept apart: *time utilization* (:func:`time_utilization`),
  *GPU-Util* (measured busy share, averaged by :func:`weighted_mean`) and
  *MFU* (:func:`mfu`). A ">90% utilization" claim is GPU-Util, not MFU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Iterable, Optional, Protocol, Sequence

from trainledger.money.metrics.rounding import CENT, ZERO, cents  # noqa: F401  (the one rounding rule)

HOURS_PER_MONTH = Decimal(730)
ONE = Decimal(1)


class OfferLike(Protocol):
    kind: str
    price_per_node_hour: Optional[Decimal]
    price_per_node_month: Optional[Decimal]
    billing_granularity_hours: Optional[Decimal]
    minimum_hours: Optional[Decimal]
    capex_per_node: Optional[Decimal]
    depreciation_months: Optional[int]
    residual_value: Optional[Decimal]
    power_kw_load: Optional[Decimal]
    power_kw_idle: Optional[Decimal]
    electricity_price_per_kwh: Optional[Decimal]
    pue: Optional[Decimal]
    operations_per_node_month: Optional[Decimal]


def _kind(offer: OfferLike) -> str:
    return getattr(offer.kind, "value", offer.kind)


def _d(x: Optional[Decimal], default: Decimal = ZERO) -> Decimal:
    return default if x is None else Decimal(x)


# --- presentation ------------------------------------------------------------

def round_preserving_sum(amounts: Sequence[Decimal], quantum: Decimal = CENT,
                         total: Optional[Decimal] = None) -> list[Decimal]:
    """Round each amount to ``quantum`` so that the rounded parts add up to the rounded total
    (or to ``total``, when the presented total is fixed elsewhere).

    Largest-remainder method: floor every part, then hand the remaining quanta
    to the parts with the largest remainders (ties by position). Lines of an
    export then add up to its total to the cent.
    """
    if not amounts:
        return []
    if total is None:
        total = Decimal(sum(amounts, ZERO)).quantize(quantum, rounding=ROUND_HALF_UP)
    floors = [(a / quantum).to_integral_value(rounding="ROUND_FLOOR") * quantum for a in amounts]
    remaining = int(((total - sum(floors, ZERO)) / quantum).to_integral_value())
    order = sorted(range(len(amounts)), key=lambda i: (-(amounts[i] - floors[i]), i))
    out = list(floors)
    if remaining >= 0:
        for i in order[:remaining]:
            out[i] += quantum
    else:  # only with negative amounts; take from the smallest remainders
        for i in list(reversed(order))[: -remaining]:
            out[i] -= quantum
    return [o.quantize(quantum) for o in out]


# --- time ------------------------------------------------------------------

def hours_between(start: datetime, end: datetime) -> Decimal:
    """Exact hours from ``start`` to ``end`` (microsecond resolution), never negative."""
    delta = end - start
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return max(ZERO, Decimal(micros) / Decimal(3_600_000_000))


def node_hours(nodes: int, duration_hours: Decimal) -> Decimal:
    """node-hours = nodes × duration."""
    return Decimal(nodes) * duration_hours


def gpu_hours(node_hours_: Decimal, gpus_per_node: int) -> Decimal:
    """GPU-hours = node-hours × GPUs per node."""
    return node_hours_ * gpus_per_node


# --- rent ------------------------------------------------------------------

def hourly_rate(offer: OfferLike) -> Decimal:
    """Price of one node-hour: the hourly price, or the monthly price ÷ 730 h."""
    if offer.price_per_node_hour is not None:
        return Decimal(offer.price_per_node_hour)
    if offer.price_per_node_month is not None:
        return Decimal(offer.price_per_node_month) / HOURS_PER_MONTH
    raise ValueError("offer has no price_per_node_hour or price_per_node_month")


def billed_hours(duration_hours: Decimal, granularity_hours: Optional[Decimal] = None,
                 minimum_hours: Optional[Decimal] = None) -> Decimal:
    """Billed hours per node of one run.

    billed = max(minimum, ⌈duration ÷ granularity⌉ × granularity); a run of
    zero duration is not billed. Without a granularity the duration is billed
    exactly.
    """
    if duration_hours <= 0:
        return ZERO
    billed = duration_hours
    if granularity_hours:
        g = Decimal(granularity_hours)
        billed = (duration_hours / g).to_integral_value(rounding=ROUND_CEILING) * g
    return max(billed, _d(minimum_hours))


def elastic_run_cost(offer: OfferLike, nodes: int, duration_hours: Decimal) -> Decimal:
    """Elastic rent of one run = nodes × billed hours × hourly rate (idle is not billed)."""
    return Decimal(nodes) * billed_hours(duration_hours, offer.billing_granularity_hours,
                                         offer.minimum_hours) * hourly_rate(offer)


def reserved_month_cost(offer: OfferLike, reserved_nodes: Decimal | int) -> Decimal:
    """Reserved rent of a month = reserved nodes × monthly price, used or not."""
    if offer.price_per_node_month is None:
        return Decimal(reserved_nodes) * hourly_rate(offer) * HOURS_PER_MONTH
    return Decimal(reserved_nodes) * Decimal(offer.price_per_node_month)


def reserved_months(duration_hours: Decimal) -> int:
    """Whole node-months a reservation must cover: ⌈duration ÷ 730 h⌉, at least 1 (a reservation is sold by the month)."""
    months = (Decimal(duration_hours) / HOURS_PER_MONTH).to_integral_value(rounding=ROUND_CEILING)
    return max(1, int(months))


def reserved_term_cost(offer: OfferLike, nodes: int, duration_hours: Decimal) -> Decimal:
    """Reserved rent of a planned run = nodes × ⌈duration ÷ 730 h⌉ whole months × monthly price.

    A reserved node is paid for the whole month, used or not (as in the monthly
    report: :func:`reserved_month_cost`), so a one-month plan costs exactly
    the month's reserved cost for the same node count.
    """
    return reserved_month_cost(offer, nodes) * reserved_months(duration_hours)


def planned_run_cost(offer: OfferLike, nodes: int, duration_hours: Decimal) -> Decimal:
    """Cost of a planned run of ``nodes`` × ``duration_hours`` under an offer.

    rent_elastic: :func:`elastic_run_cost` (billed hours, granularity and minimum);
    rent_reserved: :func:`reserved_term_cost` (whole months);
    own: node-hours × :func:`busy_rate_per_node_hour` (the run's share of the
    fleet at full use: depreciation + operations per 730 h + load power).
    """
    kind = _kind(offer)
    if kind == "rent_elastic":
        return elastic_run_cost(offer, nodes, duration_hours)
    if kind == "rent_reserved":
        return reserved_term_cost(offer, nodes, duration_hours)
    return node_hours(nodes, duration_hours) * busy_rate_per_node_hour(offer)


def elastic_full_month(offer: OfferLike) -> Decimal:
    """Elastic rent of one node for a full 730-hour month."""
    return hourly_rate(offer) * HOURS_PER_MONTH


# --- own ---------------------------------------------------------------------

def energy_price(offer: OfferLike) -> Decimal:
    """Price of one kWh drawn by the node = electricity price × PUE."""
    return _d(offer.electricity_price_per_kwh) * _d(offer.pue, ONE)


def fixed_cost_per_node_month(offer: OfferLike) -> Decimal:
    """Cost of holding one node for a month, used or not.

    own: (capex − residual) ÷ depreciation months + operations per node-month;
    rent_reserved: the monthly price.
    """
    if _kind(offer) == "rent_reserved":
        return reserved_month_cost(offer, 1)
    if _kind(offer) != "own":
        raise ValueError("fixed costs exist only for own and rent_reserved offers")
    depreciation = (_d(offer.capex_per_node) - _d(offer.residual_value)) / Decimal(offer.depreciation_months)
    return depreciation + _d(offer.operations_per_node_month)


def busy_rate_per_node_hour(offer: OfferLike, hours_in_month: Decimal = HOURS_PER_MONTH) -> Decimal:
    """Cost of a node-hour in a run: fixed cost ÷ hours in the month + load kW × energy price."""
    rate = fixed_cost_per_node_month(offer) / hours_in_month
    if _kind(offer) == "own":
        rate += _d(offer.power_kw_load) * energy_price(offer)
    return rate


def idle_rate_per_node_hour(offer: OfferLike, hours_in_month: Decimal = HOURS_PER_MONTH) -> Decimal:
    """Cost of an idle node-hour: fixed cost ÷ hours in the month + idle kW × energy price."""
    rate = fixed_cost_per_node_month(offer) / hours_in_month
    if _kind(offer) == "own":
        rate += _d(offer.power_kw_idle, _d(offer.power_kw_load)) * energy_price(offer)
    return rate


def own_cost_per_node_month(offer: OfferLike, utilization: Decimal = ONE,
                            hours: Decimal = HOURS_PER_MONTH) -> Decimal:
    """Own (or reserved) cost of one node for a month at a time utilization ``u``.

    own = (capex − residual)/depreciation months + operations
          + (u × load kW + (1 − u) × idle kW) × hours × energy price.
    Seed: 120,000/36 + 6.67 + 4.0 kW × 730 h × 0.5 = 4,800.00 CNY at u = 1.
    """
    u = Decimal(utilization)
    return (busy_rate_per_node_hour(offer, hours) * u + idle_rate_per_node_hour(offer, hours) * (ONE - u)) * hours


def fleet_energy_kwh(measured_kwh: Decimal, unmeasured_busy_node_hours: Decimal, idle_node_hours: Decimal,
                     power_kw_load: Optional[Decimal], power_kw_idle: Optional[Decimal] = None) -> Decimal:
    """Energy of an own fleet when some of its runs were measured (``trainledger collect``).

    kWh = Σ measured runs' kWh + unmeasured busy node-hours × load kW + idle node-hours × idle kW
    (idle kW defaults to load kW). Idle nodes run no collected run, so their draw stays nominal.
    """
    load_kw = _d(power_kw_load)
    idle_kw = load_kw if power_kw_idle is None else Decimal(power_kw_idle)
    return Decimal(measured_kwh) + Decimal(unmeasured_busy_node_hours) * load_kw + max(ZERO, Decimal(idle_node_hours)) * idle_kw


# --- allocation (OpenCost-style) ---------------------------------------------

@dataclass(frozen=True)
class FleetMonth:
    """A fixed-cost fleet's month: its cost, what runs were allocated, and idle.

    Identity: Σ allocated + idle = total, for every month (to the cent).
    """

    capacity_node_hours: Decimal
    busy_node_hours: Decimal
    total: Decimal
    allocated: tuple[Decimal, ...]
    idle: Decimal
    over_capacity: bool
    busy_rate: Decimal = ZERO  # per node-hour in a run (when not over capacity)

    def allocate(self, node_hours_: Decimal) -> Decimal:
        """The share of ``node_hours_`` (any part of the busy node-hours), as in ``allocated``."""
        if self.over_capacity:
            return self.total * node_hours_ / self.busy_node_hours
        return node_hours_ * self.busy_rate

    @property
    def idle_node_hours(self) -> Decimal:
        return max(ZERO, self.capacity_node_hours - self.busy_node_hours)


def fleet_month(offer: OfferLike, capacity_node_hours: Decimal, run_node_hours: Sequence[Decimal],
                hours_in_month: Decimal, energy_kwh: Optional[Decimal] = None) -> FleetMonth:
    """Cost of a fixed-cost fleet for one month and its allocation to runs.

    total  = fixed/node-month × capacity ÷ hours in month
             + (load kW × busy + idle kW × idle node-hours) × energy price
    run i  = node-hours_i × busy rate;  idle = idle node-hours × idle rate.

    ``energy_kwh`` (measured, e.g. from DCGM) replaces the nominal power term
    and is shared by node-hours. If runs used more node-hours than the fleet
    had (inconsistent data), the total is shared pro rata and idle is 0.
    """
    busy = sum(run_node_hours, ZERO)
    cap = Decimal(capacity_node_hours)
    fixed_rate = fixed_cost_per_node_month(offer) / hours_in_month
    idle_nh = max(ZERO, cap - busy)
    if energy_kwh is not None and _kind(offer) == "own":
        power = Decimal(energy_kwh) * energy_price(offer)
        per_nh_power = power / (busy + idle_nh) if busy + idle_nh > 0 else ZERO
        busy_rate = fixed_rate + per_nh_power
        idle_rate = fixed_rate + per_nh_power
    else:
        busy_rate = busy_rate_per_node_hour(offer, hours_in_month)
        idle_rate = idle_rate_per_node_hour(offer, hours_in_month)
    if busy <= cap:
        total = fixed_rate * cap + (busy_rate - fixed_rate) * busy + (idle_rate - fixed_rate) * idle_nh
        allocated = tuple(nh * busy_rate for nh in run_node_hours)
        idle = idle_nh * idle_rate
        return FleetMonth(cap, busy, total, allocated, idle, False, busy_rate)
    total = fixed_rate * cap + (busy_rate - fixed_rate) * cap
    allocated = tuple(total * nh / busy for nh in run_node_hours)
    return FleetMonth(cap, busy, total, allocated, ZERO, True, busy_rate)


# --- comparison --------------------------------------------------------------

def break_even_utilization(own_per_node_month_full: Decimal, rent_full_month: Decimal) -> Decimal:
    """u* = own cost per node-month (at full load) ÷ elastic rent of a full node-month.

    Below u* elastic renting is cheaper; above it owning is. If u* ≥ 1 renting
    is cheaper at every utilization (seed: 4,800 ÷ 3,600 = 1.3333).
    """
    return Decimal(own_per_node_month_full) / Decimal(rent_full_month)


def break_even_utilization_power_adjusted(offer_own: OfferLike, rent_full_month: Decimal) -> Optional[Decimal]:
    """The exact crossover u where own(u) = u × rent, with idle power when idle.

    own(u) = F + u·B + (1−u)·I  (F fixed, B/I busy/idle power per month)
    ⇒ u = (F + I) ÷ (rent − (B − I)).  None when own(u) > rent(u) for all u.
    Equal to :func:`break_even_utilization` when idle and load power are equal.
    """
    hours = HOURS_PER_MONTH
    fixed = fixed_cost_per_node_month(offer_own)
    busy_p = (busy_rate_per_node_hour(offer_own, hours) * hours) - fixed
    idle_p = (idle_rate_per_node_hour(offer_own, hours) * hours) - fixed
    denom = Decimal(rent_full_month) - (busy_p - idle_p)
    if denom <= 0:
        return None
    return (fixed + idle_p) / denom


def payback_months(capex_per_node: Decimal, rent_per_node_month: Decimal,
                   own_cash_cost_per_node_month: Decimal) -> Optional[Decimal]:
    """Payback of buying a node = capex ÷ monthly saving; None if owning saves nothing.

    The monthly saving is the rent avoided minus owning's cash running cost
    (power + operations; depreciation is the capex itself, so it is left out).
    """
    saving = Decimal(rent_per_node_month) - Decimal(own_cash_cost_per_node_month)
    if saving <= 0:
        return None
    return Decimal(capex_per_node) / saving


def savings(cost_a: Decimal, cost_b: Decimal) -> tuple[str, Decimal, Optional[Decimal]]:
    """Which of two costs is cheaper, by how much, and by what % of the dearer one.

    Returns ("a" | "b" | "equal", saving, saving ÷ dearer × 100).
    """
    a, b = Decimal(cost_a), Decimal(cost_b)
    if a == b:
        return "equal", ZERO, ZERO if a else None
    cheaper, dearer = ("a", b) if a < b else ("b", a)
    saving = abs(a - b)
    return cheaper, saving, (saving / dearer * 100) if dearer else None


def roi(cost_chosen: Decimal, cost_alternative: Decimal) -> Optional[Decimal]:
    """Monthly ROI = (cost of the alternative − cost of the chosen option) ÷ cost of the chosen."""
    if not cost_chosen:
        return None
    return (Decimal(cost_alternative) - Decimal(cost_chosen)) / Decimal(cost_chosen)


def per_thousand(quantity: Decimal | float | int, spend: Decimal) -> Optional[Decimal]:
    """Output per 1,000 units of currency (tokens, useful GPU-hours): quantity ÷ spend × 1,000."""
    if not spend:
        return None
    return Decimal(quantity) / Decimal(spend) * 1000


def cost_per_million_tokens(cost: Decimal, tokens: int | None) -> Optional[Decimal]:
    """Cost per 1M tokens = cost ÷ tokens × 10⁶ (None without tokens)."""
    if not tokens:
        return None
    return Decimal(cost) / Decimal(tokens) * 1_000_000


# --- the three utilizations ---------------------------------------------------

def time_utilization(busy_node_hours: Decimal, capacity_node_hours: Decimal) -> Optional[Decimal]:
    """Time utilization = node-hours in runs ÷ fleet node-hours (not GPU-Util, not MFU)."""
    if not capacity_node_hours:
        return None
    return Decimal(busy_node_hours) / Decimal(capacity_node_hours)


def useful_gpu_hours(gpu_hours_: Decimal, gpu_util: Optional[float]) -> Optional[Decimal]:
    """Useful GPU-hours = GPU-hours × GPU-Util (None when GPU-Util was not measured)."""
    if gpu_util is None:
        return None
    return Decimal(gpu_hours_) * Decimal(str(gpu_util))


def weighted_mean(pairs: Iterable[tuple[Optional[float], Decimal]]) -> Optional[float]:
    """Mean of values weighted by e.g. GPU-hours, skipping unknown values (None if none known)."""
    num = ZERO
    den = ZERO
    for value, weight in pairs:
        if value is None or not weight:
            continue
        num += Decimal(str(value)) * weight
        den += weight
    return float(num / den) if den else None


#: hardware names already warned about an unknown peak (one line per name and process)
_WARNED_NO_PEAK: set[str] = set()


def mfu(tokens_per_s: float, flops_per_token: float, peak_tflops_per_gpu: Optional[float], n_gpus: int,
        hardware: Optional[str] = None) -> Optional[float]:
    """Model FLOPs utilization, 0–1: the one MFU function (trainer, run wrapper/API, planner).

    MFU = tokens/s × FLOPs per token ÷ (peak FLOP/s per GPU × GPUs)   (PaLM, Chowdhery et al. 2022, App. B)

    FLOPs per token come from ``trainledger.trainer.shapes.flops_per_token`` (6N + 12·L·H·Q·T,
    N without lookup tables). An unknown peak (None or 0: a CPU, a GPU missing
    from the catalog) gives None — never a fallback peak — and, when
    ``hardware`` names the device or node type, one warning line per name.
    """
    if not peak_tflops_per_gpu or not n_gpus:
        if hardware and hardware not in _WARNED_NO_PEAK:
            _WARNED_NO_PEAK.add(hardware)
            logging.getLogger("trainledger").warning(
                "MFU not reported: no peak bf16 TFLOPs known for %s; add it to the node type "
                "(trainledger pricing import) or set peak_tflops in the trainer config", hardware)
        return None
    return tokens_per_s * flops_per_token / (peak_tflops_per_gpu * 1e12 * n_gpus)


# --- currencies and carbon --------------------------------------------------------

def convert(amount: Decimal, rate: Decimal) -> Decimal:
    """Money in another currency = amount × rate, where 1 unit of the amount's currency = ``rate`` units
    of the other (a charge period is converted at the rate in force during it)."""
    return Decimal(amount) * Decimal(rate)


def inverse_rate(rate: Decimal) -> Decimal:
    """The rate of the reverse pair: 1 ÷ rate (a USD→CNY rate of 7.2 gives CNY→USD 0.13888…)."""
    return ONE / Decimal(rate)


def nominal_energy_kwh(node_hours_: Decimal, power_kw: Decimal) -> Decimal:
    """Estimated energy of unmeasured node-hours = node-hours × nominal power per node at load (kW)."""
    return Decimal(node_hours_) * Decimal(power_kw)


def co2e_kg(energy_kwh: Decimal, g_per_kwh: Decimal) -> Decimal:
    """Emissions (kg CO2e) = energy (kWh) × grid carbon intensity (gCO2e/kWh) ÷ 1,000."""
    return Decimal(energy_kwh) * Decimal(g_per_kwh) / 1000
