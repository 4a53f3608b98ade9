"""A real OpenID provider for the OIDC sign-in tests, and the dashboard configured against it.

:func:`provider` starts panva/oidc-provider (tests/oidc/provider.mjs, installed by tests/setup.sh with
``npm ci --prefix tests/oidc``; nothing is downloaded here) under node on a free loopback port, with its signing
keys in a private JWKS file, and waits by polling its discovery document. The test users:

=========  ==========================  =====================================
login      groups                      mapped (:data:`MAPPING`)
=========  ==========================  =====================================
ada        ml-admins, ml-leads-hand    admin, every project (team rule wins)
lena       ml-leads-hand               lead, project ``hand`` only
victor     ml-viewers                  viewer, every project
nora       marketing                   no rule: refused
=========  ==========================  =====================================

:func:`sign_in_http` walks the code flow over plain HTTP (``requests``: the dashboard's login route, the
provider's login form, the callback), for tests that need no browser.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
PROVIDER_DIR = REPO / "tests" / "oidc"
CLIENT_ID = "trainledger-dashboard"
CLIENT_SECRET = "test-client-secret-0123456789abcdef"
PASSWORD = "provider-pw"
USERS = {
    "ada": ["ml-admins", "ml-leads-hand"],
    "lena": ["ml-leads-hand"],
    "victor": ["ml-viewers"],
    "nora": ["marketing"],
}
MAPPING = """\
[[map]]
group = "ml-admins"
role = "admin"

[[map]]
group = "ml-leads-hand"
role = "lead"
projects = ["hand"]

[[map]]
group = "ml-viewers"
role = "viewer"
"""


def need_provider() -> None:
    if shutil.which("node") is None or not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        message = "node or tests/oidc/node_modules is missing: tests/setup.sh runs `npm ci --prefix tests/oidc`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def make_jwks(path: Path, *kids: str, alg: str = "RS256") -> dict:
    """A private JWKS file with a new key per kid (the first signs); returns the private JWKS."""
    from joserfc.jwk import ECKey, RSAKey

    keys = []
    for kid in kids:
        params = {"kid": kid, "use": "sig", "alg": alg}
        key = (RSAKey.generate_key(2048, parameters=params, private=True) if alg.startswith(("RS", "PS"))
               else ECKey.generate_key("P-256", parameters=params, private=True))
        keys.append(key.as_dict(private=True))
    jwks = {"keys": keys}
    path.write_text(json.dumps(jwks))
    return jwks


@dataclass
class Provider:
    issuer: str
    port: int
    proc: subprocess.Popen
    log: Path
    jwks: dict  # private: the tests sign forged tokens with other keys, never these (except to tamper)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _wait(issuer: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the OIDC provider exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{issuer}/.well-known/openid-configuration", timeout=2) as r:
                if json.loads(r.read()).get("issuer") == issuer:
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    pytest.fail(f"the OIDC provider did not answer within {timeout_s} s:\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def provider(tmp: Path, dashboard_port: int, *, port: Optional[int] = None, jwks_file: Optional[Path] = None,
             id_token_ttl: int = 600) -> Iterator[Provider]:
    """oidc-provider on 127.0.0.1:``port`` with a confidential client whose redirect and post-logout URIs are the
    dashboard's on ``dashboard_port``; keys from ``jwks_file`` (default: a new one, kid ``k1``)."""
    from tests.app.served import free_port, stop

    need_provider()
    port = port or free_port()
    issuer = f"http://127.0.0.1:{port}"
    if jwks_file is None:
        jwks_file = tmp / "provider-keys.json"
        make_jwks(jwks_file, "k1")
    dash = f"http://127.0.0.1:{dashboard_port}"
    config = {"port": port, "issuer": issuer, "jwks_file": str(jwks_file), "id_token_ttl": id_token_ttl,
              "clients": [{"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "client_name": "trainledger",
                           "redirect_uris": [f"{dash}/_trainledger/oidc/callback"],
                           "post_logout_redirect_uris": [f"{dash}/_trainledger/signedout"],
                           "grant_types": ["authorization_code"], "response_types": ["code"],
                           "token_endpoint_auth_method": "client_secret_basic"}],
              "users": {login: {"password": PASSWORD, "claims": {"groups": groups, "email": f"{login}@example.com"}}
                        for login, groups in USERS.items()}}
    config_file = tmp / f"provider-{port}.json"
    config_file.write_text(json.dumps(config))
    log = tmp / f"provider-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["node", str(PROVIDER_DIR / "provider.mjs"), str(config_file)], stdout=out,
                                stderr=subprocess.STDOUT, cwd=PROVIDER_DIR, start_new_session=True)
    try:
        _wait(issuer, proc, log)
        yield Provider(issuer, port, proc, log, json.loads(jwks_file.read_text()))
    finally:
        stop(proc)


