"""Hostile OpenID Connect sign-ins (issue 40): forged ID tokens, replays, foreign states and open redirects.

Forged tokens are built with joserfc and fed through ``trainledger.app.serving.oidc.validate_id_token``, the function
the callback runs on the token endpoint's answer, with the keys the real provider publishes (discovery and JWKS
over HTTP, tests/app/oidc_fixtures.py). The flows (a callback replayed, taken to another browser, with a state
that is not ours, an open redirect in ``next``) run against a real dashboard and the real provider over HTTP;
every refusal must show no dashboard, set no session cookie and write no session row.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from trainledger.app.serving.oidc import IdTokenError, Provider, validate_id_token

from tests.app.oidc_fixtures import CLIENT_ID, login_rows, provider, session_rows, sign_in_http, write_config
from tests.app.served import free_port, serve

pytestmark = pytest.mark.slow
NONCE = "n-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from trainledger.store.db import make_engine

    tmp = tmp_path_factory.mktemp("oidc-hostile")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    make_engine(url).dispose()
    port = free_port()
    with provider(tmp, port) as prov:
        with serve(tmp, url, "--oidc-config", str(write_config(tmp, prov.issuer)), port=port) as served:
            yield served, prov


class Keys:
    """The real provider's JWKS, as the callback fetches it; counts the fetches."""

    def __init__(self, issuer: str):
        self.provider = Provider(issuer)
        self.fetches = 0

    def __call__(self, refresh: bool = False):
        self.fetches += 1 if (refresh or self.fetches == 0) else 0
        return self.provider.keys(refresh)


def _claims(issuer: str, **changes):
    now = int(time.time())
    claims = {"iss": issuer, "aud": CLIENT_ID, "sub": "ada", "preferred_username": "ada", "groups": ["ml-admins"],
              "iat": now, "exp": now + 300, "nonce": NONCE}
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


def _sign(claims: dict, key, alg: str = "RS256", **header) -> str:
    from joserfc import jwt

    return jwt.encode({"alg": alg, "kid": key.kid, **header}, claims, key, algorithms=[alg])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _validate(prov, token: str, keys=None, **kw):
    keys = keys or Keys(prov.issuer)
    args = dict(keys=keys, algorithms=["RS256", "ES256"], issuer=prov.issuer, client_id=CLIENT_ID, nonce=NONCE)
    args.update(kw)
    return validate_id_token(token, **args)


@pytest.fixture(scope="module")
def real_key(site):
    from joserfc.jwk import RSAKey

    _, prov = site
    return RSAKey.import_key(prov.jwks["keys"][0])


def test_a_well_formed_token_from_the_provider_key_passes(site, real_key):
    _, prov = site
    assert _validate(prov, _sign(_claims(prov.issuer), real_key))["sub"] == "ada"


def _forgeries(issuer: str, real_key):
    from joserfc.jwk import ECKey, RSAKey

    wrong = RSAKey.generate_key(2048, parameters={"kid": real_key.kid}, private=True)
    wrong_ec = ECKey.generate_key("P-256", parameters={"kid": real_key.kid}, private=True)
    pem = real_key.as_pem(private=False)
    header = {"alg": "HS256", "kid": real_key.kid, "typ": "JWT"}
    signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(_claims(issuer)).encode())}"
    hs256 = f"{signing}.{_b64(hmac.new(pem, signing.encode(), hashlib.sha256).digest())}"
    none = f"{_b64(json.dumps({'alg': 'none', 'kid': real_key.kid}).encode())}.{_b64(json.dumps(_claims(issuer)).encode())}."
    good = _sign(_claims(issuer, groups=["ml-viewers"]), real_key)
    h, p, s = good.split(".")
    tampered = ".".join([h, _b64(json.dumps(_claims(issuer, groups=["ml-admins"])).encode()), s])
    now = int(time.time())
    return {
        "signed with a wrong key": (_sign(_claims(issuer), wrong), "signature"),
        "signed with a wrong EC key": (_sign(_claims(issuer), wrong_ec, "ES256"), "signature"),
        "alg none": (none, "algorithm 'none'"),
        "HS256 keyed with the public key": (hs256, "algorithm 'HS256'"),
        "an embedded jwk of the attacker": (_sign(_claims(issuer), wrong, jwk=wrong.as_dict(private=False)),
                                            "signature"),
        "a kid the provider never had": (_sign(_claims(issuer), RSAKey.generate_key(
            2048, parameters={"kid": "attacker"}, private=True)), "no key with kid 'attacker'"),
        "wrong audience": (_sign(_claims(issuer, aud="another-client"), real_key), "aud"),
        "several audiences, no azp": (_sign(_claims(issuer, aud=[CLIENT_ID, "other"]), real_key), "azp"),
        "azp of another client": (_sign(_claims(issuer, azp="other"), real_key), "azp"),
        "wrong issuer": (_sign(_claims("https://evil.example"), real_key), "iss"),
        "expired": (_sign(_claims(issuer, exp=now - 120, iat=now - 400), real_key), "expired"),
        "no exp": (_sign(_claims(issuer, exp=None), real_key), "exp"),
        "issued in the future": (_sign(_claims(issuer, iat=now + 3600, exp=now + 7200), real_key), "iat"),
        "issued an hour ago": (_sign(_claims(issuer, iat=now - 3600), real_key), "iat"),
        "not valid yet": (_sign(_claims(issuer, nbf=now + 3600), real_key), "nbf"),
        "another sign-in's nonce (a replayed token)": (_sign(_claims(issuer, nonce="n-other"), real_key), "nonce"),
        "no nonce": (_sign(_claims(issuer, nonce=None), real_key), "nonce"),
        "no sub": (_sign(_claims(issuer, sub=None), real_key), "sub"),
        "a tampered group claim": (tampered, "signature"),
        "not a JWT": ("not.a.jwt", "header"),
        "an encrypted token (JWE)": ("a.b.c.d.e", "not a signed JWT"),
    }


