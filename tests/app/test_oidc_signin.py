"""OpenID Connect sign-in (issue 40): configuration, the claim mapping, sessions, and the code flow against a real
provider (panva/oidc-provider under node, tests/app/oidc_fixtures.py) over plain HTTP.

The browser walk (Chromium through the provider's login page) is tests/app/test_oidc_browser.py; forged tokens,
replays and open redirects are tests/hostile/test_oidc.py.
"""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from trainledger.app.serving import oidc, sessions
from trainledger.app.serving.auth import make_entry
from trainledger.app.serving.oidc import OidcConfigError, load_config, map_claims, parse_rules
from trainledger.cli.commands import app
from typer.testing import CliRunner

from tests.app.oidc_fixtures import (
    CLIENT_SECRET,
    MAPPING,
    make_jwks,
    provider,
    session_exists,
    session_rows,
    sign_in_http,
    write_config,
)
from tests.app.served import free_port, serve


def _config(tmp_path, text: str, mapping: str = MAPPING):
    (tmp_path / "roles.toml").write_text(mapping)
    (tmp_path / "secret").write_text("s3cret-value\n")
    path = tmp_path / "oidc.toml"
    path.write_text(text)
    return path


GOOD = 'issuer = "https://id.example.com/realms/ml"\nclient_id = "tl"\nclient_secret_file = "secret"\n' \
       'mapping_file = "roles.toml"\n'


# --- configuration -----------------------------------------------------------------------------------------------

def test_a_good_configuration_loads_with_its_defaults(tmp_path):
    s = load_config(_config(tmp_path, GOOD))
    assert (s.issuer, s.client_id, s.groups_claim, s.username_claim) == (
        "https://id.example.com/realms/ml", "tl", "groups", "preferred_username")
    assert s.algorithms == ("RS256", "ES256") and s.scopes == ("openid", "profile", "email")
    assert s.client_secret() == "s3cret-value" and "s3cret" not in repr(s)
    assert [r.role for r in s.rules] == ["admin", "lead", "viewer"]


@pytest.mark.parametrize("text, field", [
    ('client_id = "tl"\nclient_secret_file = "secret"\nmapping_file = "roles.toml"\n', "issuer"),
    ('issuer = "id.example.com"\n' + GOOD.split("\n", 1)[1], "issuer"),
    (GOOD.replace('client_id = "tl"\n', ""), "client_id"),
    (GOOD + 'client_secret = "inline"\n', "client_secret"),
    (GOOD + 'client_secret_env = "X"\n', "client_secret_file and client_secret_env"),
    (GOOD.replace('mapping_file = "roles.toml"\n', ""), "mapping_file"),
    (GOOD.replace("roles.toml", "absent.toml"), "mapping_file"),
    (GOOD + 'algorithms = ["HS256"]\n', "algorithms"),
    (GOOD + 'algorithms = ["none"]\n', "algorithms"),
    (GOOD + 'scopes = ["profile"]\n', "scopes"),
    (GOOD + 'redirect_uri = "javascript:alert(1)"\n', "redirect_uri"),
    (GOOD + 'colour = "red"\n', "unknown key 'colour'"),
    ("issuer = [", "not valid TOML"),
])
def test_a_bad_configuration_is_one_line_naming_the_field(tmp_path, text, field):
    with pytest.raises(OidcConfigError) as err:
        load_config(_config(tmp_path, text))
    message = str(err.value)
    assert field in message and "\n" not in message and "s3cret" not in message and "inline" not in message


@pytest.mark.parametrize("mapping, field", [
    ('[[map]]\ngroup = "x"\nrole = "owner"\n', "role"),
    ('[[map]]\nrole = "lead"\n', "group"),
    ('[[map]]\ngroup = "x"\nrole = "lead"\nprojects = []\n', "projects"),
    ('[[map]]\ngroup = "x"\nrole = "lead"\nprojects = "hand"\n', "projects"),
    ('[[map]]\ngroup = "x"\nrole = "lead"\nteam = true\n', "unknown key 'team'"),
    ('[map]\ngroup = "x"\n', "map"),
    ('[[rules]]\ngroup = "x"\n', "unknown key 'rules'"),
])
def test_a_bad_mapping_is_one_line_naming_the_rule(tmp_path, mapping, field):
    with pytest.raises(OidcConfigError) as err:
        load_config(_config(tmp_path, GOOD, mapping))
    assert field in str(err.value) and "\n" not in str(err.value)


def test_the_secret_comes_from_a_variable_and_is_never_in_a_message(tmp_path, monkeypatch):
    s = load_config(_config(tmp_path, GOOD.replace('client_secret_file = "secret"', 'client_secret_env = "TL_SECRET"')))
    monkeypatch.delenv("TL_SECRET", raising=False)
    with pytest.raises(OidcConfigError, match="TL_SECRET is empty or unset"):
        s.client_secret()
    monkeypatch.setenv("TL_SECRET", "from-the-env")
    assert s.client_secret() == "from-the-env"


