"""Look a figure up by the key a surface prints it under (its key or one of its aliases); its label and help.

Every surface names a figure through :func:`label` and explains it through :func:`help_text`, so the dashboard's
cards, the XLSX summary and the exporter's HELP lines say what the glossary (docs/METRICS.md) says.
"""

from __future__ import annotations

from typing import Optional

from trainledger.money.metrics.catalog import METRICS
from trainledger.money.metrics.definitions import Metric


def _index() -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for m in METRICS:
        for k in (m.key, *m.aliases):
            if k in out:
                raise ValueError(f"metric key {k!r} is defined twice ({out[k].key}, {m.key})")
            out[k] = m
    return out


BY_KEY: dict[str, Metric] = _index()


def lookup(key: str) -> Optional[Metric]:
    """The figure printed under ``key``, or None when ``key`` names no figure of the glossary."""
    return BY_KEY.get(key)


#: the unit shown after a label where the figure is not money ("CO2e (kg)"); money shows its currency instead
UNIT_SUFFIX = {"kg": "kg", "kwh": "kWh"}


def metric(key: str) -> Metric:
    """The figure printed under ``key``; a KeyError naming the glossary when it is none (a surface's typo)."""
    m = BY_KEY.get(key)
    if m is None:
        raise KeyError(f"{key!r} is no figure of the glossary (trainledger.money.metrics.catalog)")
    return m


def label(key: str, currency: Optional[str] = None) -> str:
    """The figure's label as every surface shows it: "Spend (USD)" with a currency, "CO2e (kg)" for a unit."""
    m = metric(key)
    if m.unit in ("money", "unit_price"):  # money, and money per unit of work
        return f"{m.label} ({currency})" if currency else m.label
    suffix = UNIT_SUFFIX.get(m.unit)
    return f"{m.label} ({suffix})" if suffix else m.label


def help_text(key: str) -> str:
    """One sentence on what the figure is: its formula as the glossary writes it."""
    return sentence(metric(key).formula)


def sentence(text: str) -> str:
    """A definition as a sentence: a capital first letter and a full stop ("" stays "")."""
    return text[:1].upper() + text[1:] + ("" if not text or text.endswith(".") else ".")
