"""The multi-host fixture itself: hosts with their own names and addresses, reachable, and cleaned up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.hosts import ETC_NETNS, Hosts, _ip, _slot_state

pytestmark = pytest.mark.slow

#: on a host: listen on its address, answer one connection with this host's name
SERVE = ("import socket, sys; s = socket.create_server((sys.argv[1], int(sys.argv[2]))); print('up', flush=True); "
         "c, _ = s.accept(); c.sendall(socket.gethostname().encode()); c.close()")
#: connect to NAME:PORT (a name resolved on this host) and print what it says
ASK = ("import socket, sys; c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20); "
       "print(c.recv(100).decode())")


def _serve(host, port: int) -> subprocess.Popen:
    p = host.popen([sys.executable, "-c", SERVE, host.addr, str(port)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up"
    return p


def test_each_host_has_its_name_and_reaches_the_other_and_the_root(hosts):
    h0, h1 = hosts
    assert h0.name != h1.name and h0.name.startswith("node0-") and h1.name.startswith("node1-")
    assert h0.run(["hostname"]).stdout.strip() == h0.name
    assert h1.run([sys.executable, "-c", "import socket; print(socket.gethostname())"]).stdout.strip() == h1.name
    assert os.uname().nodename not in (h0.name, h1.name)  # the root namespace keeps its own
    # host 0 → host 1 by name (each host's /etc/hosts lists them all), root → host 0 by address
    server = _serve(h1, 7101)
    got = h0.run([sys.executable, "-c", ASK, h1.name, "7101"])
    server.wait(timeout=30)
    assert got.stdout.strip() == h1.name, got.stderr
    server = _serve(h0, 7102)
    got = subprocess.run([sys.executable, "-c", ASK, h0.addr, "7102"], capture_output=True, text=True, timeout=60)
    server.wait(timeout=30)
    assert got.stdout.strip() == h0.name, got.stderr
    # and a host reaches the root namespace at the bridge address (where the ledger listens)
    import socket

    with socket.create_server((hosts.gateway, 0)) as s:
        port = s.getsockname()[1]
        check = h1.popen([sys.executable, "-c", "import socket, sys; socket.create_connection((sys.argv[1], "
                          "int(sys.argv[2])), timeout=20).sendall(b'hi')", hosts.gateway, str(port)])
        conn, (peer, _) = s.accept()
        assert conn.recv(2) == b"hi" and peer == h1.addr
        conn.close()
        assert check.wait(timeout=30) == 0


def test_a_set_left_by_a_killed_run_is_removed_by_the_next_one(hosts):
    """A test process killed before its teardown leaves namespaces and links: the next set that takes its slots
    removes them (here: the locks are dropped without a teardown, as a dead process drops them)."""
    left = Hosts(2).up()
    block, slots, names, links = left.block, left.slots, [h.netns for h in left], [h.outer for h in left]
    assert block == hosts.block and not set(slots) & set(hosts.slots)  # the run's bridge, slots of its own
    sleeper = left[1].popen(["sleep", "600"])
    for fd in left._slot_fds:
        os.close(fd)  # the process "dies": its flocks go, its namespaces stay
    assert all(_slot_state(block, s).exists() for s in slots)
    fresh = Hosts(2)
    try:
        fresh.up()
        assert fresh.block == block and fresh.slots == slots
        netns = _ip("netns", "list").stdout
        assert not any(n in netns for n in names)
        assert all(_ip("link", "show", link, check=False).returncode != 0 for link in links)
        assert not any((ETC_NETNS / n).exists() for n in names)
        assert sleeper.wait(timeout=30) == -9  # its processes were killed with it
    finally:
        fresh.down()
    assert not any(_slot_state(block, s).exists() for s in slots)
    assert not any(h.netns in _ip("netns", "list").stdout for h in fresh)
    assert _ip("link", "show", hosts.bridge, check=False).returncode == 0  # the run's bridge stays for the others


def _root_addresses() -> list[str]:
    """The root namespace's addresses, IPv4 and IPv6, one "interface address" each (what Chromium watches, module
    doc of tests/hosts.py)."""
    out = _ip("-o", "addr", "show").stdout.splitlines()
    return sorted(" ".join(line.split()[1:4:2]) for line in out)


def test_sets_come_and_go_without_changing_an_address_of_the_root_namespace(hosts):
    """The run's fabric (made before any test) holds the gateway address; a set only adds and removes links, whose
    root-namespace ends get no IPv6 link-local address, so a browser on another worker never sees an address come
    or go (ERR_NETWORK_CHANGED). Before, each set added and removed its bridge's address and each of its links'
    link-local one."""
    before = _root_addresses()
    assert f"{hosts.bridge} {hosts.gateway}/28" in before  # the fabric's, there before this test
    assert not [a for a in before if a.startswith(hosts.bridge) and ":" in a]  # and no IPv6 one of the bridge
    with Hosts(3) as more:
        during = _root_addresses()
        assert more.gateway == hosts.gateway and more[2].run(["ip", "-4", "-o", "addr", "show", "eth0"]).returncode == 0
    assert before == during == _root_addresses()