def test_every_forged_token_is_refused(site, real_key):
    _, prov = site
    refused = {}
    for name, (token, why) in _forgeries(prov.issuer, real_key).items():
        with pytest.raises(IdTokenError) as err:
            _validate(prov, token)
        refused[name] = str(err.value)
        assert why in str(err.value), (name, str(err.value))
    assert len(refused) == 21


def test_an_unknown_kid_fetches_the_keys_once_more_then_refuses(site):
    from joserfc.jwk import RSAKey

    _, prov = site
    keys = Keys(prov.issuer)
    stranger = RSAKey.generate_key(2048, parameters={"kid": "rotated-away"}, private=True)
    with pytest.raises(IdTokenError, match="no key with kid"):
        _validate(prov, _sign(_claims(prov.issuer), stranger), keys=keys)
    assert keys.fetches == 2  # the cached keys, then once more


def test_hs256_is_refused_even_where_the_configuration_would_list_it(site, real_key):
    """The configuration refuses symmetric algorithms (test_oidc_signin); were one ever passed in, the provider's
    JWKS holds no HMAC key, so the public key never becomes an HMAC secret."""
    _, prov = site
    pem = real_key.as_pem(private=False)
    header = _b64(json.dumps({"alg": "HS256", "kid": real_key.kid}).encode())
    signing = f"{header}.{_b64(json.dumps(_claims(prov.issuer)).encode())}"
    token = f"{signing}.{_b64(hmac.new(pem, signing.encode(), hashlib.sha256).digest())}"
    with pytest.raises(IdTokenError):
        _validate(prov, token, algorithms=["HS256", "RS256"])


# --- the flows over HTTP -----------------------------------------------------------------------------------------

def _http():
    import requests

    return requests.Session()


def _refused(served, response, before) -> None:
    assert response.status_code in (400, 403), (response.status_code, response.text[:300])
    assert "trainledger_session" not in response.headers.get("set-cookie", "")
    assert "stApp" not in response.text and "Sign-in refused" in response.text
    assert session_rows(served.url) == before


def test_a_callback_works_once(site):
    served, _ = site
    http = _http()
    callback = sign_in_http(http, served.base, "victor")
    assert http.get(callback, allow_redirects=False, timeout=30).status_code == 303
    before = session_rows(served.url)
    state = parse_qs(urlsplit(callback).query)["state"][0]
    http.cookies.set("trainledger_oidc_state_" + str(served.port), state, path="/_trainledger/oidc/callback")
    _refused(served, http.get(callback, allow_redirects=False, timeout=30), before)


def test_a_callback_taken_to_another_browser_is_refused_and_the_sign_in_stays_its_own(site):
    served, _ = site
    mine, thief = _http(), _http()
    callback = sign_in_http(mine, served.base, "lena")
    before = session_rows(served.url)
    _refused(served, thief.get(callback, allow_redirects=False, timeout=30), before)
    # the thief's state cookie for another sign-in in flight does not make it theirs either
    sign_in_http(thief, served.base, "nora")
    _refused(served, thief.get(callback, allow_redirects=False, timeout=30), before)
    assert mine.get(callback, allow_redirects=False, timeout=30).status_code == 303


