"""Issue 40 item 4: the audit log. Every configuration write of the CLI records one row (who, when, from where,
what, before, after) in the same transaction; a failing write records nothing; the table refuses UPDATE and
DELETE (and TRUNCATE on PostgreSQL); ``trainledger audit`` reads it. Real SQLite and a real PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import exc, text
from sqlmodel import Session, select
from trainledger.store import audit
from trainledger.store.db import make_engine
from trainledger.store.models import AuditLog, Budget, Fleet, FxRate, SlurmMap

USER, HOST = "ops-anna", "ops-host"  # the CLI's actor, fixed for exact rows
FAST = "1000"  # PBKDF2 iterations for `users add` in tests


STARTED: list[datetime] = []  # when the running test began: every row it records is stamped between then and now


@pytest.fixture
def as_operator(monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: USER)
    monkeypatch.setattr("socket.gethostname", lambda: HOST)
    STARTED[:] = [datetime.now(timezone.utc)]


def _rows(url: str) -> list[dict]:
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return audit.entries(s)
    finally:
        engine.dispose()


def _one_new(url: str, seen: int, action: str, target: str, before, after) -> int:
    """Exactly one row more than ``seen``, the newest, recorded as the operator's from this host."""
    rows = _rows(url)
    assert len(rows) == seen + 1, rows[: len(rows) - seen]
    got = {k: v for k, v in rows[0].items() if k not in ("id", "at")}
    assert got == {"actor": USER, "origin": "cli", "client": HOST, "action": action, "target": target,
                   "before": before, "after": after}
    assert STARTED[0] <= rows[0]["at"] <= datetime.now(timezone.utc)  # stamped when written, by the ledger's clock
    assert len(rows) == 1 or rows[1]["at"] <= rows[0]["at"]
    return seen + 1


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


def _first_version(url: str, offer: str) -> dict:
    from trainledger.store.catalog.prices import audited_version, offer_named, versions

    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return json.loads(json.dumps(audit.jsonable(audited_version(versions(s, offer_named(s, offer).id)[0]))))
    finally:
        engine.dispose()


