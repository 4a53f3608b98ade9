"""The metrics layer (issue 36, item 1): every figure defined once, the glossary generated from it, and the
surfaces printing figures under its keys, rounded by its one rule."""

from __future__ import annotations

import json
from datetime import timezone
from decimal import Decimal
from pathlib import Path

import pytest
from trainledger.money.goodput.goodput_core import Category
from trainledger.money.metrics import glossary
from trainledger.money.metrics.catalog import CATEGORIES, FACETS, METRICS
from trainledger.money.metrics.definitions import Metric
from trainledger.money.metrics.registry import BY_KEY, lookup
from trainledger.money.metrics.rounding import cents, rounded_lines, rounding_line
from trainledger.reports.present import jsonable, kind_of

from tests.helpers import three_november_runs

REPO = Path(__file__).resolve().parents[1]
UTC = timezone.utc
#: keys of a table's lines whose figure is the table's own (a budget's amount, an idle share's amount)
LINE_KEYS = {"amount"}


def test_docs_metrics_md_is_the_generated_glossary():
    assert (REPO / "docs" / "METRICS.md").read_text(encoding="utf-8") == glossary.render(), (
        "docs/METRICS.md differs from the code: run `trainledger glossary > docs/METRICS.md`")


def test_the_glossary_names_every_goodput_category_of_the_one_enum():
    assert [k for k, _, _ in CATEGORIES] == [c.value for c in Category]


def test_every_figure_has_one_key_and_its_aliases_name_no_other_figure():
    keys = [k for m in METRICS for k in (m.key, *m.aliases)]
    assert len(keys) == len(set(keys))
    assert all(lookup(k) is m for m in METRICS for k in (m.key, *m.aliases))
    assert not set(FACETS) & set(BY_KEY)
    for m in METRICS:
        assert m.label and m.formula and m.facts, m.key


def test_a_metric_with_an_unknown_unit_or_finality_is_refused():
    with pytest.raises(ValueError, match="unit 'dollars'"):
        Metric("x", "X", "dollars", "f", "facts")
    with pytest.raises(ValueError, match="finality 'soon'"):
        Metric("x", "X", "money", "f", "facts", finality="soon")


def test_presentation_reads_the_unit_from_the_metrics_layer():
    # identity_residual is exact (a check figure): never rounded to 0.00; measured_energy_kwh is energy (3 places)
    assert jsonable({"identity_residual": Decimal("1E-20"), "measured_energy_kwh": Decimal("13246.053876"),
                     "budget_amount": Decimal("5000"), "mfu": Decimal("0.41234")}) == {
        "identity_residual": "0.00000000000000000001", "measured_energy_kwh": 13246.054, "budget_amount": "5000.00", "mfu": 0.4123}


def test_the_rounding_rule_rounds_each_line_on_its_own_and_shows_the_difference():
    # three identical runs of 1 node × 10 h at 3,600 per node-month (730 h): 49.3150... each
    one = 10 * Decimal(3600) / 730
    lines, rest = rounded_lines([one, one, one])
    assert lines == [Decimal("49.32")] * 3  # 49.3150684… half-up: each the same
    assert rest == Decimal("147.95") - Decimal("147.96") == Decimal("-0.01")
    assert sum(lines) + rest == cents(3 * one)
    # 1.004 → 1.00, 2.004 → 2.00, their sum 3.008 → 3.01: a rounding line of 0.01; lines that add up: none
    assert rounding_line([Decimal("1.004"), Decimal("2.004")], Decimal("3.008")) == Decimal("0.01")
    assert rounding_line([Decimal("1.25"), Decimal("2.25")], Decimal("3.50")) == Decimal("0.00")
    assert cents(Decimal("0.005")) == Decimal("0.01") and cents(Decimal("-0.005")) == Decimal("-0.01")


def _money_keys(obj, parent: str = "", out: set | None = None) -> set[tuple[str, str]]:
    """(key, parent key) of every money value printed in a JSON document."""
    out = set() if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)):
                _money_keys(v, k, out)
            elif isinstance(v, str) and kind_of(k) == "money" or (kind_of(parent) == "money" and v is not None):
                out.add((k, parent))
    elif isinstance(obj, list):
        for v in obj:
            _money_keys(v, parent, out)
    return out


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_every_money_figure_the_reports_print_is_defined_in_the_metrics_layer(session, cli):
    three_november_runs(session)
    now = ["--now", "2026-12-01T00:00:00Z"]
    docs = {
        "report monthly": cli("report", "monthly", "--month", "2026-11", "--json", *now),
        "report daily": cli("report", "daily", "--date", "2026-11-03", "--json", *now),
        "report period": cli("report", "period", "--from", "2026-11", "--to", "2026-11", "--json", *now),
        "goodput": cli("goodput", "--month", "2026-11", "--json", *now),
        "forecast": cli("forecast", "--month", "2026-11", "--json", *now),
    }
    undefined = {}
    for name, res in docs.items():
        assert res.exit_code == 0, (name, res.output)
        for key, parent in _money_keys(json.loads(res.output)):
            if not (lookup(key) or key in FACETS or key in LINE_KEYS or lookup(parent)):
                undefined.setdefault(name, set()).add(f"{parent}.{key}" if parent else key)
    assert undefined == {}
