"""Counts count runs (issue 26, item 3): a price change inside a month cuts a run into two charge-period
slices, and the monthly report still counts it once (summary, projects, CSV)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from sqlmodel import Session

from tests.helpers import RENT_OFFER_TOML as OFFER
from tests.helpers import add_run

UTC = timezone.utc


def test_a_run_cut_by_a_price_change_counts_once(cli, engine, tmp_path):
    f = tmp_path / "offer.toml"
    f.write_text(OFFER, encoding="utf-8")
    assert cli("pricing", "import", f).exit_code == 0
    with Session(engine) as s:
        add_run(s, "nov-dec", datetime(2025, 11, 30, 12, tzinfo=UTC), 24, nodes=1, offer_name="gpu-rent")
        add_run(s, "across", datetime(2025, 12, 10, tzinfo=UTC), 240, nodes=2, offer_name="gpu-rent", project="p2")
        add_run(s, "late", datetime(2025, 12, 20, tzinfo=UTC), 10, nodes=1, offer_name="gpu-rent", project="p2")
        s.commit()
    res = cli("pricing", "set", "gpu-rent", "price_per_node_hour=13", "--from", "2025-12-15", "--retroactive", "--yes")
    assert res.exit_code == 0, res.output
    dec = json.loads(cli("report", "monthly", "--month", "2025-12", "--format", "json").output)
    assert dec["summary"]["runs"] == 3  # "across" lies on both sides of Dec 15: still one run
    assert {p["project"]: p["runs"] for p in dec["projects"]} == {"p1": 1, "p2": 2}
    assert len(dec["runs"]) == 3
    # the cost is still the sum of both charge periods: 2 × 120 h × 10 + 2 × 120 h × 13 + 12 h × 10 + 10 h × 13
    assert dec["summary"]["actual_cost"] == "5770.00"
