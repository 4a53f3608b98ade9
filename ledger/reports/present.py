"""Presentation: how figures are rounded and typed in tables, JSON and exports.

A key that names a figure of the metrics layer (:mod:`trainledger.money.metrics`, docs/METRICS.md) is shown by
its unit there; other keys (a figure's facets, lines of a table) by their suffix. Money is an exact string with
2 decimals in JSON ("4800.00"), rounded half-up to cents only here; a cost per unit of work (per 1M tokens) is
money with 4 decimals ("0.0035"), often under a cent. Ratios keep 4 decimals, percentages 1, hours 3.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from datetime import date, datetime, timezone, tzinfo
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from typing import Any, Optional

from trainledger.money.metrics.registry import lookup
from trainledger.money.rates.costs import cents

MONEY_KEYS = {"cost", "spend", "savings", "idle_cost", "waste_cost", "amount"}
MONEY_SUFFIXES = ("_cost", "_per_node_month", "_savings", "savings_vs_alternative",
                  "cost_if_elastic", "cost_if_own", "_price", "_rate", "cheapest_saves_vs_dearest")
MONEY_PREFIXES = ("cost_", "price_", "capex", "residual", "electricity_price", "operations_", "waste_by_reason")
PCT_SUFFIXES = ("_pct",)
RATIO_SUFFIXES = ("utilization", "roi", "mfu", "mfu_mean", "gpu_util_mean", "gpu_util_p95", "coverage",
                  "break_even_utilization", "break_even_utilization_power_adjusted", "comm_share")
HOURS_SUFFIXES = ("_hours", "_months")
#: energy and emissions: 3 decimals (Wh, g)
QUANTITY_KEYS = {"energy_kwh", "energy_measured_kwh", "energy_estimated_kwh", "co2e_kg", "emissions_kg"}


#: a metric's unit → how it is shown here
UNIT_KIND = {"money": "money", "ratio": "ratio", "pct": "pct", "hours": "hours", "seconds": "hours", "kwh": "hours",
             "kg": "hours", "per_money": "hours", "count": "plain", "exact": "plain", "unit_price": "unit_price"}
#: keys of a cost per unit of work that are not figures themselves (``best_cost_per_1m_tokens``, a strategy's
#: ``cost_per_1m_OFFER`` column): shown as the figure, with 4 decimals
UNIT_PRICE_MARK = "cost_per_1m"


@lru_cache(maxsize=4096)
def kind_of(key: str) -> str:
    """How a value under ``key`` is presented (money, unit price, pct, ratio, hours, plain): the metrics layer's unit
    of the figure, else the key's naming rules; a function of the key alone (the glossary is fixed at import), so it
    is remembered per key (a month's export asks it ~350,000 times for a few dozen keys)."""
    m = lookup(key)
    if m is not None:
        return UNIT_KIND[m.unit]
    if UNIT_PRICE_MARK in key:
        return "unit_price"
    if key in MONEY_KEYS or key.endswith(MONEY_SUFFIXES) or key.startswith(MONEY_PREFIXES):
        return "money"
    if key.endswith(PCT_SUFFIXES):
        return "pct"
    if key.endswith(RATIO_SUFFIXES):
        return "ratio"
    if key.endswith(HOURS_SUFFIXES) or key.endswith("_per_1000") or key in QUANTITY_KEYS:
        return "hours"
    return "plain"


def _q(x: Decimal, places: str) -> Decimal:
    return Decimal(x).quantize(Decimal(places), rounding=ROUND_HALF_UP)


def present(key: str, value: Any) -> Any:
    """A JSON-ready value for ``key`` (money as a cents string, ratios as floats)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (Decimal, float)) and not isinstance(value, bool):
        k = kind_of(key)
        if k == "money":
            c = cents(Decimal(str(value)) if isinstance(value, float) else value)
            return str(c if c else abs(c))  # a difference of -0.000001 is "0.00", never "-0.00"
        if k == "unit_price":
            c = _q(Decimal(str(value)) if isinstance(value, float) else value, "0.0001")
            return str(c if c else abs(c))
        if k == "pct":
            return float(_q(Decimal(str(value)), "0.1"))
        if k == "ratio":
            return float(_q(Decimal(str(value)), "0.0001"))
        if k == "hours":
            return float(_q(Decimal(str(value)), "0.001"))
        if isinstance(value, Decimal):  # exact, without trailing zeros: "0.8", "36"
            text = format(value.normalize(), "f")
            return text
    return value


def jsonable(obj: Any, key: str = "") -> Any:
    """Recursively convert a report/dict/dataclass into JSON-ready values."""
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:  # what present() returns as it is (an export's most cells)
        return obj
    if hasattr(t, "__dataclass_fields__"):  # dataclasses.is_dataclass of an instance, without its generic checks
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        # a dict under a money or hours key (cost per offer, a forecast's range) holds money or hours too
        inherit = kind_of(key) in ("money", "hours", "unit_price")
        return {k: jsonable(v, key if inherit and not isinstance(v, (dict, list)) else k) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, key) for v in obj]
    return present(key, obj)


def fmt_cell(key: str, value: Any) -> str:
    """Human text for a table cell (times in the zone they carry)."""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    v = present(key, value)
    if v is None:
        return "—"
    k = kind_of(key)
    if k == "money" and not (isinstance(v, str) and not _is_num(v)):  # "not costed" stays words
        return f"{Decimal(v):,.2f}"
    if k == "unit_price" and not (isinstance(v, str) and not _is_num(v)):
        return f"{Decimal(v):,.4f}"
    if k == "pct":
        return f"{v:.1f}%"
    if k == "ratio" and isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """A plain aligned text table (numbers right-aligned)."""
    if not rows:
        return "(none)"
    columns = columns or list(rows[0].keys())
    cells = [[fmt_cell(c, r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    numeric = [all(_is_num(row[i]) for row in cells) for i in range(len(columns))]
    def line(vals):
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(vals, widths, numeric)).rstrip()
    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _is_num(s: str) -> bool:
    t = s.replace(",", "").replace("%", "").replace("—", "0")
    try:
        float(t)
        return True
    except ValueError:
        return False


def key_values(d: dict[str, Any]) -> str:
    width = max(len(k) for k in d) if d else 0
    return "\n".join(f"{k.ljust(width)}  {fmt_cell(k, v)}" for k, v in d.items() if not isinstance(v, (dict, list)))


#: human labels of the report's keys that are not figures (a figure's label is the metrics layer's,
#: ``trainledger.money.metrics.registry.label``); a key in neither is shown as its words ("node_hours" → "Node hours")
LABELS = {
    "month": "Month", "timezone": "Time zone", "currency": "Currency", "period": "Period",
    "period_end": "Counted to", "elapsed_hours": "Hours elapsed", "month_hours": "Hours in the month",
    "is_partial": "Month to date", "gpu_util_sources": "GPU-Util sources", "waste_by_reason": "Waste by reason",
    "cheapest_option": "Cheapest option", "chosen_option": "Chosen option", "alternative_option": "Alternative",
    "power_basis": "Power basis",
    "co2e_basis": "CO2e basis", "carbon_intensity_assumed": "Carbon intensity assumed",
    "carbon_intensities": "Carbon intensity", "fx_rates": "Exchange rates",
    "unpriced_runs": "Runs not costed", "unpriced_node_types": "Node types without an offer",
    "runs_without_node_type": "Runs without a node type (not costed)", "not_costed_node_hours": "Node-hours not costed",
    "run_id": "Run ID", "gpus_per_node": "GPUs per node", "util_source": "GPU-Util source", "offer_kind": "Offer kind",
}


def label(key: str) -> str:
    """The human label of a report key: the figure's label (the metrics layer; money without its currency),
    else :data:`LABELS`, else its words ("peak_nodes" → "Peak nodes")."""
    from trainledger.money.metrics.registry import BY_KEY
    from trainledger.money.metrics.registry import label as figure_label

    if key in LABELS:
        return LABELS[key]
    if key in BY_KEY:
        return figure_label(key)
    words = key.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def human(key: str, value: Any, tz: Optional[tzinfo] = None) -> str:
    """A figure as the dashboard shows it: ratios as percentages ("59.99%"), counts with thousands separators
    ("648,213,506,897"), everything else as :func:`fmt_cell`."""
    if kind_of(key) == "ratio" and isinstance(value, (float, Decimal)):
        return f"{float(present(key, value)) * 100:.2f}%"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, datetime) or (isinstance(value, str) and _INSTANT.match(value)):
        return when(value, tz)
    return fmt_cell(key, value)


#: an instant as the JSON carries it ("2026-11-15T12:30:15.123456+00:00"); a date alone is left as it is
_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def when(value: Any, tz: Optional[tzinfo] = None, zone: bool = True) -> str:
    """An instant for people: ``YYYY-MM-DD HH:MM`` in ``tz`` (default UTC; a naive time is UTC), then the zone's
    name unless ``zone`` is false; never seconds or µs. A datetime or ISO 8601 text; "" for none, other text as is."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if not isinstance(value, datetime):
        return str(value)
    dt = (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(tz or timezone.utc)
    return f"{dt:%Y-%m-%d %H:%M}" + (f" {getattr(tz, 'key', None) or dt.tzname()}" if zone else "")


def labelled_rows(d: dict[str, Any], currency: str | None = None, tz: Optional[tzinfo] = None) -> list[dict[str, str]]:
    """A summary as (figure, value) rows for a table: human labels (money ones with ``currency``), the table's
    rounding, instants in ``tz``; a list is joined, a dict (waste by reason) is one row per entry."""
    def row(key: str, name: str, value: Any) -> dict[str, str]:
        unit = f" ({currency})" if currency and kind_of(key) in ("money", "unit_price") else ""
        text = "; ".join(str(x) for x in value) if isinstance(value, list) else human(key, value, tz)
        return {"figure": name + unit, "value": text}

    rows = []
    for k, v in d.items():
        if isinstance(v, dict):
            rows.extend(row(k, f"{label(k)}: {sub.replace('_', ' ')}", x) for sub, x in v.items())
        else:
            rows.append(row(k, label(k), v))
    return rows
