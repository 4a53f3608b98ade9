"""Carbon per run and per month: the grid intensity in force and the energy it applies to.

CO2e = energy (kWh) × grid carbon intensity (gCO2e/kWh) ÷ 1,000
(:func:`trainledger.money.rates.costs.co2e_kg`). Energy is the measured figure where
``trainledger collect`` stored one for every node of a run (DCGM/NVML energy),
else the node type's nominal power at load × node-hours, labelled *estimated*.
The intensity is the one set for the node type (its site's grid), else the
ledger-wide one, else the documented default (:data:`trainledger.store.catalog.carbon.DEFAULT_G_PER_KWH`),
labelled *assumed*. Intensities are effective-dated: a charge period is cut
where one takes effect, so each part of a run gets the intensity in force then.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from sqlmodel import Session, select
from trainledger.money.rates import costs
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.months import date_start
from trainledger.store.catalog.carbon import DEFAULT_G_PER_KWH, DEFAULT_LOCATION, DEFAULT_SOURCE
from trainledger.store.models import CarbonIntensity, OfferKind


@dataclass(frozen=True)
class Intensity:
    g_per_kwh: Decimal
    location: str
    source: str
    assumed: bool  # the documented default, not a figure someone set
    valid_from: Optional[date] = None


DEFAULT = Intensity(DEFAULT_G_PER_KWH, DEFAULT_LOCATION, DEFAULT_SOURCE, True)


class IntensityBook:
    """Every intensity set, to pick the one in force for a node type at an instant."""

    def __init__(self, rows: list[CarbonIntensity], tz: ZoneInfo):
        self._rows: dict[int, list[tuple[datetime, Intensity]]] = {}
        for r in sorted(rows, key=lambda r: r.valid_from):
            self._rows.setdefault(r.node_type_key, []).append(
                (date_start(r.valid_from, tz), Intensity(r.g_per_kwh, r.location, r.source, False, r.valid_from)))
        self._starts = {k: [t for t, _ in v] for k, v in self._rows.items()}

    def at(self, node_type_id: int, t: datetime) -> Intensity:
        for key in (node_type_id, 0):
            rows = self._rows.get(key)
            if rows:
                i = bisect_right(self._starts[key], t)
                if i:
                    return rows[i - 1][1]
        return DEFAULT


def load_intensities(session: Session, tz: ZoneInfo) -> IntensityBook:
    return IntensityBook(list(session.exec(select(CarbonIntensity))), tz)


def node_power_kw(node_type: Any, offers: Iterable[Any]) -> Optional[Decimal]:
    """Nominal draw of one node at load: the node type's ``nominal_power_kw``, else its own offer's load kW."""
    if getattr(node_type, "nominal_power_kw", None) is not None:
        return Decimal(node_type.nominal_power_kw)
    for o in offers:
        if o.node_type_id == node_type.id and o.kind == OfferKind.own and o.power_kw_load is not None:
            return Decimal(o.power_kw_load)
    return None


@dataclass
class Carbon:
    """Energy and CO2e of some node-hours: measured and estimated parts, and how they were known."""

    measured_kwh: Decimal = ZERO
    estimated_kwh: Decimal = ZERO
    co2e_kg: Decimal = ZERO
    measured: bool = False  # some of it was measured
    estimated: bool = False  # some of it was estimated from nominal power
    unknown: bool = False  # some node-hours had neither (no nominal power for the node type)
    assumed: bool = False  # the default intensity was used for some of it

    @property
    def energy_kwh(self) -> Decimal:
        return self.measured_kwh + self.estimated_kwh

    @property
    def basis(self) -> str:
        """``measured`` | ``estimated`` | ``mixed`` (some of each) | ``unknown`` (nothing could be known)."""
        if self.unknown and not (self.measured or self.estimated):
            return "unknown"
        if self.measured and not self.estimated and not self.unknown:
            return "measured"
        if self.estimated and not self.measured and not self.unknown:
            return "estimated"
        return "mixed"

    def add(self, other: "Carbon") -> "Carbon":
        self.measured_kwh += other.measured_kwh
        self.estimated_kwh += other.estimated_kwh
        self.co2e_kg += other.co2e_kg
        self.measured |= other.measured
        self.estimated |= other.estimated
        self.unknown |= other.unknown
        self.assumed |= other.assumed
        return self


def of_facts(facts: Any, power_kw: Optional[Decimal], intensity: Intensity) -> Carbon:
    """Carbon of a set of rollup slices (:class:`trainledger.money.facts.rollup.Facts`) at one intensity.

    measured kWh = Σ measured slices' kWh; estimated kWh = unmeasured node-hours × nominal kW.
    """
    out = Carbon(assumed=intensity.assumed)
    if facts.kwh_slices:
        out.measured_kwh, out.measured = Decimal(facts.kwh), True
    unmeasured = facts.unmeasured_node_hours
    if unmeasured > 0:
        if power_kw is None:
            out.unknown = True
        else:
            out.estimated_kwh, out.estimated = costs.nominal_energy_kwh(unmeasured, power_kw), True
    out.co2e_kg = costs.co2e_kg(out.energy_kwh, intensity.g_per_kwh)
    return out


def summary(c: Carbon, intensities: list[Intensity]) -> dict[str, Any]:
    """The carbon figures of a report: energy, CO2e, how they were known, the intensities used."""
    seen = list(dict.fromkeys(intensities))
    return {"energy_kwh": c.energy_kwh, "energy_measured_kwh": c.measured_kwh, "energy_estimated_kwh": c.estimated_kwh,
            "co2e_kg": None if c.basis == "unknown" else c.co2e_kg, "co2e_basis": c.basis,
            "carbon_intensity_assumed": c.assumed,
            "carbon_intensities": [{"g_per_kwh": i.g_per_kwh, "location": i.location, "valid_from": i.valid_from,
                                    "source": i.source, "assumed": i.assumed} for i in seen]}
