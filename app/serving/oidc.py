"""OpenID Connect sign-in: authorization code + PKCE (S256), state and nonce, full ID-token validation (SPEC §15).

``trainledger dashboard --oidc-config oidc.toml`` (alone, or beside ``--auth-file``) signs browsers in through any
standard OpenID provider::

    issuer = "https://login.example.com/realms/ml"    # discovery: ISSUER/.well-known/openid-configuration
    client_id = "trainledger"
    client_secret_file = "/etc/trainledger/oidc-secret"   # or client_secret_env = "TRAINLEDGER_OIDC_SECRET"
    mapping_file = "oidc-roles.toml"                  # relative to this file; or [[map]] tables right here
    # optional:
    groups_claim = "groups"                           # the ID-token claim the mapping reads (a list or a string)
    username_claim = "preferred_username"             # the name shown and audited (else "sub")
    scopes = ["openid", "profile", "email", "groups"]
    algorithms = ["RS256", "ES256"]                   # asymmetric only; kept where the provider lists them too
    redirect_uri = "https://dash.example.com/_trainledger/oidc/callback"   # default: from the request's host
    label = "Company SSO"                             # the sign-in button says "Sign in with Company SSO"

The mapping file maps claim values to trainledger roles and project scopes::

    [[map]]
    group = "ml-admins"
    role = "admin"                 # admin | lead | viewer
    [[map]]
    group = "ml-leads"
    role = "lead"
    projects = ["llama-ft"]        # left out: every project (team scope)

A user matching several rules gets the highest role and the union of their projects; a rule without projects
(team scope) wins over scoped ones. A user matching none is refused ("your account has no trainledger role") and
nothing is stored.

The ID token is checked before anything is stored: its signature against the provider's JWKS (fetched again once
when the token names an unknown ``kid``: key rotation), only asymmetric algorithms the provider lists and the
configuration allows (never ``none``, never HS256: an HMAC keyed with a public key would verify), ``iss``,
``aud`` (and ``azp`` when there are several audiences), ``exp``/``iat``/``nbf`` with :data:`LEEWAY_S` of leeway,
``nonce``, ``sub``, and ``at_hash`` when present. A sign-in in flight lives in table ``oidc_login`` (the state's
SHA-256, nonce, PKCE verifier, return path) for :data:`LOGIN_TTL_S` and is deleted when its callback arrives, so a
callback works once; the state is also kept in a cookie of the browser that started it, so another browser's
callback is refused. The client secret is read when needed from its file or environment variable and never
logged. Authlib (the ``oidc`` extra) is imported only when a browser signs in, never by ``import trainledger``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
import time
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import urlencode

from trainledger.app.serving.auth import ROLES, AuthFileError

log = logging.getLogger("trainledger.auth")

OIDC_ENV = "TRAINLEDGER_OIDC_CONFIG"
LOGIN_PATH = "/_trainledger/oidc/login"
CALLBACK_PATH = "/_trainledger/oidc/callback"
LOGIN_TTL_S = 600  # a sign-in in flight: from the redirect to the provider until its callback
LEEWAY_S = 60  # clock skew allowed on exp, iat and nbf
DEFAULT_ALGORITHMS = ("RS256", "ES256")
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
ROLE_RANK = {role: rank for rank, role in enumerate(ROLES)}  # viewer < lead < admin
MAX_TOKEN_CHARS = 16_000
MAX_IN_FLIGHT = 10_000  # sign-ins in flight at once (each is a row of oidc_login for LOGIN_TTL_S)
MAX_DOCUMENT_BYTES = 1 << 20
HTTP_TIMEOUT_S = 10
DISCOVERY_TTL_S = 3600
CONFIG_KEYS = {"issuer", "client_id", "client_secret_file", "client_secret_env", "mapping_file", "map",
               "groups_claim", "username_claim", "scopes", "algorithms", "redirect_uri", "label"}
NAME_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,100}$")


class OidcConfigError(AuthFileError):
    """An OIDC configuration or mapping file that cannot be used; one line naming the file and the field."""


class OidcError(Exception):
    """A sign-in refused: ``message`` is shown to the browser, ``reason`` (never a secret or token) is logged."""

    def __init__(self, message: str, reason: str, status: int = 400):
        super().__init__(reason)
        self.message, self.reason, self.status = message, reason, status


NO_ROLE = "Your account has no trainledger role: ask an administrator to map one of your groups to a role."
FAILED = "Signing in with your identity provider failed; nothing was stored. Start again from the sign-in page."


@dataclass(frozen=True)
class Rule:
    value: str  # the claim value (a group or role name)
    role: str
    projects: Optional[tuple[str, ...]]  # None: every project


@dataclass(frozen=True)
class Mapped:
    role: str
    projects: Optional[tuple[str, ...]]  # None: every project (team scope)


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    client_id: str
    secret_file: Optional[Path]
    secret_env: Optional[str]
    rules: tuple[Rule, ...]
    groups_claim: str = "groups"
    username_claim: str = "preferred_username"
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    redirect_uri: Optional[str] = None
    label: str = "your identity provider"
    files: tuple[Path, ...] = field(default=(), compare=False)

    def client_secret(self) -> Optional[str]:
        """The client secret, read now from its file or variable (None: a public client, PKCE only)."""
        if self.secret_env:
            value = os.environ.get(self.secret_env, "")
            if not value:
                raise OidcConfigError(f"client_secret_env: the environment variable {self.secret_env} is empty or unset")
            return value
        if self.secret_file:
            from trainledger.errors import LedgerInputError
            from trainledger.store.files import read_bounded

            try:  # never quoted back: the error names the file and the reason only
                value = read_bounded(self.secret_file, 64 * 1024, "secret file").strip()
            except LedgerInputError as exc:
                raise OidcConfigError(f"client_secret_file: {exc}") from None
            if not value:
                raise OidcConfigError(f"client_secret_file: {self.secret_file} is empty")
            return value
        return None

    @property
    def fingerprint(self) -> str:
        """What a session's role was mapped under: a changed issuer, client or mapping ends every OIDC session."""
        text = repr((self.issuer, self.client_id, self.groups_claim, self.username_claim, self.rules))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- configuration ----------------------------------------------------------------------------------------------