def test_a_state_that_is_not_ours_is_refused(site):
    served, _ = site
    http = _http()
    callback = sign_in_http(http, served.base, "ada")
    before = session_rows(served.url)
    parts = urlsplit(callback)
    query = parse_qs(parts.query)
    for state in ("forged-state", query["state"][0][:-1] + "x", ""):
        forged = f"{served.base}{parts.path}?code={query['code'][0]}&state={quote(state)}"
        _refused(served, http.get(forged, allow_redirects=False, timeout=30), before)
    # a cookie and a state that agree but were never started here
    http.cookies.set(f"trainledger_oidc_state_{served.port}", "made-up", path="/_trainledger/oidc/callback")
    forged = f"{served.base}{parts.path}?code={query['code'][0]}&state=made-up"
    _refused(served, http.get(forged, allow_redirects=False, timeout=30), before)


def test_a_provider_error_or_another_issuer_in_the_callback_is_refused(site):
    served, _ = site
    for extra in ("error=access_denied", "iss=https%3A%2F%2Fevil.example"):
        http = _http()
        callback = sign_in_http(http, served.base, "ada")
        before = session_rows(served.url)
        base, query = callback.split("?", 1)
        query = "&".join(p for p in query.split("&") if not p.startswith("iss=")) + "&" + extra
        _refused(served, http.get(f"{base}?{query}", allow_redirects=False, timeout=30), before)


@pytest.mark.parametrize("next_path", [
    "//evil.example", "https://evil.example", "/\\evil.example", "\\\\evil.example", "%2F%2Fevil.example",
    "/%5Cevil.example", "%5C%5Cevil.example", "http:evil.example", "/\t/evil.example", "///evil.example",
    "javascript:alert(1)", " //evil.example", "/%09/evil.example", "%252F%252Fevil.example",
])
def test_an_open_redirect_in_next_goes_home(site, next_path):
    served, _ = site
    http = _http()
    start = http.get(f"{served.base}/_trainledger/oidc/login?next={next_path}", allow_redirects=False, timeout=30)
    assert start.status_code == 303 and start.headers["location"].startswith(site[1].issuer)
    http = _http()
    done = http.get(sign_in_http(http, served.base, "victor", next_path), allow_redirects=False, timeout=30)
    assert done.status_code == 303
    location = done.headers["location"]
    assert location.startswith("/") and not location.startswith(("//", "/\\")) and "\t" not in location
    assert "evil" not in urlsplit(location).netloc and urlsplit(location).scheme == ""
    assert location in ("/", f"/{next_path.lstrip('/')}") or location.startswith("/%")


def test_sign_ins_in_flight_are_bounded_and_used_once(site):
    served, _ = site
    before = login_rows(served.url)
    http = _http()
    callback = sign_in_http(http, served.base, "victor")
    assert login_rows(served.url) == before + 1
    http.get(callback, allow_redirects=False, timeout=30)
    assert login_rows(served.url) == before


# --- forged tokens through the real callback: a provider we control answers the token request ---------------------

