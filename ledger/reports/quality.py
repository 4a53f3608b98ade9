"""Data-quality warnings of the monthly export (``trainledger report monthly`` and the dashboard's download).

A report with no warning is rendered exactly as :func:`trainledger.reports.export.render` renders it, byte
for byte; one with warnings carries them under ``data_quality`` (JSON) and as a fourth CSV block after
the runs (``data_quality,node_type,peak_nodes,fleet_nodes,runs``).
"""

from __future__ import annotations

import csv
import io
from typing import Any

from trainledger.reports.export import guard_formula, render

CSV_COLUMNS = ["data_quality", "node_type", "peak_nodes", "fleet_nodes", "runs"]


def with_warnings(p: dict[str, Any], capacity: list[dict[str, Any]]) -> dict[str, Any]:
    """The presented report with its capacity over-use warnings (``trainledger.money.allocation.capacity``); unchanged without."""
    if not capacity:
        return p
    return {**p, "data_quality": [{"warning": "capacity_over_use", **w} for w in capacity]}


def render_report(p: dict[str, Any], fmt: str) -> bytes:
    """:func:`render`, plus the data-quality block in CSV when there is one (JSON dumps it with the rest)."""
    data = render(p, fmt)
    if fmt != "csv" or not p.get("data_quality"):
        return data
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([])
    w.writerow(CSV_COLUMNS)
    for r in p["data_quality"]:
        w.writerow([r["warning"], guard_formula(r["node_type"]), r["peak_nodes"], r["fleet_nodes"], ";".join(r["runs"])])
    return data + buf.getvalue().encode("utf-8")
