"""The Host/Origin allow-list's rules (app/serving/guard.py), case by case; tests/hostile/test_dns_rebinding.py drives it for real."""

from __future__ import annotations

import pytest
from trainledger.app.serving.guard import HostPolicy, is_loopback_name, parse_allowed, split_host

LOCAL = HostPolicy(signin=False)
SIGNIN = HostPolicy(signin=True, allowed=("dash.example.com", "*.corp.example"), own_names=("gpu-box",))


@pytest.mark.parametrize("header,name", [
    ("localhost:8501", "localhost"), ("LOCALHOST.", "localhost"), ("127.0.0.1", "127.0.0.1"), ("[::1]:8501", "::1"),
    ("evil.test:8501", "evil.test"), ("a@evil.test", None), ("evil.test/x", None), ("evil.test:99999", None),
    ("evil.test:x", None), ("", None), (None, None), ("ev il", None), ("x\x00y", None), ("a" * 300, None),
])
def test_split_host(header, name):
    assert split_host(header) == name


@pytest.mark.parametrize("name,local,signin", [
    ("localhost", True, True), ("127.0.0.1", True, True), ("127.8.9.10", True, True), ("::1", True, True),
    ("evil.test", False, False), ("127.0.0.1.evil.test", False, False), ("localhost.evil.test", False, False),
    ("10.0.0.5", False, True), ("2001:db8::1", False, True),  # a literal address cannot be rebound
    ("gpu-box", False, True), ("dash.example.com", False, True), ("x.dash.example.com", False, False),
    ("a.corp.example", False, True), ("corp.example", False, False), ("evilcorp.example", False, False),
    (None, False, False), ("", False, False),
])
def test_which_hosts_pass(name, local, signin):
    assert LOCAL.host_allowed(name) is local
    assert SIGNIN.host_allowed(name) is signin


@pytest.mark.parametrize("origin,host,ok", [
    ("http://127.0.0.1:8501", "127.0.0.1:8501", True),
    ("http://localhost:8501", "localhost:8501", True),
    ("https://dash.example.com", "dash.example.com", True),
    ("https://dash.example.com:443", "dash.example.com", True),
    ("https://dash.example.com", "127.0.0.1:8501", True),  # a proxy that rewrites Host: an --allowed-host origin
    ("http://127.0.0.1:9999", "127.0.0.1:8501", False),  # another local server's page
    ("http://localhost:8501", "127.0.0.1:8501", False),
    ("http://evil.test:8501", "127.0.0.1:8501", False),
    ("null", "127.0.0.1:8501", False),
    ("file://", "127.0.0.1:8501", False),
    ("http://127.0.0.1:8501", "", False),
])
def test_origin_is_this_site(origin, host, ok):
    assert SIGNIN.origin_allowed(origin, host) is ok


def test_allowed_host_values():
    assert parse_allowed([" Dash.Example.COM. ", "*.corp.example"]) == ("dash.example.com", "*.corp.example")
    for bad in ("http://x.com", "x.com:80", "x.com/a", "*", "*.", "**.x.com", "a b", ""):
        with pytest.raises(ValueError, match="--allowed-host"):
            parse_allowed([bad])


def test_loopback_names():
    assert is_loopback_name("localhost") and is_loopback_name("127.0.0.2") and is_loopback_name("::1")
    assert not is_loopback_name("0.0.0.0") and not is_loopback_name("::") and not is_loopback_name(None)