def test_every_cli_write_records_one_row(cli, ledger_url, as_operator, tmp_path):
    n = 0
    _ok(cli("budget", "set", "1000"))
    n = _one_new(ledger_url, n, "budget.set", "team monthly", None,
                 {"amount": "1000", "currency": "CNY", "threshold_pct": "100"})
    _ok(cli("budget", "set", "1200.50", "--threshold", "80"))
    n = _one_new(ledger_url, n, "budget.set", "team monthly",
                 {"amount": "1000", "currency": "CNY", "threshold_pct": "100"},
                 {"amount": "1200.5", "currency": "CNY", "threshold_pct": "80"})
    _ok(cli("budget", "remove"))
    n = _one_new(ledger_url, n, "budget.remove", "team monthly",
                 {"amount": "1200.5", "currency": "CNY", "threshold_pct": "80"}, None)

    v1 = _first_version(ledger_url, "rtx4090-reserved")
    _ok(cli("pricing", "set", "rtx4090-reserved", "price_per_node_month=5000", "--from", "2099-01-01", "--note", "raise"))
    n = _one_new(ledger_url, n, "offer.price", "rtx4090-reserved", v1,
                 {"version": 2, "valid_from": "2099-01-01T00:00:00+00:00", "price_per_node_month": "5000", "note": "raise"})
    offers = tmp_path / "offers.toml"
    offers.write_text('[[offer]]\nname = "lab-rent"\nnode_type = "rtx4090-8x"\nkind = "rent_elastic"\ncurrency = "CNY"\n'
                      'price_per_node_hour = "12.50"\nvalid_from = 2026-01-01\n')
    _ok(cli("pricing", "import", offers))
    n = _one_new(ledger_url, n, "offer.add", "lab-rent", None,
                 {"kind": "rent_elastic", "node_type": "rtx4090-8x", "currency": "CNY",
                  "valid_from": "2026-01-01T00:00:00+00:00", "price_per_node_hour": "12.5", "notes": ""})

    _ok(cli("fleet", "set", "rack-a", "--offer", "rtx4090-own", "--nodes", "4", "--from", "2026-01-01"))
    fleet = {"name": "rack-a", "offer": "rtx4090-own", "node_count": 4, "valid_from": "2026-01-01", "valid_to": None,
             "idle_share": "none"}
    n = _one_new(ledger_url, n, "fleet.add", "rack-a", None, fleet)
    _ok(cli("fleet", "set", "rack-a", "--nodes", "6"))
    n = _one_new(ledger_url, n, "fleet.set", "rack-a", fleet, {**fleet, "node_count": 6})
    _ok(cli("fleet", "set", "rack-a", "--idle-share", "proportional"))
    n = _one_new(ledger_url, n, "fleet.idle_policy", "rack-a", {"idle_share": "none"}, {"idle_share": "proportional"})
    _ok(cli("fleet", "remove", "rack-a"))
    n = _one_new(ledger_url, n, "fleet.remove", "rack-a", {**fleet, "node_count": 6, "idle_share": "proportional"}, None)

    _ok(cli("fx", "set", "CNY", "USD", "0.1387", "--from", "2026-11-01", "--source", "bank"))
    n = _one_new(ledger_url, n, "fx.set", "CNY/USD from 2026-11-01", None, {"rate": "0.1387", "source": "bank"})
    _ok(cli("fx", "set", "CNY", "USD", "0.14", "--from", "2026-11-01", "--source", "bank"))
    n = _one_new(ledger_url, n, "fx.set", "CNY/USD from 2026-11-01", {"rate": "0.1387", "source": "bank"},
                 {"rate": "0.14", "source": "bank"})
    rates = tmp_path / "rates.csv"
    rates.write_text("base,quote,rate,valid_from,source\nCNY,EUR,0.13,2026-11-01,ecb\n")
    _ok(cli("fx", "import", rates))
    n = _one_new(ledger_url, n, "fx.import", "CNY/EUR from 2026-11-01", None, {"rate": "0.13", "source": "ecb"})

    _ok(cli("carbon", "set", "581", "--from", "2026-11-01", "--location", "CN"))
    n = _one_new(ledger_url, n, "carbon.set", "all node types from 2026-11-01", None,
                 {"g_per_kwh": "581", "location": "CN", "source": ""})
    _ok(cli("settings", "currency", "USD"))
    n = _one_new(ledger_url, n, "setting.set", "currency", None, {"value": "USD"})
    _ok(cli("settings", "currency", "EUR"))
    n = _one_new(ledger_url, n, "setting.set", "currency", {"value": "USD"}, {"value": "EUR"})
    _ok(cli("settings", "currency", "EUR"))  # the same value again: nothing changed, nothing recorded
    assert len(_rows(ledger_url)) == n

    rule = json.loads(_ok(cli("slurm", "map", "add", "--node-type", "rtx4090-8x", "--partition", "gpu",
                              "--offer", "rtx4090-rent", "--json")).stdout)
    rid = rule["id"]
    fields = {"cluster": "", "partition": "gpu", "gpu_type": "", "node_pattern": "", "node_type": "rtx4090-8x",
              "offer": "rtx4090-rent", "by_node": False, "billing_weights": "", "max_tres": False, "node_tres": ""}
    n = _one_new(ledger_url, n, "slurm_map.add", f"rule {rid}", None, fields)
    _ok(cli("slurm", "map", "remove", str(rid)))
    n = _one_new(ledger_url, n, "slurm_map.remove", f"rule {rid}", fields, None)

    _ok(cli("invoice", "map", "gpu-node-*", "--offer", "rtx4090-rent", "--provider", "gpucloud"))
    n = _one_new(ledger_url, n, "invoice_map.set", "gpucloud: gpu-node-*", None, {"offer": "rtx4090-rent", "node": ""})
    _ok(cli("invoice", "map", "gpu-node-*", "--offer", "rtx4090-rent", "--provider", "gpucloud", "--node", "*"))
    n = _one_new(ledger_url, n, "invoice_map.set", "gpucloud: gpu-node-*", {"offer": "rtx4090-rent", "node": ""},
                 {"offer": "rtx4090-rent", "node": "*"})
    _ok(cli("invoice", "map", "gpu-node-*", "--provider", "gpucloud", "--remove"))
    _one_new(ledger_url, n, "invoice_map.remove", "gpucloud: gpu-node-*", {"offer": "rtx4090-rent", "node": "*"}, None)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("argv", [
    ("budget", "set", "12abc"),
    ("budget", "set", "100", "--project", "no-such-project"),
    ("fx", "set", "CNY", "USD", "-1", "--from", "2026-11-01"),
    ("carbon", "set", "99999", "--from", "2026-11-01"),
    ("settings", "timezone", "Mars/Olympus"),
    ("fleet", "set", "rack-b", "--offer", "no-such-offer", "--nodes", "2", "--from", "2026-01-01"),
    ("fleet", "set", "rack-b", "--offer", "rtx4090-own", "--nodes", "2", "--from", "2026-01-01", "--idle-share", "bogus"),
    ("pricing", "set", "rtx4090-reserved", "price_per_node_month=-5"),
    ("slurm", "map", "add", "--node-type", "no-such-type", "--partition", "gpu"),
    ("invoice", "map", "gpu-*", "--offer", "no-such-offer"),
])
def test_a_failing_write_records_nothing(cli, ledger_url, as_operator, argv):
    r = cli(*argv)
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.output
    assert _rows(ledger_url) == []


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_write_refused_after_it_was_made_leaves_no_row(cli, ledger_url, as_operator):
    """``pricing set --from <past> --retroactive`` not confirmed: the version was written in the transaction, then
    refused; the rollback takes its audit row with it."""
    r = cli("pricing", "set", "rtx4090-reserved", "price_per_node_month=5000", "--from", "2026-01-01",
            "--retroactive", input="n\n")
    assert r.exit_code == 2 and "not confirmed" in r.stderr
    assert _rows(ledger_url) == []
    engine = make_engine(ledger_url)
    with Session(engine) as s:
        from trainledger.store.catalog.prices import offer_named, versions

        assert len(versions(s, offer_named(s, "rtx4090-reserved").id)) == 1
        assert s.exec(select(Budget)).all() == [] and s.exec(select(Fleet)).all() == []
        assert s.exec(select(FxRate)).all() == [] and s.exec(select(SlurmMap)).all() == []
    engine.dispose()


