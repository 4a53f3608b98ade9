"""CO2e per run = kWh × the grid intensity in force (measured energy, else nominal power × node-hours).

SQLite and PostgreSQL; months in 2025. The intensity of the RTX 4090 site is 600 gCO2e/kWh from
2025-11-01 and 300 from 2025-11-15; before November none is set, so the documented default (475,
labelled assumed) applies.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone

import yaml
from sqlmodel import Session
from trainledger.store.catalog.carbon import DEFAULT_G_PER_KWH
from trainledger.store.models import RunNode

from tests.helpers import add_run

UTC = timezone.utc


def _ledger(cli, engine) -> None:
    for g, day in (("600", "2025-11-01"), ("300", "2025-11-15")):
        res = cli("carbon", "set", g, "--from", day, "--node-type", "rtx4090-8x", "--location", "CN-North",
                  "--source", "grid operator")
        assert res.exit_code == 0, res.output
    with Session(engine) as s:
        add_run(s, "measured", datetime(2025, 11, 3, tzinfo=UTC), 10, nodes=2, offer_name="rtx4090-rent")
        for n in range(2):
            s.add(RunNode(run_id="measured", hostname=f"n{n}", node_rank=n, energy_kwh=50.0))
        add_run(s, "estimated", datetime(2025, 11, 5, tzinfo=UTC), 10, nodes=2, offer_name="rtx4090-rent")
        add_run(s, "across", datetime(2025, 11, 10, tzinfo=UTC), 240, nodes=1, offer_name="rtx4090-rent")
        add_run(s, "october", datetime(2025, 10, 10, tzinfo=UTC), 5, nodes=1, offer_name="rtx4090-rent")
        s.commit()


def test_a_runs_co2e_is_its_kwh_times_the_intensity_in_force(cli, engine, tmp_path):
    _ledger(cli, engine)
    show = {rid: json.loads(cli("runs", "show", rid, "--json").output) for rid in ("measured", "estimated", "across", "october")}
    # measured: 2 nodes × 50 kWh at 600 g/kWh; estimated: 2 nodes × 10 h × 4.0 kW (the node type's nominal power)
    assert (show["measured"]["energy_kwh"], show["measured"]["co2e_kg"], show["measured"]["co2e_basis"]) == (100.0, 60.0, "measured")
    assert (show["estimated"]["energy_kwh"], show["estimated"]["co2e_kg"], show["estimated"]["co2e_basis"]) == (80.0, 48.0, "estimated")
    # across the change on Nov 15: 120 h × 4 kW at 600 g, then 120 h × 4 kW at 300 g
    assert (show["across"]["energy_kwh"], show["across"]["co2e_kg"]) == (960.0, 120 * 4 * 600 / 1000 + 120 * 4 * 300 / 1000)
    assert show["across"]["carbon_intensity_g_per_kwh"] == ["600", "300"] and show["across"]["carbon_location"] == "CN-North"
    assert show["across"]["carbon_intensity_assumed"] is False
    # before any intensity was set: the default, labelled an assumption
    assert show["october"]["co2e_kg"] == float(20 * DEFAULT_G_PER_KWH / 1000) and show["october"]["carbon_intensity_assumed"] is True

    nov = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json").output)
    s = nov["summary"]
    assert (s["energy_kwh"], s["energy_measured_kwh"], s["energy_estimated_kwh"]) == (1140.0, 100.0, 1040.0)
    assert (s["co2e_kg"], s["co2e_basis"], s["carbon_intensity_assumed"]) == (540.0, "mixed", False)
    assert s["carbon_intensities"] == ["600 gCO2e/kWh, CN-North from 2025-11-01 (grid operator)",
                                       "300 gCO2e/kWh, CN-North from 2025-11-15 (grid operator)"]
    assert {r["run_id"]: r["co2e_kg"] for r in nov["runs"]} == {"measured": 60.0, "estimated": 48.0, "across": 432.0}
    text = cli("report", "monthly", "--month", "2025-11", "--format", "csv").stdout
    runs_block = text.split("\n\n")[2]
    assert {r["run_id"]: (r["energy_kwh"], r["co2e_kg"], r["co2e_basis"]) for r in csv.DictReader(io.StringIO(runs_block))
            } == {"measured": ("100.0", "60.0", "measured"), "estimated": ("80.0", "48.0", "estimated"),
                  "across": ("960.0", "432.0", "estimated")}
    oct_ = json.loads(cli("report", "monthly", "--month", "2025-10", "--format", "json").output)["summary"]
    assert oct_["carbon_intensity_assumed"] is True and oct_["carbon_intensities"][0].startswith(
        "475 gCO2e/kWh, unknown (world average assumed) (assumption: world-average grid")

    out = tmp_path / "focus.csv"
    assert cli("report", "focus", "--month", "2025-11", "-o", out).exit_code == 0
    rows = [r for r in csv.DictReader(out.open(encoding="utf-8")) if r["x_RunId"] == "across"]
    assert [(r["ChargePeriodStart"], r["x_EnergyKWh"], r["x_CO2eKg"]) for r in rows] == [
        ("2025-11-01T00:00:00Z", "480.0000000000", "288.0000000000"),
        ("2025-11-15T00:00:00Z", "480.0000000000", "144.0000000000")]


def test_runs_card_prints_a_model_card_block(cli, engine):
    _ledger(cli, engine)
    res = cli("runs", "card", "across", "--training-type", "fine-tuning")
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert text.startswith("---\nco2_eq_emissions:\n") and text.rstrip().endswith("---")
    card = yaml.safe_load(text.strip().strip("-"))
    co2 = card["co2_eq_emissions"]
    assert co2["emissions"] == 432000.0  # grams, as the Hub expects
    assert co2["training_type"] == "fine-tuning" and co2["geographical_location"] == "CN-North"
    assert co2["hardware_used"] == "1 x 8 NVIDIA GeForce RTX 4090 24GB (8 GPUs)"
    assert co2["source"] == ("trainledger: energy estimated from nominal power x node-hours, 960.000 kWh x 600, 300 gCO2e/kWh")
    shown = json.loads(cli("runs", "show", "across", "--json").output)
    assert card["training_compute"] == {"run_id": "across", "gpu_hours": 1920.0, "cost": shown["cost_actual"],
                                        "currency": "CNY", "energy_kwh": 960.0, "co2e_basis": "estimated"}
    assert json.loads(cli("runs", "card", "measured", "--json").output)["co2_eq_emissions"]["emissions"] == 60000.0
    res = cli("runs", "card", "across", "--training-type", "distillation")
    assert res.exit_code == 2 and "--training-type: expected pre-training or fine-tuning" in res.stderr


def test_carbon_commands_refuse_bad_input_and_list_the_default(cli):
    for args, needle in (
        (("carbon", "set", "0", "--from", "2025-11-01"), "G_PER_KWH: a rate must be a number > 0"),
        (("carbon", "set", "500", "--from", "2025-11-01", "--node-type", "tpu-pod"), "--node-type: unknown node type 'tpu-pod'"),
        (("carbon", "set", "500", "--from", "Nov 1"), "--from: expected a date YYYY-MM-DD"),
    ):
        res = cli(*args)
        assert res.exit_code == 2 and needle in res.stderr and res.stderr.count("\n") == 1, (args, res.stderr)
    rows = json.loads(cli("carbon", "list", "--json").output)
    assert rows == [{"scope": "default", "valid_from": None, "g_per_kwh": "475", "location": "unknown (world average assumed)",
                     "source": rows[0]["source"], "assumed": True, "valid_to": None}]
    assert rows[0]["source"].startswith("assumption: world-average grid, 475 gCO2e/kWh (IEA")
    assert cli("carbon", "set", "550.5", "--from", "2025-01-01").exit_code == 0
    assert json.loads(cli("carbon", "list", "--json").output)[0] == {
        "scope": "all node types", "valid_from": "2025-01-01", "g_per_kwh": "550.5", "location": "", "source": "",
        "assumed": False, "valid_to": None}