def write_config(tmp: Path, issuer: str, *, mapping: str = MAPPING, **extra: str) -> Path:
    """oidc.toml (secret in a file, mapping in oidc-roles.toml) for the provider at ``issuer``."""
    (tmp / "oidc-secret").write_text(CLIENT_SECRET + "\n")
    (tmp / "oidc-roles.toml").write_text(mapping)
    lines = [f'issuer = "{issuer}"', f'client_id = "{CLIENT_ID}"', 'client_secret_file = "oidc-secret"',
             'mapping_file = "oidc-roles.toml"', 'scopes = ["openid", "profile", "email", "groups"]',
             'label = "Test SSO"', *(f'{k} = "{v}"' for k, v in extra.items())]
    path = tmp / "oidc.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


# --- the code flow over plain HTTP ------------------------------------------------------------------------------

def provider_login(http, response, login: str, password: str = PASSWORD):
    """Fill the provider's login form in ``response`` (its page) and follow the redirects; the last response."""
    action = re.search(r'<form method="post" action="([^"]+)"', response.text)
    assert action, response.text[:2000]
    url = response.url.split("/interaction/")[0] + action.group(1)
    return http.post(url, data={"login": login, "password": password}, allow_redirects=False, timeout=30)


def follow(http, response, stop_at: str = "/_trainledger/oidc/callback"):
    """Follow redirects until the next one would reach ``stop_at`` (returned, not requested) or a page."""
    while response.is_redirect:
        location = response.headers["location"]
        if location.startswith("/"):
            location = re.match(r"^https?://[^/]+", response.url).group(0) + location
        if stop_at in location:
            return location
        response = http.get(location, allow_redirects=False, timeout=30)
    return response


def sign_in_http(http, base: str, login: str, next_path: str = "/overview"):
    """Start at the dashboard, sign in at the provider; returns the callback URL the provider sent the browser to
    (not yet requested: a test may request it, twice, or from another client)."""
    start = http.get(f"{base}/_trainledger/oidc/login", params={"next": next_path}, allow_redirects=False, timeout=30)
    assert start.status_code == 303, start.text[:500]
    page = follow(http, start)
    assert not isinstance(page, str) and "Sign in to the test provider" in page.text, getattr(page, "text", page)
    after = provider_login(http, page, login)
    callback = follow(http, after)
    assert isinstance(callback, str), getattr(callback, "text", "")[:2000]
    return callback


def session_rows(url: str) -> list[tuple]:
    """(user, source, role, projects) of every dashboard session in the ledger."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(text(
                "select user_name, source, role, projects from dashboard_session order by user_name"))]
    finally:
        engine.dispose()


def login_rows(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return c.execute(text("select count(*) from oidc_login")).scalar_one()
    finally:
        engine.dispose()


def session_exists(url: str, token: str) -> bool:
    """Whether the ledger holds the session of the cookie value ``token`` (the row is keyed by its SHA-256)."""
    import hashlib

    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return c.execute(text("select count(*) from dashboard_session where token_hash = :h"),
                             {"h": hashlib.sha256(token.encode("utf-8")).hexdigest()}).scalar_one() == 1
    finally:
        engine.dispose()