def test_the_audit_log_refuses_update_and_delete(ledger_url):
    engine = make_engine(ledger_url)
    try:
        with Session(engine) as s:
            audit.record(s, audit.Actor("anna", "cli", "h"), "setting.set", "currency", None, {"value": "USD"})
            s.commit()
        statements = ["UPDATE audit_log SET actor = 'mallory'", "DELETE FROM audit_log"]
        if engine.dialect.name == "postgresql":
            statements.append("TRUNCATE audit_log")
        for sql in statements:
            with engine.connect() as c:
                with pytest.raises(exc.DBAPIError, match="append-only"):
                    c.execute(text(sql))
                c.rollback()
        rows = _rows(ledger_url)
        assert [(r["actor"], r["action"], r["after"]) for r in rows] == [("anna", "setting.set", {"value": "USD"})]
    finally:
        engine.dispose()


def _insert(url: str, *instants: str) -> None:
    engine = make_engine(url)
    with Session(engine) as s:
        for i, at in enumerate(instants):
            s.add(AuditLog(at=datetime.fromisoformat(at), actor=f"user{i}", origin="cli", client="h", action="fx.set",
                           target=f"t{i}", before={"rate": "1"} if i else None, after={"rate": str(i + 2)}))
        s.commit()
    engine.dispose()


