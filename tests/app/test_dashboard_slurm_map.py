"""Settings → Slurm mapping: the rules of `trainledger slurm map`, added and removed by leads only."""

from __future__ import annotations

import json

import pytest
from trainledger.app.serving.auth import make_entry
from trainledger.cli.commands import app as cli_app
from trainledger.store.db import make_engine
from typer.testing import CliRunner

from tests.app.helpers import make_app, plain, set_role, sign_in

FAST = 1_000  # PBKDF2 iterations in tests


@pytest.fixture
def ledger(sqlite_url, app_env):
    make_engine(sqlite_url).dispose()
    app_env(sqlite_url)
    return sqlite_url


def _rules(url: str) -> list[dict]:
    from trainledger.store.db import get_engine

    r = CliRunner().invoke(cli_app, ["slurm", "map", "list", "--json", "--db", url])
    get_engine.cache_clear()
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _settings(at):
    at.run()
    at.switch_page("pages/settings.py").run()
    assert not at.exception, at.exception
    return at


def _add(at, **fields):
    for key in ("node_type", "offer"):  # outside the form: the offers follow the node type
        if key in fields:
            at.selectbox(key=f"slurm_map_{key}").set_value(fields.pop(key))
            at.run()
    for key, value in fields.items():
        if key in ("by_node", "replace"):
            at.checkbox(key=f"slurm_map_{key}").check()
        else:
            at.text_input(key=f"slurm_map_{key}").input(value)
    next(b for b in at.button if b.label == "Save rule").click().run()
    assert not at.exception, at.exception
    return at


def test_a_lead_adds_and_removes_rules_as_the_cli_sees_them(ledger):
    at = _settings(make_app())
    assert any("No Slurm mapping" in i.value for i in at.info) or not at.dataframe
    _add(at, partition="gpu-a100", gpu_type="a100", node_type="a100-8x", by_node=True)
    assert [s.value for s in at.success] == ["Slurm mapping rule 1 added."]
    _add(_settings(make_app()), partition="rtx", node_type="rtx4090-8x", offer="rtx4090-rent")
    rules = _rules(ledger)
    assert [(r["id"], r["partition"], r["gpu_type"], r["node_type"], r["offer"], r["by_node"]) for r in rules] == [
        (1, "gpu-a100", "a100", "a100-8x", None, True), (2, "rtx", "", "rtx4090-8x", "rtx4090-rent", False)]
    at = _settings(make_app())
    shown = next(d.value for d in at.dataframe if "node type" in d.value.columns and "id" in d.value.columns)
    assert list(shown["id"]) == [1, 2] and list(shown["node type"]) == ["a100-8x", "rtx4090-8x"]
    at.selectbox(key="slurm_map_remove_id").set_value(1)
    next(b for b in at.button if b.label == "Remove rule").click().run()
    assert [s.value for s in at.success] == ["Slurm mapping rule 1 removed."]
    assert [r["id"] for r in _rules(ledger)] == [2]


def test_a_bad_rule_is_one_line_and_writes_nothing(ledger):
    at = _add(_settings(make_app()), node_type="a100-8x")  # no partition, GPU type or nodes
    assert [plain(e.value) for e in at.error] == ["slurm map: give at least one of --partition, --gpu-type or --nodes"]
    at = _add(_settings(make_app()), partition="a b", node_type="a100-8x")
    assert [plain(e.value) for e in at.error] == ["--partition: 'a b' may not contain spaces, commas, '|' or control characters"]
    assert _rules(ledger) == []


def test_a_viewer_cannot_change_the_mapping(ledger, tmp_path, monkeypatch):
    users = tmp_path / "users.toml"
    users.write_text(make_entry("bob", "viewer", "bob-pw", iterations=FAST) + make_entry("ann", "lead", "ann-pw", iterations=FAST))
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users))
    at = make_app()
    sign_in(at, "bob", "bob-pw")
    at.switch_page("pages/settings.py").run()
    assert at.selectbox(key="slurm_map_node_type").disabled and at.text_input(key="slurm_map_partition").disabled
    assert next(b for b in at.button if b.label == "Save rule").disabled
    # a lead whose role is taken away between showing the form and saving it: nothing is saved, the form turns read-only
    at = make_app()
    sign_in(at, "ann", "ann-pw")
    at.switch_page("pages/settings.py").run()
    at.text_input(key="slurm_map_partition").input("gpu")
    set_role(users, "ann", "viewer")
    next(b for b in at.button if b.label == "Save rule").click().run()
    assert not at.success and next(b for b in at.button if b.label == "Save rule").disabled
    assert _rules(ledger) == []
