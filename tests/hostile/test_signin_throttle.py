"""Sign-in throttling: per user and per client, exponential back-off, temporary lockout, logged, and the same for
names that do not exist.

The finding: 15 wrong passwords at 2.8/s, then the right one was accepted; each try cost ~0.15 s
of PBKDF2, so a few clients could keep a 2-core host busy. Now (app/serving/throttle.py, app/serving/signin.py):

* a user name is free for 3 failures, then locked 1, 2, 4, ... s after each further failure,
  up to 15 minutes; a client address likewise after 10; while locked, attempts are refused
  (429, ``Retry-After``) before any password work, even with the right password;
* an unknown name is throttled exactly like a known one, and costs the same PBKDF2 work;
* every failure, lockout and refusal is logged (never the password).

Over real HTTP against `trainledger dashboard --auth-file` (clients from distinct loopback
addresses), and the back-off arithmetic with a hand-driven clock (no sleeping).
"""

from __future__ import annotations

import hashlib
import http.client
import re
from urllib.parse import urlencode

import pytest
from trainledger.app.serving import auth as auth_module
from trainledger.app.serving.auth import authenticate, load_auth_file, make_entry
from trainledger.app.serving.signin import VERIFY_SLOTS, attempt
from trainledger.app.serving.throttle import CLIENT_POLICY, USER_POLICY, Policy, Throttle

from tests.app.helpers import build_ledger
from tests.app.served import serve

FAST = 1_000


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# --- the rules -------------------------------------------------------------------------------------

def test_back_off_doubles_to_the_lockout_and_success_clears_it():
    clock = Clock()
    t = Throttle(clock=clock)
    keys = [("user", "alice"), ("client", "10.0.0.1")]
    waits = []
    for _ in range(16):
        assert t.wait_s(keys) == 0  # the previous lock has run out: the next try is allowed
        locked, counts = t.failure(keys)
        waits.append(locked)
        clock.now += locked
    assert waits[:3] == [0, 0, 0]  # USER_POLICY.free = 3
    assert waits[3:13] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert waits[13:] == [USER_POLICY.lockout_s] * 3 == [900.0] * 3
    assert counts == {("user", "alice"): 16, ("client", "10.0.0.1"): 16}
    t.failure(keys)
    assert t.wait_s(keys) == 900 and t.wait_s([("user", "alice")]) == 900
    clock.now += 899
    assert t.wait_s(keys) == 1
    clock.now += 1
    t.success(keys)
    assert t.wait_s(keys) == 0 and t.failure(keys)[1][("user", "alice")] == 1


def test_the_client_key_is_looser_and_keys_are_forgotten():
    clock = Clock()
    t = Throttle(clock=clock)
    for i in range(CLIENT_POLICY.free):  # different names from one address: the client key counts them all
        assert t.failure([("user", f"u{i}"), ("client", "c")])[0] == 0
    assert t.failure([("user", "another"), ("client", "c")])[0] == 1
    assert t.wait_s([("client", "c")]) == 1 and t.wait_s([("user", "u0")]) == 0
    clock.now += CLIENT_POLICY.forget_s + 2
    assert t.wait_s([("client", "c")]) == 0 and t.failure([("client", "c")])[1] == {("client", "c"): 1}


def test_the_key_table_is_bounded_and_drops_unlocked_keys_first():
    clock = Clock()
    small = Policy(free=1, max_keys=3)
    t = Throttle({"user": small}, clock=clock)
    t.failure([("user", "locked")])
    t.failure([("user", "locked")])
    for name in ("a", "b", "c", "d"):
        clock.now += 0.001
        t.failure([("user", name)])
    assert t.wait_s([("user", "locked")]) > 0  # older, but locked: kept
    assert len(t._entries) == 3


def test_an_unknown_name_costs_the_same_pbkdf2_work(tmp_path, monkeypatch):
    users_file = tmp_path / "users.toml"
    users_file.write_text(make_entry("alice", "lead", "pw", iterations=4321))
    users = load_auth_file(users_file)
    calls = []
    real = hashlib.pbkdf2_hmac

    def counting(name, password, salt, iterations, *rest):
        calls.append(iterations)
        return real(name, password, salt, iterations, *rest)

    assert authenticate(users, "mallory", "warm-up") is None  # builds (and caches) the dummy hash of that cost
    monkeypatch.setattr(auth_module.hashlib, "pbkdf2_hmac", counting)
    assert authenticate(users, "alice", "wrong") is None
    assert authenticate(users, "mallory", "wrong") is None
    assert authenticate(users, "alice", "pw").name == "alice"
    assert calls == [4321, 4321, 4321]