def test_audit_json_is_the_rows_and_since_filters(cli, ledger_url):
    _insert(ledger_url, "2026-11-30T23:00:00+00:00", "2026-12-01T01:00:00+00:00", "2026-12-02T09:30:00+00:00")
    rows = _rows(ledger_url)
    out = json.loads(_ok(cli("audit", "--json")).stdout)
    assert out == [{**r, "at": r["at"].isoformat()} for r in rows]
    assert [r["actor"] for r in out] == ["user2", "user1", "user0"]  # newest first
    assert out[1] == {"id": out[1]["id"], "at": "2026-12-01T01:00:00+00:00", "actor": "user1", "origin": "cli",
                      "client": "h", "action": "fx.set", "target": "t1", "before": {"rate": "1"}, "after": {"rate": "3"}}

    def since(*args: str) -> list[str]:
        return [r["actor"] for r in json.loads(_ok(cli("audit", "--json", *args)).stdout)]

    assert since("--since", "2026-12-01") == ["user2", "user1"]  # the start of that day in the display zone (UTC)
    assert since("--since", "2026-12-01T01:00") == ["user2", "user1"]  # at or after
    assert since("--since", "2026-12-01T02:00+01:00") == ["user2", "user1"]
    assert since("--since", "2026-12-03") == []
    assert since("--limit", "1") == ["user2"]
    _ok(cli("settings", "timezone", "Asia/Shanghai"))  # now the day starts at 16:00 UTC the day before
    assert since("--since", "2026-12-01")[1:] == ["user2", "user1", "user0"]  # [0]: that settings change
    table = _ok(cli("audit", "--since", "2026-12-02")).stdout.splitlines()
    assert table[0].split() == ["when", "who", "from", "where", "what", "target", "before", "→", "after"]
    assert table[2].split()[6:] == ["setting.set", "timezone", "+", "value=Asia/Shanghai"]
    assert table[3].split() == ["2026-12-02", "17:30", "Asia/Shanghai", "user2", "cli", "h", "fx.set", "t2", "rate:",
                                "1", "→", "4"]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("value", ["yesterday-ish", "2026-13-01", "", "0001-01-01"])
def test_a_bad_since_is_one_line(cli, value):
    r = cli("audit", "--since", value)
    assert r.exit_code == 2 and r.stderr.startswith("error: --since: ") and len(r.stderr.strip().splitlines()) == 1


# --- users -------------------------------------------------------------------------------------

def _hash_line(text: str, user: str) -> str:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(f"[users.{user}]") or line == f'[users."{user}"]')
    return next(line for line in lines[i:] if line.startswith("password_hash"))


