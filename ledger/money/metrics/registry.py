"""Look a figure up by the key a surface prints it under (its key or one of its aliases)."""

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