def test_attempt_refuses_a_locked_key_before_checking_the_password(tmp_path, monkeypatch):
    users_file = tmp_path / "users.toml"
    users_file.write_text(make_entry("alice", "lead", "pw", iterations=FAST))
    users = load_auth_file(users_file)
    t = Throttle(clock=Clock())
    outcomes = [attempt(users, "alice", "nope", "c1", t) for _ in range(4)]
    assert [o.status for o in outcomes] == [401, 401, 401, 401] and outcomes[-1].retry_after_s == 1
    assert outcomes[-1].message == "Wrong user or password. Too many failures: wait 1 s."
    monkeypatch.setattr(auth_module, "verify_password", lambda *a: pytest.fail("password checked while locked"))
    locked = attempt(users, "alice", "pw", "c2", t)  # the right password, from another client: still locked
    assert (locked.entry, locked.status, locked.message) == (None, 429, "Too many failed sign-ins: try again in 1 s.")
    assert VERIFY_SLOTS == 2


# --- over HTTP --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("throttle")
    url = build_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    users = tmp / "users.toml"
    users.write_text(make_entry("alice", "lead", "alice-pw", iterations=FAST)
                     + make_entry("bob", "viewer", "bob-pw", iterations=FAST)
                     + make_entry("carol", "viewer", "carol-pw", iterations=FAST))
    # the first lock lasts 10 minutes here, so "locked" does not depend on how fast this machine is
    with serve(tmp, url, "--auth-file", str(users), env={"TRAINLEDGER_SIGNIN_BACKOFF_S": "600"}) as served:
        yield served


def post(port: int, user: str, password: str, source: str = "127.0.0.1") -> tuple[int, dict, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(source, 0))
    body = urlencode({"user": user, "password": password, "next": "/overview"})
    conn.request("POST", "/_trainledger/signin?next=%2Foverview", body,
                 {"Content-Type": "application/x-www-form-urlencoded", "Host": f"127.0.0.1:{port}",
                  "Origin": f"http://127.0.0.1:{port}"})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    return r.status, dict(r.getheaders()), text


def _alert(html: str) -> str:
    m = re.search(r'<p class="error" role="alert">(.*?)</p>', html)
    return m.group(1) if m else ""


@pytest.mark.slow
def test_wrong_passwords_lock_the_user_even_for_the_right_one(site):
    port = site.port
    seen = [post(port, "alice", f"guess-{i}", "127.0.0.2") for i in range(4)]
    assert [s for s, _, _ in seen] == [401, 401, 401, 401]
    assert _alert(seen[-1][2]) == "Wrong user or password. Too many failures: wait 600 s."
    status, headers, html = post(port, "alice", "alice-pw", "127.0.0.3")  # right password, another address
    assert status == 429 and 500 < int(headers["retry-after"]) <= 600
    assert _alert(html).startswith("Too many failed sign-ins: try again in ")
    assert "Set-Cookie" not in headers and "set-cookie" not in headers
    status, headers, _ = post(port, "bob", "bob-pw", "127.0.0.3")  # another user from there: fine
    assert status == 303 and headers["location"] == "/overview" and "trainledger_session_" in headers["set-cookie"]
    log = site.log_text()
    assert "sign-in failed: user 'alice' from 127.0.0.2 (4 failures of the user, 4 of the client); locked out" in log
    assert "sign-in refused: user 'alice' from 127.0.0.3 is locked out for" in log
    assert "signed in: 'bob' (viewer) from 127.0.0.3" in log
    assert "alice-pw" not in log and "guess-" not in log


@pytest.mark.slow
def test_an_unknown_name_is_throttled_like_a_known_one(site):
    port = site.port
    known = [post(port, "carol", f"x{i}", "127.0.0.4")[0] for i in range(5)]
    unknown = [post(port, "mallory", f"x{i}", "127.0.0.5")[0] for i in range(5)]
    assert known == unknown == [401, 401, 401, 401, 429]


@pytest.mark.slow
def test_one_client_trying_many_names_is_locked_as_a_client(site):
    port = site.port
    statuses = [post(port, f"user{i}", "x", "127.0.0.6")[0] for i in range(11)]
    assert statuses == [401] * 11
    assert post(port, "bob", "bob-pw", "127.0.0.6")[0] == 429  # the client is locked, whoever it claims to be
    assert post(port, "bob", "bob-pw", "127.0.0.7")[0] == 303


def test_the_wait_shown_is_whole_seconds_without_float_noise():
    from trainledger.app.serving.signin import whole_seconds

    now = 1048173.1128487753  # a monotonic clock reading: (now + 600) - now is not exactly 600 in floats
    assert (now + 600) - now != 600 and whole_seconds((now + 600) - now) == 600
    assert (whole_seconds(599.2), whole_seconds(0.0004), whole_seconds(0.01)) == (600, 0, 1)
