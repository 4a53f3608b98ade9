"""Issue 36, item 1: every surface names and explains a figure through the metrics layer.

The dashboard's cards (`ui.card`), the reports' labels (`present.label`), the XLSX summary's label and definition
columns and the exporter's HELP lines all read a figure's label and formula from `trainledger.money.metrics`; a
figure printed under two meanings gets two keys (the goodput account's idle, a day's elastic rent).
"""

from __future__ import annotations

import ast
import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from trainledger.money.metrics.catalog import FACETS, METRICS
from trainledger.money.metrics.registry import BY_KEY, help_text, label, metric
from trainledger.reports.present import LABELS
from trainledger.reports.present import label as report_label

from tests.helpers import three_november_runs

REPO = Path(__file__).resolve().parents[1]
UTC = timezone.utc
NOW = datetime(2026, 12, 1, tzinfo=UTC)
#: every figure's label, the longest first (a card's label starts with one of them when it names that figure)
FIGURE_LABELS = sorted({m.label for m in METRICS}, key=len, reverse=True)


def test_label_adds_the_currency_to_money_and_the_unit_to_quantities():
    assert label("spend", "CNY") == "Spend (CNY)" and label("spend") == "Spend"
    assert label("actual_cost", "USD") == "Spend (USD)"  # an alias is the same figure, the same label
    assert label("co2e_kg") == "CO2e (kg)" and label("energy_kwh") == "Energy (kWh)"
    assert label("time_utilization", "USD") == "Time utilization"  # a ratio takes no currency
    assert help_text("waste_cost").startswith("Badput + idle") and help_text("waste_cost").endswith(".")
    with pytest.raises(KeyError, match="'spnd' is no figure of the glossary"):
        metric("spnd")


def test_report_labels_are_the_metrics_layers_and_the_rest_names_no_figure():
    for m in METRICS:
        for key in (m.key, *m.aliases):
            assert report_label(key) == label(key), key
    assert not set(LABELS) & set(BY_KEY), "a figure's label belongs in the metrics layer, not present.LABELS"
    assert report_label("peak_nodes") == "Peak nodes" and report_label("timezone") == "Time zone"


def _literal_text(node: ast.AST) -> str | None:
    """The text a label argument starts with when it is written out: "Spend (" of f"Spend ({cur})", also inside
    ui.to_date(...); None for a label computed elsewhere (ui.card, a variable)."""
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "to_date" and node.args:
        return _literal_text(node.args[0])
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