class Rogue:
    """A small OpenID provider on a loopback port whose token endpoint answers what the test says (:attr:`forge`).

    Its discovery lists ``none`` and ``HS256`` too: the dashboard must still allow only its configured asymmetric
    algorithms. It checks the PKCE verifier and the client's credentials as a real provider would."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from joserfc.jwk import RSAKey

        self.key = RSAKey.generate_key(2048, parameters={"kid": "r1", "use": "sig", "alg": "RS256"}, private=True)
        self.flows: dict[str, dict] = {}  # code → the authorization request's parameters
        self.forge = None  # (claims, key) → id_token
        self.pkce_ok: list[bool] = []
        rogue = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, data, status=200):
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                parts = urlsplit(self.path)
                if parts.path == "/.well-known/openid-configuration":
                    return self._json({"issuer": rogue.issuer, "authorization_endpoint": f"{rogue.issuer}/auth",
                                       "token_endpoint": f"{rogue.issuer}/token", "jwks_uri": f"{rogue.issuer}/jwks",
                                       "id_token_signing_alg_values_supported": ["RS256", "ES256", "HS256", "none"]})
                if parts.path == "/jwks":
                    return self._json({"keys": [rogue.key.as_dict(private=False)]})
                if parts.path == "/auth":
                    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
                    code = f"code-{len(rogue.flows)}"
                    rogue.flows[code] = q
                    self.send_response(303)
                    self.send_header("Location", f"{q['redirect_uri']}?code={code}&state={quote(q['state'])}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return self._json({"error": "not_found"}, 404)

            def do_POST(self):
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
                flow = rogue.flows.get(form.get("code"), {})
                verifier = form.get("code_verifier", "")
                challenge = _b64(hashlib.sha256(verifier.encode()).digest())
                rogue.pkce_ok.append(flow.get("code_challenge") == challenge and flow.get("code_challenge_method") == "S256")
                expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{rogue.secret}".encode()).decode()
                if self.headers.get("Authorization") != expected or not flow:
                    return self._json({"error": "invalid_client"}, 401)
                return self._json({"access_token": "at-" + form["code"], "token_type": "Bearer", "expires_in": 300,
                                   "id_token": rogue.forge(rogue, flow)})

        from tests.app.oidc_fixtures import CLIENT_SECRET

        self.secret = CLIENT_SECRET
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def rogue_site(tmp_path_factory):
    from trainledger.store.db import make_engine

    tmp = tmp_path_factory.mktemp("oidc-rogue")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    make_engine(url).dispose()
    rogue = Rogue()
    try:
        with serve(tmp, url, "--oidc-config", str(write_config(tmp, rogue.issuer))) as served:
            yield served, rogue
    finally:
        rogue.close()


def _rogue_claims(rogue, flow, **changes):
    now = int(time.time())
    claims = {"iss": rogue.issuer, "aud": CLIENT_ID, "sub": "mallory", "preferred_username": "mallory",
              "groups": ["ml-admins"], "iat": now, "exp": now + 300, "nonce": flow["nonce"]}
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


def _hs256_with_public_key(rogue, flow):
    pem = rogue.key.as_pem(private=False)
    signing = (f"{_b64(json.dumps({'alg': 'HS256', 'kid': 'r1'}).encode())}."
               f"{_b64(json.dumps(_rogue_claims(rogue, flow)).encode())}")
    return f"{signing}.{_b64(hmac.new(pem, signing.encode(), hashlib.sha256).digest())}"


def _tampered(rogue, flow):
    h, _, s = _sign(_rogue_claims(rogue, flow, groups=["ml-viewers"]), rogue.key).split(".")
    return ".".join([h, _b64(json.dumps(_rogue_claims(rogue, flow)).encode()), s])


def _stranger(rogue, flow):
    from joserfc.jwk import RSAKey

    return _sign(_rogue_claims(rogue, flow), RSAKey.generate_key(2048, parameters={"kid": "r1"}, private=True))


def _earlier_nonce(rogue, flow) -> str:
    """The nonce of an earlier sign-in (a token replayed from it), or one this dashboard never sent."""
    return next((f["nonce"] for f in rogue.flows.values() if f["nonce"] != flow["nonce"]), "n-from-another-sign-in")


FORGE = {
    "signed with a wrong key": _stranger,
    "alg none": lambda r, f: (f"{_b64(json.dumps({'alg': 'none'}).encode())}."
                              f"{_b64(json.dumps(_rogue_claims(r, f)).encode())}."),
    "HS256 keyed with the public key": _hs256_with_public_key,
    "wrong audience": lambda r, f: _sign(_rogue_claims(r, f, aud="another-client"), r.key),
    "wrong issuer": lambda r, f: _sign(_rogue_claims(r, f, iss="https://evil.example"), r.key),
    "expired": lambda r, f: _sign(_rogue_claims(r, f, exp=int(time.time()) - 120, iat=int(time.time()) - 400), r.key),
    "a replayed nonce": lambda r, f: _sign(_rogue_claims(r, f, nonce=_earlier_nonce(r, f)), r.key),
    "a tampered group claim": _tampered,
}


@pytest.mark.parametrize("name", ["genuine", *FORGE])
def test_a_forged_token_from_the_token_endpoint_signs_nobody_in(rogue_site, name):
    served, rogue = rogue_site
    rogue.forge = (lambda r, f: _sign(_rogue_claims(r, f), r.key)) if name == "genuine" else FORGE[name]
    before, logged = session_rows(served.url), served.log_text().count("ID token refused")
    http = _http()
    start = http.get(f"{served.base}/_trainledger/oidc/login", params={"next": "/runs"}, allow_redirects=False,
                     timeout=30)
    callback = http.get(start.headers["location"], allow_redirects=False, timeout=30).headers["location"]
    done = http.get(callback, allow_redirects=False, timeout=30)
    assert rogue.pkce_ok[-1]  # the dashboard sent the verifier of its S256 challenge
    if name == "genuine":  # the harness works: a well-formed token from the provider's key signs in
        assert done.status_code == 303 and done.headers["location"] == "/runs"
        assert ("mallory", "oidc", "admin", None) in session_rows(served.url)
        return
    _refused(served, done, before)
    assert served.log_text().count("ID token refused") == logged + 1