def test_the_cli_checks_the_configuration_before_serving(tmp_path, sqlite_url, fake_popen, monkeypatch):
    monkeypatch.delenv("TRAINLEDGER_AUTH_FILE", raising=False)
    monkeypatch.delenv("TRAINLEDGER_OIDC_CONFIG", raising=False)
    bad = _config(tmp_path, GOOD + 'client_secret = "leaked"\n')
    r = CliRunner().invoke(app, ["dashboard", "--host", "0.0.0.0", "--db", sqlite_url, "--oidc-config", str(bad)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "client_secret" in r.stderr
    assert "leaked" not in r.output + r.stderr and fake_popen == []
    good = _config(tmp_path, GOOD)
    r = CliRunner().invoke(app, ["dashboard", "--host", "0.0.0.0", "--db", sqlite_url, "--oidc-config", str(good)])
    assert r.exit_code == 0, r.output
    (argv, env, _), = fake_popen
    assert env["TRAINLEDGER_OIDC_CONFIG"] == str(good.resolve()) and "TRAINLEDGER_AUTH_FILE" not in env
    assert "s3cret-value" not in " ".join(argv) + r.output + " ".join(env.values())
    assert "sign-in required (OpenID Connect)" in r.stderr


# --- claims → role -----------------------------------------------------------------------------------------------

RULES = parse_rules([{"group": "admins", "role": "admin"}, {"group": "leads-a", "role": "lead", "projects": ["a"]},
                     {"group": "leads-b", "role": "lead", "projects": ["b", "c"]},
                     {"group": "viewers-b", "role": "viewer", "projects": ["b"]}, {"group": "all", "role": "viewer"}],
                    "test")


@pytest.mark.parametrize("groups, role, projects", [
    (["admins"], "admin", None),
    (["leads-a"], "lead", ("a",)),
    (["leads-a", "leads-b"], "lead", ("a", "b", "c")),  # union of projects
    (["viewers-b", "leads-a"], "lead", ("a", "b")),  # highest role
    (["leads-a", "all"], "lead", None),  # a team-scoped rule wins
    (["admins", "leads-a"], "admin", None),
    ("leads-a", "lead", ("a",)),  # a claim that is one string
])
def test_several_rules_give_the_highest_role_and_the_union_of_projects(groups, role, projects):
    settings = oidc.OidcSettings("https://i", "c", None, None, RULES)
    assert map_claims({"groups": groups}, settings) == oidc.Mapped(role, projects)


@pytest.mark.parametrize("claims", [{}, {"groups": []}, {"groups": ["marketing"]}, {"groups": [["admins"]]},
                                    {"groups": {"admins": True}}, {"roles": ["admins"]}])
def test_no_matching_rule_maps_to_nothing(claims):
    assert map_claims(claims, oidc.OidcSettings("https://i", "c", None, None, RULES)) is None


def test_the_claim_name_is_configurable_and_may_be_nested():
    settings = oidc.OidcSettings("https://i", "c", None, None, RULES, groups_claim="realm_access.roles")
    assert map_claims({"realm_access": {"roles": ["admins"]}}, settings) == oidc.Mapped("admin", None)
    assert map_claims({"groups": ["admins"]}, settings) is None


# --- sessions ----------------------------------------------------------------------------------------------------

def test_an_oidc_session_keeps_its_mapped_role_and_never_stands_in_for_a_file_user(sqlite_url, tmp_path):
    from trainledger.app.serving.auth import load_auth_file

    (tmp_path / "users.toml").write_text(make_entry("lena", "admin", "pw", iterations=1000))
    users = load_auth_file(tmp_path / "users.toml")
    token, _ = sessions.create_oidc(sqlite_url, "lena", "lead", ("hand",), "fp-1")
    assert sessions.resolve(sqlite_url, token, users, "fp-1") == sessions.SessionUser("lena", "lead", ("hand",), "oidc")
    assert sessions.lookup(sqlite_url, token, users) is None  # not the users file's lena (an admin)
    assert sessions.resolve(sqlite_url, token, users, None) is None  # OIDC switched off: the session ended
    assert sessions.resolve(sqlite_url, token, users, "fp-1") is None  # ... and its row is gone
    token, _ = sessions.create_oidc(sqlite_url, "lena", "viewer", None, "fp-1")
    assert sessions.resolve(sqlite_url, token, {}, "fp-2") is None  # the mapping changed: signed out
    file_token, _ = sessions.create(sqlite_url, users["lena"])
    assert sessions.resolve(sqlite_url, file_token, users, "fp-1").source == "file"
    token, expires = sessions.create_oidc(sqlite_url, "ada", "admin", None, "fp-1")
    assert sessions.resolve(sqlite_url, token, {}, "fp-1", now=expires + timedelta(seconds=1)) is None


# --- the code flow against the real provider ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A dashboard with both a users file and OIDC, and the provider it trusts."""
    from trainledger.store.db import make_engine

    tmp = tmp_path_factory.mktemp("oidc")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    make_engine(url).dispose()
    (tmp / "users.toml").write_text(make_entry("alice", "lead", "alice-pw", iterations=1000))
    port = free_port()
    with provider(tmp, port) as prov:
        config = write_config(tmp, prov.issuer)
        with serve(tmp, url, "--auth-file", str(tmp / "users.toml"), "--oidc-config", str(config), port=port) as served:
            yield served, prov


def _http():
    import requests

    return requests.Session()


def test_the_sign_in_page_offers_both_ways(site):
    served, _ = site
    page = _http().get(f"{served.base}/_trainledger/signin?next=/runs", timeout=30)
    assert page.status_code == 200
    assert 'name="password"' in page.text and "Sign in with Test SSO" in page.text
    assert 'href="/_trainledger/oidc/login?next=%2Fruns"' in page.text


def test_a_lead_signs_in_with_its_mapped_role_and_project(site):
    served, prov = site
    http = _http()
    callback = sign_in_http(http, served.base, "lena", "/runs?month=2026-11")
    query = parse_qs(urlsplit(callback).query)
    assert query["iss"] == [prov.issuer] and set(query) == {"code", "state", "iss"}
    done = http.get(callback, allow_redirects=False, timeout=30)
    assert done.status_code == 303 and done.headers["location"] == "/runs?month=2026-11"
    cookie = done.headers["set-cookie"]
    assert re.search(rf"trainledger_session_{served.port}=[^;]+; HttpOnly; Max-Age=43200; Path=/; SameSite=lax",
                     cookie), cookie
    assert ("lena", "oidc", "lead", '["hand"]') in session_rows(served.url)
    page = http.get(f"{served.base}/runs", headers={"Accept": "text/html"}, allow_redirects=False, timeout=30)
    assert page.status_code == 200  # signed in: the app, not the sign-in form
    log = served.log_text()
    assert "signed in through OIDC: 'lena' (lead; hand)" in log
    for secret in (CLIENT_SECRET, query["code"][0], http.cookies[f"trainledger_session_{served.port}"]):
        assert secret not in log


def test_a_user_without_a_mapped_group_is_refused_and_nothing_is_stored(site):
    served, _ = site
    before = session_rows(served.url)
    http = _http()
    done = http.get(sign_in_http(http, served.base, "nora"), allow_redirects=False, timeout=30)
    assert done.status_code == 403 and "your account has no trainledger role" in done.text.lower()
    assert "trainledger_session" not in done.headers.get("set-cookie", "")
    assert session_rows(served.url) == before
    assert "'nora' matches no rule" in served.log_text()


def test_sign_out_ends_the_session_and_goes_through_the_provider(site):
    served, prov = site
    http = _http()
    http.get(sign_in_http(http, served.base, "victor"), allow_redirects=False, timeout=30)
    token = http.cookies[f"trainledger_session_{served.port}"]
    assert ("victor", "oidc", "viewer", None) in session_rows(served.url)
    forged = http.get(f"{served.base}/_trainledger/signout?t={'0' * 32}", allow_redirects=False, timeout=30)
    assert forged.status_code == 303 and forged.headers["location"] == "/"  # not our link: nothing changes
    assert ("victor", "oidc", "viewer", None) in session_rows(served.url)
    from trainledger.app.serving.signin import signout_check

    out = http.get(f"{served.base}/_trainledger/signout?t={signout_check(token)}", allow_redirects=False, timeout=30)
    assert out.status_code == 303
    target = urlsplit(out.headers["location"])
    query = parse_qs(target.query)
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{prov.issuer}/session/end"
    assert query["post_logout_redirect_uri"] == [f"{served.base}/_trainledger/signedout"]
    assert query["client_id"] == ["trainledger-dashboard"] and query["id_token_hint"][0].count(".") == 2
    assert not session_exists(served.url, token)
    old = _http()
    old.cookies.set(f"trainledger_session_{served.port}", token)
    again = old.get(f"{served.base}/overview", headers={"Accept": "text/html"}, allow_redirects=False, timeout=30)
    assert again.status_code == 303 and again.headers["location"].startswith("/_trainledger/signin?next=")


def test_a_rotated_provider_key_is_fetched_again(tmp_path):
    """The provider restarts with a new signing key (a new kid): the dashboard, holding the old JWKS, fetches the
    keys again on the unknown kid and signs the user in."""
    from trainledger.store.db import make_engine

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    make_engine(url).dispose()
    port, provider_port = free_port(), free_port()
    keys = tmp_path / "keys.json"
    make_jwks(keys, "old")
    with provider(tmp_path, port, port=provider_port, jwks_file=keys) as prov:
        config = write_config(tmp_path, prov.issuer)
        with serve(tmp_path, url, "--oidc-config", str(config), port=port) as served:
            http = _http()
            assert http.get(sign_in_http(http, served.base, "ada"), allow_redirects=False, timeout=30).status_code == 303
            prov_stop = prov.proc
            from tests.app.served import stop

            stop(prov_stop)
            make_jwks(keys, "new")
            with provider(tmp_path, port, port=provider_port, jwks_file=keys):
                http = _http()
                done = http.get(sign_in_http(http, served.base, "lena"), allow_redirects=False, timeout=30)
                assert done.status_code == 303, done.text[-500:]
            assert [r[0] for r in session_rows(url)] == ["ada", "lena"]