def hard_coded_figure_labels(source: str, path: str) -> list[str]:
    """Metric cards of ``source`` whose label is written out and starts with a figure's label."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        if name != "metric":
            continue
        # st.metric / col.metric(label, ...); app/views/period_view.py's metric(col, rep, key, label, ...)
        arg = node.args[0] if isinstance(node.func, ast.Attribute) and node.args else (
            node.args[3] if len(node.args) > 3 else None)
        text = _literal_text(arg) if arg is not None else None
        if text is None:
            continue
        head = text.split(" (")[0].split(",")[0].strip()
        if head in FIGURE_LABELS:
            out.append(f"{path}:{node.lineno}: {text!r} is the label of a figure: use ui.card(KEY)")
    return out


def test_no_dashboard_card_writes_out_a_figures_label():
    found = []
    for path in sorted((REPO / "app").rglob("*.py")):
        found += hard_coded_figure_labels(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    assert found == []


def test_the_check_finds_a_written_out_label():
    src = ('c[0].metric(ui.to_date(f"Spend ({cur})", s), "1")\nc[1].metric("Idle cost", "2")\n'
           'metric(c[2], rep, "gpu_hours", "GPU-hours", "3")\nc[3].metric(ui.card("spend", cur), "4")\n'
           'c[4].metric("Predicted cost", "5")\n')
    assert [line.split(":")[1] for line in hard_coded_figure_labels(src, "x.py")] == ["1", "2", "3"]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_xlsx_summary_labels_and_defines_each_figure_as_the_layer_does(session, cli, tmp_path):
    from openpyxl import load_workbook

    three_november_runs(session)
    now = ["--now", "2026-12-01T00:00:00Z"]
    j = json.loads(cli("report", "monthly", "--month", "2026-11", "--json", *now).output)["summary"]
    out = tmp_path / "m.xlsx"
    assert cli("report", "monthly", "--month", "2026-11", "--format", "xlsx", "-o", out, *now).exit_code == 0
    rows = list(load_workbook(out)["Summary"].iter_rows(values_only=True))
    assert rows[0] == ("metric", "value", "label", "definition")
    by_key = {r[0]: r for r in rows[1:]}
    cur = j["currency"]
    assert (Decimal(str(by_key["actual_cost"][1])), *by_key["actual_cost"][2:]) == (
        Decimal(j["actual_cost"]), f"Spend ({cur})", help_text("spend"))
    assert by_key["idle_cost"][2:] == (f"Idle cost ({cur})", help_text("idle_cost"))
    assert by_key["time_utilization"][2:] == ("Time utilization", help_text("time_utilization"))
    assert by_key["waste_by_reason.idle"][2:] == (f"Waste by reason: idle ({cur})", FACETS["idle"][:1].upper()
                                                   + FACETS["idle"][1:] + ".")
    assert by_key["waste_by_reason.lost_work"][3].endswith("a failed, crashed or cancelled run after its last "
                                                          "checkpoint (all of it without one).")
    assert by_key["timezone"][2:] == ("Time zone", None)  # not a figure: no definition (an empty cell)
    assert all(r[2] for r in rows[1:])  # every row is labelled


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_exporter_help_lines_are_the_layers_definitions(session):
    from prometheus_client import CollectorRegistry, generate_latest
    from trainledger.reports.metrics import month_metrics

    three_november_runs(session)
    fams = month_metrics(session, datetime(2026, 11, 20, tzinfo=UTC))

    class Fixed:
        def collect(self):
            return fams

    reg = CollectorRegistry()
    reg.register(Fixed())
    text = generate_latest(reg).decode()
    helps = dict(line[len("# HELP "):].split(" ", 1) for line in text.splitlines() if line.startswith("# HELP "))
    for family, key in (("trainledger_cost_to_date", "spend"), ("trainledger_idle_cost_to_date", "idle_cost"),
                        ("trainledger_waste_cost_to_date", "waste_cost"),
                        ("trainledger_time_utilization_ratio", "time_utilization"),
                        ("trainledger_gpu_seconds_to_date", "gpu_hours")):
        assert helps[family].startswith(f"{label(key)}: {help_text(key)} "), family


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_one_key_one_meaning_for_the_accounts_idle_and_a_days_elastic_rent(session, cli):
    three_november_runs(session)
    now = ["--now", "2026-12-01T00:00:00Z"]
    g = json.loads(cli("goodput", "--month", "2026-11", "--json", *now).output)
    month = g["months"][0]
    assert "idle_cost" not in month and "idle_cost" not in g["totals"]
    m = json.loads(cli("report", "monthly", "--month", "2026-11", "--json", *now).output)["summary"]
    # no interrupted chain here: the account's idle is the fleets' idle, and waste's reason "idle"
    assert month["account_idle_cost"] == g["totals"]["account_idle_cost"] == m["idle_cost"]
    assert m["waste_by_reason"]["idle"] == m["idle_cost"]
    d = json.loads(cli("report", "daily", "--date", "2026-11-03", "--json", *now).output)["summary"]
    assert "elastic_cost" not in d  # the monthly report's elastic_cost is a what-if; a day's rent is its own key
    # the rent run (7 h on 1 node of rtx4090-rent, all on 2026-11-03) is the day's whole elastic rent
    runs = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json", *now).output)["runs"]
    assert d["elastic_rent_cost"] == next(r["cost"] for r in runs if r["run_id"] == "rent") != "0.00"
    assert Decimal(d["spend"]) == Decimal(d["fixed_cost"]) + Decimal(d["elastic_rent_cost"])

