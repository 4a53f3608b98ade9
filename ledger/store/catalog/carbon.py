"""Grid carbon intensity (``carbon_intensity``): ``trainledger carbon set|list``.

An intensity (gCO2e per kWh drawn) is set for one node type (the grid of the site
its nodes run at) or for every node type without its own, from the start of a
day in the display time zone until the next one. Where none is set, the
documented default :data:`DEFAULT_G_PER_KWH` applies and every figure made with
it says so (``assumed``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.audit import record_change
from trainledger.store.catalog.fx import check_day, check_rate
from trainledger.store.lookup import by_name
from trainledger.store.models import CarbonIntensity, NodeType

#: the assumption used where no intensity is set: the world-average carbon intensity of electricity
#: generation, 475 gCO2/kWh (IEA, Global Energy & CO2 Status Report 2019, figure for 2018)
DEFAULT_G_PER_KWH = Decimal("475")
DEFAULT_SOURCE = ("assumption: world-average grid, 475 gCO2e/kWh (IEA Global Energy & CO2 Status Report 2019, "
                  "for 2018); set your grid's with `trainledger carbon set`")
DEFAULT_LOCATION = "unknown (world average assumed)"


#: the most carbon-intensive grids emit about 1,000-1,100 gCO2e/kWh (coal); above this a figure is a unit slip
MAX_G_PER_KWH = Decimal(2000)


def check_intensity(value: Any, field: str = "G_PER_KWH") -> Decimal:
    """A grid intensity in gCO2e/kWh: > 0 and at most :data:`MAX_G_PER_KWH`."""
    g = check_rate(value, field)
    if g > MAX_G_PER_KWH:
        raise LedgerInputError(f"{field}: {value} gCO2e/kWh is out of range: grid intensities are at most "
                               f"{MAX_G_PER_KWH:,f} gCO2e/kWh (coal ≈ 1,000); give grams of CO2e per kWh, e.g. 475")
    return g


def set_intensity(session: Session, g_per_kwh: Any, valid_from: Any, node_type: Optional[str] = None,
                  location: str = "", source: str = "") -> dict[str, Any]:
    """Add an intensity (or replace the one of that day and scope)."""
    g = check_intensity(g_per_kwh)
    d = check_day(valid_from)
    key = by_name(session, NodeType, node_type, "--node-type", "node type").id if node_type else 0
    for field, text, n in (("--location", location, 100), ("--source", source, 200)):
        if len(text) > n or any(ord(c) < 32 for c in text):
            raise LedgerInputError(f"{field}: at most {n} printable characters")
    row = session.exec(select(CarbonIntensity).where(CarbonIntensity.node_type_key == key,
                                                     CarbonIntensity.valid_from == d)).first()
    before = _audited(row)
    if row is None:
        row = CarbonIntensity(node_type_key=key, valid_from=d, g_per_kwh=g, location=location, source=source)
        session.add(row)
    else:
        row.g_per_kwh, row.location, row.source = g, location, source
    session.flush()
    record_change(session, "carbon.set", f"{node_type or 'all node types'} from {d}", before, _audited(row))
    return _row(row, {key: node_type} if node_type else {})


def _audited(row: Optional[CarbonIntensity]) -> Optional[dict[str, Any]]:
    return {"g_per_kwh": row.g_per_kwh, "location": row.location, "source": row.source} if row is not None else None


def list_intensities(session: Session) -> list[dict[str, Any]]:
    """Every intensity set, by scope and date, and the default that applies elsewhere."""
    names = dict(session.exec(select(NodeType.id, NodeType.name)).all())
    rows = list(session.exec(select(CarbonIntensity).order_by(CarbonIntensity.node_type_key, CarbonIntensity.valid_from)))
    out = []
    for i, r in enumerate(rows):
        nxt = rows[i + 1] if i + 1 < len(rows) and rows[i + 1].node_type_key == r.node_type_key else None
        out.append({**_row(r, names), "valid_to": nxt.valid_from if nxt else None})
    out.append({"scope": "default", "valid_from": None, "g_per_kwh": DEFAULT_G_PER_KWH, "location": DEFAULT_LOCATION,
                "source": DEFAULT_SOURCE, "assumed": True, "valid_to": None})
    return out


def _row(r: CarbonIntensity, names: dict) -> dict[str, Any]:
    return {"scope": names.get(r.node_type_key, "all node types") if r.node_type_key else "all node types",
            "valid_from": r.valid_from, "g_per_kwh": r.g_per_kwh, "location": r.location, "source": r.source,
            "assumed": False}
