"""The Settings page's offer form: an offer's fields as text, and form text back to the pricing format.

The form is turned into one ``[[offer]]`` TOML table and validated by the same
code as ``trainledger pricing import`` (:func:`trainledger.store.catalog.presets.parse_pricing`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Optional

from trainledger.store.models import Offer

OFFER_FIELDS = {
    "rent_elastic": ["price_per_node_hour", "price_per_node_month", "billing_granularity_hours", "minimum_hours"],
    "rent_reserved": ["price_per_node_month"],
    "own": ["capex_per_node", "depreciation_months", "residual_value", "power_kw_load", "power_kw_idle",
            "electricity_price_per_kwh", "pue", "operations_per_node_month"],
}


def _toml_value(key: str, text: str) -> str:
    import json

    if key == "depreciation_months" and text.lstrip("-").isdigit():
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def offer_toml(values: dict[str, str]) -> str:
    """One ``[[offer]]`` table from form fields (empty fields left out), for ``presets.parse_pricing``.

    Money goes in as strings, which the pricing format accepts, so values stay exact.
    """
    lines = ["[[offer]]"]
    for key, text in values.items():
        text = (text or "").strip()
        if text:
            lines.append(f"{key} = {_toml_value(key, text)}")
    return "\n".join(lines) + "\n"


def offer_form_defaults(o: Optional[Offer], node_type_name: str) -> dict[str, str]:
    """Current values of an offer as form text (exact decimals, trailing zeros dropped)."""
    out: dict[str, str] = {}
    if o is None:
        return out
    for fields in OFFER_FIELDS.values():
        for f in fields:
            v = getattr(o, f)
            if v is None:
                continue
            out[f] = format(Decimal(v).normalize(), "f") if isinstance(v, Decimal) else str(v)
    out["currency"] = o.currency
    out["notes"] = o.notes or ""
    out["node_type"] = node_type_name
    return out