def _toml(path: Path, what: str) -> dict:
    from trainledger.errors import LedgerInputError
    from trainledger.store.files import read_bounded

    try:
        return tomllib.loads(read_bounded(path, 1 << 20, "TOML file"))
    except LedgerInputError as exc:
        raise OidcConfigError(f"{what}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise OidcConfigError(f"{what} {path.name}: not valid TOML: {exc}") from None


def _names(value: Any, where: str, *, empty_ok: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or (not value and not empty_ok) or not all(
            isinstance(v, str) and NAME_RE.match(v) for v in value):
        raise OidcConfigError(f"{where}: expected a non-empty list of names")
    return tuple(value)


def parse_rules(maps: Any, where: str) -> tuple[Rule, ...]:
    """The ``[[map]]`` tables: each ``group`` (or ``role_claim_value``) → ``role`` and optional ``projects``."""
    if not isinstance(maps, list) or not maps or not all(isinstance(m, dict) for m in maps):
        raise OidcConfigError(f"{where}: map: expected [[map]] tables with group and role")
    rules = []
    for i, entry in enumerate(maps, 1):
        at = f"{where}: map #{i}"
        unknown = set(entry) - {"group", "role", "projects"}
        if unknown:
            raise OidcConfigError(f"{at}: unknown key {sorted(unknown)[0]!r}; use group, role and projects")
        value = entry.get("group")
        if not isinstance(value, str) or not NAME_RE.match(value):
            raise OidcConfigError(f"{at}: group: expected the claim value to match, e.g. group = \"ml-leads\"")
        if entry.get("role") not in ROLES:
            raise OidcConfigError(f"{at}: role: must be viewer, lead or admin, got {entry.get('role')!r}")
        projects = entry.get("projects")
        projects = tuple(sorted(set(_names(projects, f"{at}: projects")))) if projects is not None else None
        rules.append(Rule(value, entry["role"], projects))
    return tuple(rules)


def _url(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/?#]+[^\s#]*$", value):
        raise OidcConfigError(f"{where}: {name}: expected an http(s) URL, got {value!r}")
    return value


def _str(data: dict, key: str, where: str, default: Optional[str] = None) -> Optional[str]:
    value = data.get(key, default)
    if value is not None and (not isinstance(value, str) or not NAME_RE.match(value)):
        raise OidcConfigError(f"{where}: {key}: expected a short string")
    return value


def _secret_source(data: dict, base: Path, where: str) -> tuple[Optional[Path], Optional[str]]:
    if "client_secret" in data:
        raise OidcConfigError(f"{where}: client_secret: never put the secret in this file; "
                              "use client_secret_file or client_secret_env")
    file, env = _str(data, "client_secret_file", where), _str(data, "client_secret_env", where)
    if file and env:
        raise OidcConfigError(f"{where}: client_secret_file and client_secret_env: set one of them, not both")
    if env and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", env):
        raise OidcConfigError(f"{where}: client_secret_env: expected an environment variable name, got {env!r}")
    return ((base / file) if file else None), env


def _mapping(data: dict, base: Path, where: str) -> tuple[tuple[Rule, ...], tuple[Path, ...]]:
    mapping_file = _str(data, "mapping_file", where)
    if mapping_file and "map" in data:
        raise OidcConfigError(f"{where}: mapping_file and [[map]]: use one of them, not both")
    if mapping_file:
        path = base / mapping_file
        mapping = _toml(path, f"{where}: mapping_file")
        extra = set(mapping) - {"map"}
        if extra:
            raise OidcConfigError(f"mapping_file {path.name}: unknown key {sorted(extra)[0]!r}; "
                                  "only [[map]] tables are allowed")
        return parse_rules(mapping.get("map"), f"mapping_file {path.name}"), (path,)
    if "map" not in data:
        raise OidcConfigError(f"{where}: mapping_file: missing; name a TOML file of [[map]] rules "
                              "(group, role, projects)")
    return parse_rules(data["map"], where), ()


def _algorithms(data: dict, where: str) -> tuple[str, ...]:
    algorithms = _names(data.get("algorithms", list(DEFAULT_ALGORITHMS)), f"{where}: algorithms")
    bad = [a for a in algorithms if a not in ASYMMETRIC]
    if bad:
        raise OidcConfigError(f"{where}: algorithms: {bad[0]!r} is not allowed; use asymmetric ones "
                              f"({', '.join(ASYMMETRIC)})")
    return algorithms


def load_config(path: str | Path) -> OidcSettings:
    """Read and check an OIDC configuration (and its mapping file); :class:`OidcConfigError` (one line) if unusable."""
    path = Path(path)
    where = f"--oidc-config {path.name}"
    data = _toml(path, "--oidc-config")
    unknown = set(data) - CONFIG_KEYS
    if unknown:
        raise OidcConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}; use {', '.join(sorted(CONFIG_KEYS))}")
    issuer = _url(data.get("issuer"), "issuer", where)
    client_id = _str(data, "client_id", where)
    if not client_id:
        raise OidcConfigError(f"{where}: client_id: missing; the client id the provider gave this dashboard")
    base = path.resolve().parent
    secret_file, secret_env = _secret_source(data, base, where)
    rules, mapping_files = _mapping(data, base, where)
    scopes = _names(data.get("scopes", ["openid", "profile", "email"]), f"{where}: scopes")
    if "openid" not in scopes:
        raise OidcConfigError(f"{where}: scopes: must include \"openid\"")
    redirect = data.get("redirect_uri")
    return OidcSettings(
        issuer=issuer, client_id=client_id, secret_file=secret_file, secret_env=secret_env, rules=rules,
        groups_claim=_str(data, "groups_claim", where, "groups"),
        username_claim=_str(data, "username_claim", where, "preferred_username"),
        scopes=scopes, algorithms=_algorithms(data, where),
        redirect_uri=_url(redirect, "redirect_uri", where) if redirect is not None else None,
        label=_str(data, "label", where, "your identity provider"), files=(path, *mapping_files))


class ConfigFile:
    """An OIDC configuration read again whenever it or its mapping file changes (mtime or size)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._key: Optional[tuple] = None
        self._settings: Optional[OidcSettings] = None

    def _stamp(self, paths) -> tuple:
        try:
            return tuple((p, p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
        except OSError as exc:
            raise OidcConfigError(f"--oidc-config: cannot read {exc.filename}: {exc.strerror or exc}") from None

    def settings(self) -> OidcSettings:
        with self._lock:
            if self._settings is None or self._stamp(self._settings.files) != self._key:
                settings = load_config(self.path)
                self._key, self._settings = self._stamp(settings.files), settings
            return self._settings


@functools.lru_cache(maxsize=4)
def config_file(path: str) -> ConfigFile:
    return ConfigFile(path)


def config_path() -> Optional[str]:
    return os.environ.get(OIDC_ENV) or None


def current_settings() -> Optional[OidcSettings]:
    """The dashboard's OIDC settings (None: OIDC sign-in is off); :class:`OidcConfigError` if unusable."""
    path = config_path()
    return config_file(path).settings() if path else None


# --- claims → role ----------------------------------------------------------------------------------------------

def claim_values(claims: dict, name: str) -> set[str]:
    """The values of the groups/roles claim: a list of strings or one string (dotted names reach nested claims)."""
    value: Any = claims
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str)}
    return set()


