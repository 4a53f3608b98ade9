"""The CLI: exact figures, --json, one-line errors with exit 2, --help everywhere."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session, select
from trainledger.cli.commands import app
from trainledger.store.models import Offer


def test_seed_compare_json_says_25_percent(cli):
    r = cli("cost", "compare", "--node-type", "rtx4090-8x", "--utilization", "1", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["own_per_node_month"] == "4800.00"
    assert d["rent_per_node_month"] == "3600.00"
    assert d["savings_pct"] == 25.0
    assert d["renting_always_cheaper"] is True
    assert d["break_even_utilization"] == 1.3333
    assert d["cheaper"] == "rent"


def test_compare_text_says_renting_always_wins(cli):
    r = cli("cost", "compare", "--node-type", "rtx4090-8x")
    assert r.exit_code == 0, r.output
    assert "Renting (rtx4090-rent) is cheaper at every utilization" in r.output
    assert "4,800.00" in r.output and "25.0%" in r.output


def test_imported_offer_where_owning_wins(cli, tmp_path):
    from importlib import resources

    src = resources.files("trainledger.data").joinpath("examples/h100-offers.toml").read_text()
    f = tmp_path / "h100.toml"
    f.write_text(src)
    r = cli("pricing", "import", f, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {"node_types": 0, "offers": 2}
    d = json.loads(cli("cost", "compare", "--node-type", "h100-8x", "--utilization", "0.8", "--json").output)
    # own at 80%: 37,500 + 2,000 + (0.8 × 10.2 + 0.2 × 2.0) kW × 730 h × 0.8 = 39,500 + 4,999.04
    assert d["own_per_node_month"] == "44499.04"
    assert d["rent_per_node_month"] == "84680.00"   # 0.8 × 145 × 730
    assert d["cheaper"] == "own" and d["renting_always_cheaper"] is False
    assert d["break_even_utilization"] == 0.4294
    assert d["savings_pct"] == 47.5                # (84,680 − 44,499.04) ÷ 84,680 = 47.45%
    assert d["payback_months"] == 25.746           # 2,000,000 ÷ (84,680 − 4,999.04 power − 2,000 ops)
    assert d["pays_back_within_depreciation"] is True
    text = cli("cost", "compare", "--node-type", "h100-8x").output
    assert "wins above a time utilization of 42.9%" in text


@pytest.mark.parametrize("body,needle", [
    ('[[offer]]\nname="x"\nnode_type="rtx4090-8x"\nkind="rent_elastic"\nprice_per_node_hour=-5\n',
     "offer 'x': price_per_node_hour: Input should be greater than or equal to 0 (got -5)"),
    ('[[offer]]\nname="y"\nnode_type="rtx4090-8x"\nkind="own"\ncapex_per_node=1\ndepreciation_months=0\npower_kw_load=1\nelectricity_price_per_kwh=1\noperations_per_node_month=1\n',
     "offer 'y': depreciation_months: Input should be greater than 0 (got 0)"),
    ('[[offer]]\nname="z"\nnode_type="tpu-v9"\nkind="rent_elastic"\nprice_per_node_hour=5\n',
     "offer 'z': node_type: unknown node type 'tpu-v9'"),
    ('[[offer]]\nname="w"\nnode_type="rtx4090-8x"\nkind="rent_elastic"\nprice_per_node_hour=5\ncolour="red"\n',
     "offer 'w': colour: Extra inputs are not permitted"),
    ('[[offer\n', "not valid TOML"),
])
def test_bad_pricing_is_one_line_exit_2_and_writes_nothing(cli, engine, tmp_path, body, needle):
    good = '[[offer]]\nname="good-offer"\nnode_type="rtx4090-8x"\nkind="rent_elastic"\nprice_per_node_hour=20\n'
    f = tmp_path / "bad.toml"
    f.write_text(good + body)
    r = cli("pricing", "import", f)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    with Session(engine) as s:
        assert s.exec(select(Offer).where(Offer.name == "good-offer")).first() is None


def test_pricing_list_and_show(cli):
    d = json.loads(cli("pricing", "list", "--json").output)
    assert {n["name"]: n["peak_bf16_tflops"] for n in d["node_types"]} == {
        "a100-8x": 312.0, "h100-8x": 989.0, "h200-8x": 989.0, "rtx4090-8x": 165.2}
    offers = {o["name"]: o for o in d["offers"]}
    assert offers["rtx4090-own"]["full_month_cost"] == "4800.00"
    assert offers["rtx4090-rent"]["hourly_rate"] == "4.93"
    s = json.loads(cli("pricing", "show", "rtx4090-own", "--json").output)
    assert s["capex_per_node"] == "120000.00" and s["depreciation_months"] == 36 and s["power_kw_idle"] == "0.8" and s["electricity_price_per_kwh"] == "0.50"
    r = cli("pricing", "show", "nope")
    assert r.exit_code == 2 and "no offer or node type 'nope'" in r.stderr


def test_bad_arguments_exit_2_with_one_line(cli):
    cases = [
        (["cost", "compare"], "pass exactly one of --node-type NAME or --month YYYY-MM"),
        (["cost", "compare", "--node-type", "rtx4090-8x", "--utilization", "1.5"], "--utilization: must be between 0 and 1"),
        (["cost", "compare", "--node-type", "rtx4090-8x", "--utilization", "abc"], "--utilization: expected a number"),
        (["cost", "compare", "--node-type", "dgx"], "--node-type: unknown node type 'dgx'"),
        (["cost", "compare", "--month", "2026-13"], "--month: expected YYYY-MM"),
        (["report", "monthly", "--month", "2026-11", "--format", "pdf"], "--format: expected csv, xlsx or json"),
        (["report", "monthly", "--month", "2026-11", "--format", "xlsx"], "--output: xlsx needs a file"),
        (["runs", "show", "missing-run"], "no run 'missing-run'"),
        (["runs", "list", "--status", "exploded"], "--status: expected one of"),
        (["settings", "timezone", "Mars/Olympus"], "timezone: unknown time zone 'Mars/Olympus'"),
    ]
    for args, needle in cases:
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and needle in r.stderr, (args, r.stderr)


def test_unreachable_ledger_is_one_line_and_hides_the_password(monkeypatch):
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["runs", "list", "--db", "postgresql+psycopg://alice:s3cret@127.0.0.1:1/nope"])
    assert r.exit_code == 1
    assert "s3cret" not in r.output + r.stderr and "alice:***@127.0.0.1:1/nope" in r.stderr
    assert r.stderr.count("\n") == 1
    r = CliRunner().invoke(app, ["runs", "list", "--db", "mysql://x@y/z"])
    assert r.exit_code == 2 and "backend 'mysql' is not supported" in r.stderr


def _commands(group, prefix=()):
    """Every command path of the click tree (the root loads each command's module when asked for it)."""
    for name in group.list_commands(None):
        cmd = group.get_command(None, name)
        yield (*prefix, name)
        if hasattr(cmd, "list_commands"):  # a group (typer vendors its own click)
            yield from _commands(cmd, (*prefix, name))


def test_the_lazy_command_table_is_what_the_modules_register():
    """``trainledger.cli.commands.COMMANDS`` names each command's module: a command missing there is unreachable."""
    import importlib

    commands = importlib.import_module("trainledger.cli.commands")
    registered = {name: module for module in set(commands.COMMANDS.values()) for name in commands._click_commands(module)}
    assert registered == commands.COMMANDS


def test_every_command_has_help_and_db_option():
    from typer.testing import CliRunner

    runner = CliRunner()
    import typer.main

    cmds = list(_commands(typer.main.get_command(app)))
    assert {("cost", "compare"), ("report", "monthly"), ("import",), ("runs", "list"), ("db", "upgrade"),
            ("pricing", "import"), ("demo",)} <= set(cmds)
    groups = {c for c in cmds if any(len(o) > len(c) and o[:len(c)] == c for o in cmds)}
    for c in cmds:
        r = runner.invoke(app, [*c, "--help"])
        assert r.exit_code == 0, (c, r.output)
        # data prepare only writes shards, glossary prints the metrics layer; every other command reads or writes
        # the ledger
        if c not in groups and c not in {("data", "prepare"), ("glossary",)}:
            assert "--db" in r.output, c


def test_settings_round_trip(cli):
    assert json.loads(cli("settings", "--json").output) == {"timezone": "UTC", "currency": "CNY"}
    assert json.loads(cli("settings", "timezone", "Asia/Shanghai", "--json").output) == {"timezone": "Asia/Shanghai"}
    assert json.loads(cli("settings", "timezone", "--json").output) == {"timezone": "Asia/Shanghai"}


def test_the_console_scripts_entry_stays_a_function_once_the_commands_are_loaded(capsys, monkeypatch):
    """``trainledger.cli.main`` (the console script's entry) is not shadowed by a submodule of the same name: loading
    the command table (:mod:`trainledger.cli.commands`) leaves it callable, so it runs twice in one process."""
    import trainledger
    import trainledger.cli as cli
    import trainledger.cli.commands  # noqa: F401

    for _ in range(2):
        monkeypatch.setattr("sys.argv", ["trainledger", "--version"])
        with pytest.raises(SystemExit) as exc:
            cli.main()
        assert exc.value.code in (0, None)
    assert capsys.readouterr().out.count(trainledger.__version__) == 2