def test_users_add_set_role_remove_are_audited_and_keep_the_rest(cli, ledger_url, as_operator, tmp_path):
    from trainledger.app.serving.auth import authenticate, load_auth_file, make_entry

    users = tmp_path / "users.toml"
    head = "# the team's dashboard users\n" + make_entry("alice", "lead", "alice-pw", iterations=1000)
    bob = "\n# read-only\n" + make_entry("bob", "viewer", "bob-pw", iterations=1000)
    users.write_text(head + bob)
    users.chmod(0o640)

    r = _ok(cli("users", "add", "carol@lab", "--role", "admin", "--project", "llm", "--project", "asr",
                "--auth-file", users, "--password-stdin", "--iterations", FAST, input="carol-pw\n"))
    assert "carol-pw" not in r.output and "pbkdf2" not in r.output
    n = _one_new(ledger_url, 0, "user.add", "carol@lab", None, {"role": "admin", "projects": ["asr", "llm"]})
    text_now = users.read_text()
    assert text_now.startswith(head + bob) and (users.stat().st_mode & 0o777) == 0o640
    entries = load_auth_file(users)
    assert authenticate(entries, "carol@lab", "carol-pw").role == "admin"
    assert entries["carol@lab"].projects == ("asr", "llm")

    _ok(cli("users", "set-role", "bob", "lead", "--auth-file", users))
    n = _one_new(ledger_url, n, "user.role", "bob", {"role": "viewer", "projects": None}, {"role": "lead", "projects": None})
    assert users.read_text() == text_now.replace('[users.bob]\nrole = "viewer"', '[users.bob]\nrole = "lead"')
    assert authenticate(load_auth_file(users), "bob", "bob-pw").role == "lead"

    before_remove = users.read_text()
    _ok(cli("users", "remove", "alice", "--auth-file", users))
    n = _one_new(ledger_url, n, "user.remove", "alice", {"role": "lead", "projects": None}, None)
    after = users.read_text()
    alice = f'[users.alice]\nrole = "lead"\n{_hash_line(before_remove, "alice")}\n'
    assert alice in before_remove and after == before_remove.replace(alice, "")
    assert sorted(load_auth_file(users)) == ["bob", "carol@lab"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".users.toml.")]  # no temporary file left
    recorded = json.dumps([{k: v for k, v in r.items() if k != "at"} for r in _rows(ledger_url)])
    assert "hash" not in recorded and "pbkdf2" not in recorded and "-pw" not in recorded


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_users_changes_that_fail_change_nothing(cli, ledger_url, as_operator, tmp_path):
    from trainledger.app.serving.auth import make_entry

    users = tmp_path / "users.toml"
    users.write_text(make_entry("alice", "lead", "alice-pw", iterations=1000))
    original = users.read_text()
    for argv, inp in [(("users", "add", "alice", "--password-stdin"), "pw\n"),
                      (("users", "add", "dave", "--role", "root", "--password-stdin"), "pw\n"),
                      (("users", "add", "dave", "--password-stdin"), "\n"),
                      (("users", "add", "bad name", "--password-stdin"), "pw\n"),
                      (("users", "set-role", "zed", "lead"), None),
                      (("users", "set-role", "alice", "owner"), None),
                      (("users", "remove", "alice"), None)]:  # the only user
        r = cli(*argv, "--auth-file", users, input=inp)
        assert r.exit_code == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, argv
    assert users.read_text() == original and _rows(ledger_url) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_unreachable_ledger_leaves_the_users_file_alone(cli, tmp_path, as_operator):
    from trainledger.app.serving.auth import make_entry

    users = tmp_path / "users.toml"
    users.write_text(make_entry("alice", "lead", "alice-pw", iterations=1000))
    original = users.read_text()
    bad = "postgresql+psycopg://postgres@127.0.0.1:9/nothing-listens-here"
    r = cli("users", "set-role", "alice", "viewer", "--auth-file", users, "--db", bad, db=False)
    assert r.exit_code == 1 and users.read_text() == original
    assert [p.name for p in tmp_path.iterdir() if "users" in p.name] == ["users.toml"]  # no temporary file left


def test_secrets_are_never_recorded():
    assert audit.jsonable({"role": "lead", "password_hash": "x", "token": "t", "api_secret": "s"}) == {"role": "lead"}
    assert audit.change_text({"a": "1", "b": ["x"]}, {"a": "2", "b": ["x", "y"]}) == "a: 1 → 2, b: [x] → [x, y]"
    assert audit.change_text(None, {"a": "1"}) == "+ a=1" and audit.change_text({"a": None}, None) == "- a=—"


def test_a_session_bound_to_no_one_records_the_process_user(session, monkeypatch):
    from trainledger.store.settings import set_setting

    monkeypatch.setattr("getpass.getuser", lambda: "script-user")
    monkeypatch.setattr("socket.gethostname", lambda: "box")
    set_setting(session, "timezone", "Europe/Berlin")
    session.commit()
    (row,) = audit.entries(session)
    assert (row["actor"], row["origin"], row["client"], row["action"]) == ("script-user", "python", "box", "setting.set")


def test_docs_name_what_is_and_is_not_recorded():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "AUDIT.md").read_text()
    for word in ("budget.set", "offer.price", "fleet.idle_policy", "fx.set", "carbon.set", "setting.set",
                 "slurm_map.add", "invoice_map.set", "user.role", "not recorded", "superuser"):
        assert word in doc, word