def map_claims(claims: dict, settings: OidcSettings) -> Optional[Mapped]:
    """The role and projects the rules give these claims; None when no rule matches (the sign-in is refused)."""
    values = claim_values(claims, settings.groups_claim)
    matching = [r for r in settings.rules if r.value in values]
    if not matching:
        return None
    role = max((r.role for r in matching), key=ROLE_RANK.__getitem__)
    if any(r.projects is None for r in matching):
        return Mapped(role, None)
    return Mapped(role, tuple(sorted({p for r in matching for p in r.projects or ()})))


# --- the provider: discovery and keys ---------------------------------------------------------------------------

def _get_json(url: str) -> dict:
    import requests

    try:
        with requests.get(url, timeout=HTTP_TIMEOUT_S, stream=True, allow_redirects=False,
                          headers={"Accept": "application/json"}) as r:
            r.raise_for_status()
            body = r.raw.read(MAX_DOCUMENT_BYTES + 1, decode_content=True)
    except requests.RequestException as exc:
        raise OidcError(FAILED, f"cannot fetch {url}: {type(exc).__name__}", 502) from None
    if len(body) > MAX_DOCUMENT_BYTES:
        raise OidcError(FAILED, f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes", 502)
    try:
        import json

        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise OidcError(FAILED, f"{url} did not answer a JSON object", 502)
    return data


class Provider:
    """The provider's discovery document and JWKS, cached (discovery for an hour; keys until an unknown ``kid``)."""

    def __init__(self, issuer: str, fetch: Callable[[str], dict] = _get_json):
        self.issuer = issuer
        self.fetch = fetch
        self._lock = threading.Lock()
        self._metadata: Optional[dict] = None
        self._fetched = 0.0
        self._keys = None

    def metadata(self) -> dict:
        with self._lock:
            if self._metadata is None or time.monotonic() - self._fetched > DISCOVERY_TTL_S:
                data = self.fetch(f"{self.issuer.rstrip('/')}/.well-known/openid-configuration")
                if data.get("issuer") != self.issuer:
                    raise OidcError(FAILED, f"discovery names issuer {str(data.get('issuer'))[:200]!r}, "
                                            f"not {self.issuer!r}", 502)
                for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                    if not isinstance(data.get(key), str) or not data[key].startswith(("https://", "http://")):
                        raise OidcError(FAILED, f"discovery has no usable {key}", 502)
                self._metadata, self._fetched, self._keys = data, time.monotonic(), None
            return self._metadata

    def keys(self, refresh: bool = False):
        """The provider's public signing keys (a joserfc KeySet); ``refresh`` fetches them again."""
        from joserfc.jwk import KeySet

        metadata = self.metadata()
        with self._lock:
            if self._keys is None or refresh:
                jwks = self.fetch(metadata["jwks_uri"])
                usable = [k for k in jwks.get("keys") or [] if isinstance(k, dict) and k.get("kty") in ("RSA", "EC", "OKP")
                          and k.get("use", "sig") == "sig" and "d" not in k]  # never an "oct" (HMAC) key
                try:
                    self._keys = KeySet.import_key_set({"keys": usable})
                except Exception as exc:  # joserfc raises several types for a bad key
                    raise OidcError(FAILED, f"the provider's JWKS is unusable: {type(exc).__name__}", 502) from None
            return self._keys

    def algorithms(self, settings: OidcSettings) -> list[str]:
        """Allowed ID-token algorithms: the configured asymmetric ones that the provider also lists."""
        listed = self.metadata().get("id_token_signing_alg_values_supported") or ["RS256"]
        return [a for a in settings.algorithms if a in listed and a in ASYMMETRIC]


_PROVIDERS: dict[str, Provider] = {}
_PROVIDERS_LOCK = threading.Lock()


def provider_for(issuer: str) -> Provider:
    with _PROVIDERS_LOCK:
        return _PROVIDERS.setdefault(issuer, Provider(issuer))


# --- the ID token -----------------------------------------------------------------------------------------------

class IdTokenError(ValueError):
    """An ID token refused; the message (logged) names the check that failed."""


def _header(id_token: str) -> dict:
    import json

    from joserfc.util import urlsafe_b64decode

    if not isinstance(id_token, str) or len(id_token) > MAX_TOKEN_CHARS or id_token.count(".") != 2:
        raise IdTokenError("not a signed JWT (compact JWS)")
    try:
        header = json.loads(urlsafe_b64decode(id_token.split(".", 1)[0].encode("ascii")))
    except (ValueError, UnicodeError):
        raise IdTokenError("unreadable JOSE header") from None
    if not isinstance(header, dict):
        raise IdTokenError("unreadable JOSE header")
    return header


def _verified_claims(id_token: str, keys: Callable[[bool], Any], algorithms: list[str]) -> dict:
    """The payload once the signature checks out against the provider's keys (fetched again on an unknown kid)."""
    from joserfc import jwt
    from joserfc.errors import JoseError

    header = _header(id_token)
    alg = header.get("alg")
    if alg not in algorithms:
        raise IdTokenError(f"algorithm {str(alg)[:20]!r} is not allowed (allowed: {', '.join(algorithms)})")
    if "crit" in header:
        raise IdTokenError("critical header parameters are not supported")
    kid = header.get("kid")
    key_set = keys(False)
    if kid is not None and not any(k.kid == kid for k in key_set.keys):
        key_set = keys(True)  # a key the cached JWKS lacks: the provider may have rotated its keys
        if not any(k.kid == kid for k in key_set.keys):
            raise IdTokenError(f"no key with kid {str(kid)[:80]!r} in the provider's JWKS")
    kty = {"R": "RSA", "P": "RSA", "E": "EC"}.get(alg[0], "OKP") if alg != "EdDSA" else "OKP"
    # no kid: each key of the algorithm's type in turn (a provider with one key often leaves kid out)
    candidates = [key_set] if kid is not None else [k for k in key_set.keys if k.key_type == kty]
    failure = "no key of the algorithm's type in the provider's JWKS"
    for key in candidates:
        try:
            token = jwt.decode(id_token, key, algorithms=[alg])
            break
        except (JoseError, ValueError, TypeError) as exc:
            failure = f"signature not valid ({type(exc).__name__})"
    else:
        raise IdTokenError(failure)
    if not isinstance(token.claims, dict):
        raise IdTokenError("the payload is not a JSON object")
    return token.claims


def _number(claims: dict, name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise IdTokenError(f"{name} is missing or not a number")
    return float(value)


def _check_times(claims: dict, now: float, leeway: int) -> None:
    if _number(claims, "exp") <= now - leeway:
        raise IdTokenError("expired (exp)")
    iat = _number(claims, "iat")
    if iat > now + leeway:
        raise IdTokenError("issued in the future (iat)")
    if iat < now - LOGIN_TTL_S - leeway:
        raise IdTokenError("issued too long ago (iat)")
    if "nbf" in claims and _number(claims, "nbf") > now + leeway:
        raise IdTokenError("not valid yet (nbf)")


def _check_audience(claims: dict, client_id: str) -> None:
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if client_id not in audiences:
        raise IdTokenError("this dashboard is not its audience (aud)")
    if (len(audiences) > 1 or "azp" in claims) and claims.get("azp") != client_id:
        raise IdTokenError("authorized party (azp) is not this dashboard")


def _check_at_hash(claims: dict, alg: str, access_token: Optional[str]) -> None:
    if "at_hash" not in claims or not access_token:
        return
    from authlib.oidc.core.util import create_half_hash

    expected = create_half_hash(access_token, alg)
    if expected is None or not hmac.compare_digest(str(claims["at_hash"]), expected.decode("ascii")):
        raise IdTokenError("at_hash does not match the access token")


def validate_id_token(id_token: str, *, keys: Callable[[bool], Any], algorithms: list[str], issuer: str,
                      client_id: str, nonce: str, now: Optional[float] = None, leeway: int = LEEWAY_S,
                      access_token: Optional[str] = None) -> dict:
    """The ID token's claims after every check (signature, alg, iss, aud/azp, exp/iat/nbf, nonce, sub, at_hash).

    ``keys(refresh)`` gives the provider's KeySet (``refresh``: fetch it again). :class:`IdTokenError` otherwise.
    """
    if not algorithms:
        raise IdTokenError("no allowed algorithm: the provider lists none of the configured ones")
    claims = _verified_claims(id_token, keys, algorithms)
    if claims.get("iss") != issuer:
        raise IdTokenError("issued by another issuer (iss)")
    _check_audience(claims, client_id)
    _check_times(claims, time.time() if now is None else now, leeway)
    got = claims.get("nonce")
    if not isinstance(got, str) or not hmac.compare_digest(got.encode("utf-8"), nonce.encode("utf-8")):
        raise IdTokenError("nonce does not match this sign-in")
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise IdTokenError("sub is missing")
    _check_at_hash(claims, _header(id_token)["alg"], access_token)
    return claims


# --- a sign-in in flight ----------------------------------------------------------------------------------------

def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def begin(db_url: str, settings: OidcSettings, provider: Provider, redirect_uri: str, next_path: str,
          now: Optional[datetime] = None) -> tuple[str, str]:
    """Start a sign-in: store state, nonce and PKCE verifier; returns (the provider's authorization URL, the state)."""
    from authlib.oauth2.rfc7636 import create_s256_code_challenge
    from sqlmodel import delete, func, select
    from trainledger.store.db import get_engine, session_scope
    from trainledger.store.models import OidcLogin
    from trainledger.store.types import utcnow

    metadata = provider.metadata()
    now = now or utcnow()
    state, nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(64)
    with session_scope(get_engine(db_url)) as s:
        s.exec(delete(OidcLogin).where(OidcLogin.created_at <= now - timedelta(seconds=LOGIN_TTL_S)))
        if s.exec(select(func.count()).select_from(OidcLogin)).one() >= MAX_IN_FLIGHT:
            raise OidcError("Too many sign-ins are in flight; try again in a few minutes.",
                            f"{MAX_IN_FLIGHT} sign-ins in flight", 503)
        s.add(OidcLogin(state_hash=_sha256(state), nonce=nonce, code_verifier=verifier, next_path=next_path,
                        created_at=now))
    query = urlencode({"response_type": "code", "client_id": settings.client_id, "redirect_uri": redirect_uri,
                       "scope": " ".join(settings.scopes), "state": state, "nonce": nonce,
                       "code_challenge": create_s256_code_challenge(verifier), "code_challenge_method": "S256"})
    endpoint = metadata["authorization_endpoint"]
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", state


def take_login(db_url: str, state: str, now: Optional[datetime] = None):
    """The sign-in in flight for ``state``, deleted (used once); None if unknown, used already or expired."""
    from sqlmodel import delete
    from trainledger.store.db import get_engine, session_scope
    from trainledger.store.models import OidcLogin
    from trainledger.store.types import utcnow

    if not state or len(state) > 200:
        return None
    now = now or utcnow()
    with session_scope(get_engine(db_url)) as s:
        row = s.get(OidcLogin, _sha256(state))
        if row is None:
            return None
        s.expunge(row)
        deleted = s.exec(delete(OidcLogin).where(OidcLogin.state_hash == row.state_hash)).rowcount
    if deleted != 1 or row.created_at <= now - timedelta(seconds=LOGIN_TTL_S):
        return None  # another callback took it first, or it expired
    return row


@dataclass(frozen=True)
class SignedIn:
    user: str
    role: str
    projects: Optional[tuple[str, ...]]
    id_token: str


def _auth_method(settings: OidcSettings, metadata: dict, secret: Optional[str]) -> str:
    if secret is None:
        return "none"
    listed = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    return "client_secret_basic" if "client_secret_basic" in listed else "client_secret_post"


def exchange_code(settings: OidcSettings, provider: Provider, code: str, verifier: str, redirect_uri: str) -> dict:
    """The token endpoint's answer for ``code`` (client authenticated, PKCE verifier sent)."""
    from authlib.integrations.requests_client import OAuth2Session
    from authlib.oauth2 import OAuth2Error

    metadata = provider.metadata()
    secret = settings.client_secret()
    client = OAuth2Session(settings.client_id, secret, token_endpoint_auth_method=_auth_method(settings, metadata, secret))
    try:
        with client:
            return dict(client.fetch_token(metadata["token_endpoint"], grant_type="authorization_code", code=code,
                                           redirect_uri=redirect_uri, code_verifier=verifier, timeout=HTTP_TIMEOUT_S))
    except OAuth2Error as exc:
        raise OidcError(FAILED, f"the token endpoint refused the code: {exc.error}") from None
    except Exception as exc:  # requests' and Authlib's transport errors
        raise OidcError(FAILED, f"the token endpoint failed: {type(exc).__name__}", 502) from None


def user_name(claims: dict, settings: OidcSettings) -> str:
    for name in (settings.username_claim, "sub"):
        value = claims.get(name)
        if isinstance(value, str) and NAME_RE.match(value):
            return value
    raise OidcError(FAILED, "the ID token has no usable user name (username claim or sub)")


def finish(settings: OidcSettings, provider: Provider, login, code: str, redirect_uri: str,
           now: Optional[float] = None) -> SignedIn:
    """Exchange the code, validate the ID token, map its claims: the user to sign in, or :class:`OidcError`."""
    token = exchange_code(settings, provider, code, login.code_verifier, redirect_uri)
    id_token = token.get("id_token")
    if not isinstance(id_token, str):
        raise OidcError(FAILED, "the token endpoint sent no ID token")
    try:
        claims = validate_id_token(id_token, keys=provider.keys, algorithms=provider.algorithms(settings),
                                   issuer=settings.issuer, client_id=settings.client_id, nonce=login.nonce, now=now,
                                   access_token=token.get("access_token"))
    except IdTokenError as exc:
        raise OidcError(FAILED, f"ID token refused: {exc}") from None
    name = user_name(claims, settings)
    mapped = map_claims(claims, settings)
    if mapped is None:
        raise OidcError(NO_ROLE, f"{name!r} matches no rule of the mapping (claim {settings.groups_claim!r})", 403)
    return SignedIn(name, mapped.role, mapped.projects, id_token)
