"""Several hosts on one machine: Linux network namespaces on a bridge, each with its own address and hostname.

The hosts of a test run share its :class:`Fabric`: a bridge in the root namespace with the gateway address
``10.231.0.<16·b + 1>`` of block ``b``, a /28 of the project's own ``10.231.0.0/24``. tests/conftest.py makes it
once, before any test runs (the workers find it in ``$TRAINLEDGER_TEST_HOSTS_FABRIC``), and removes it after the
last. A :class:`Hosts` set is ``n`` network namespaces, each linked to the bridge by a veth pair whose inner end
is ``eth0`` (``10.231.0.<16·b + 2 + slot>``, a free slot of the block), with loopback up. Every namespace reaches
the others and the root namespace (the gateway address); a server in the root namespace that listens on the
gateway address is reachable from every host, as a head node's services are on a cluster network.

Why no address of the root namespace comes or goes while tests run: Chromium drops its connections and fails
every fetch in flight (``ERR_NETWORK_CHANGED``) whenever one does, IPv4 or IPv6. A set that added and removed the
gateway address itself, on another test worker, failed browser tests' page loads in full runs (issue 38); so did
the IPv6 link-local address the kernel gives each root-namespace end of a veth pair once it is up (removed with
the link). So the bridge and its address outlive the sets, and the bridge and the veth ends in the root namespace
get no link-local address (``addrgenmode none``); a set adds and removes only links, which Chromium does not mind
(measured: docs/PERFORMANCE.md).

A process runs *on* a host with :meth:`Host.cmd`: ``nsenter --net=/run/netns/NS -- unshare --mount --uts --
python -c ENTER HOSTS NAME COMMAND...`` — the host's network namespace, a UTS namespace whose hostname is the
host's name and a mount namespace whose /etc/hosts lists every host, then ``exec`` of the command (an argument
list all the way, never a shell). :meth:`Host.kill_all` kills every process in the namespace
(``ip netns pids``): the host "dies"; :meth:`Host.cut` takes its link down.

Parallel test runs never collide: a fabric holds block ``b`` (0–15) by an exclusive ``flock`` on
``/run/trainledger-hosts/<b>.lock``, and a host its slot by one on ``<b>.<slot>.lock``; everything is named
``tl<b:x><token>…`` (15 characters at most, the kernel's limit for an interface). The names are written next to
the lock before anything is created, so what a killed test run left is removed by the next fabric or host that
takes the lock. Without a fabric in the environment (outside pytest), a set makes and removes its own.

Needs root (``CAP_NET_ADMIN``/``CAP_SYS_ADMIN``), ``ip`` and ``unshare``; :func:`unavailable` says why not.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

STATE_DIR = Path("/run/trainledger-hosts")
#: ``/etc/netns/NS/hosts`` is each host's /etc/hosts (as ``ip netns exec NS`` would mount it): they know each other's names
ETC_NETNS = Path("/etc/netns")
BLOCKS = 16
SUBNET = "10.231.0"
SLOTS = 13  # host addresses of a block: 16·b + 2 … 16·b + 14
#: "BLOCK BRIDGE": the test run's fabric (tests/conftest.py), for its workers
FABRIC_ENV = "TRAINLEDGER_TEST_HOSTS_FABRIC"

#: run by python in the host's new UTS and mount namespaces: its /etc/hosts, its hostname, then the command
_ENTER = ("import os, socket, subprocess, sys; subprocess.run(['mount', '--bind', sys.argv[1], '/etc/hosts'], check=True); "
          "socket.sethostname(sys.argv[2]); os.execvp(sys.argv[3], sys.argv[3:])")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=60)


def unavailable() -> Optional[str]:
    """Why namespaces cannot be made here (None: they can)."""
    for prog in ("ip", "unshare", "nsenter", "mount"):
        if shutil.which(prog) is None:
            return f"{prog} not found (Debian: iproute2 / util-linux)"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); run the multi-host tests as root"
    probe = f"tlprobe{os.getpid()}"[:15]
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()[:200]}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Host:
    """One host: a network namespace with an address and a hostname."""

    index: int
    name: str  # its hostname
    netns: str
    addr: str
    outer: str  # the root-namespace end of its veth pair (on the bridge)
    iface: str = "eth0"  # its interface inside the namespace

    def cmd(self, command: list[str]) -> list[str]:
        """``command`` as run on this host: in its network namespace, with its own hostname and /etc/hosts.

        ``nsenter --net`` + ``unshare --mount --uts`` (not ``ip netns exec``, which remounts /sys and so hides
        the cgroup file system slurmd needs); /etc/hosts is bind-mounted in the private mount namespace."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", "unshare", "--mount", "--uts", "--propagation",
                "private", "--", sys.executable, "-c", _ENTER, str(ETC_NETNS / self.netns / "hosts"), self.name,
                *command]

    def popen(self, command: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.cmd(command), **kw)

    def run(self, command: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 120)
        return subprocess.run(self.cmd(command), **kw)

    def pids(self) -> list[int]:
        """Every process in this host's network namespace."""
        out = _ip("netns", "pids", self.netns, check=False).stdout
        return [int(p) for p in out.split() if p.isdigit()]

    def kill_all(self) -> list[int]:
        """SIGKILL every process of this host (the host dies); returns the pids signalled."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def cut(self) -> None:
        """Take this host's link down (its processes live on, unreachable)."""
        _ip("link", "set", self.outer, "down")

    def mend(self) -> None:
        _ip("link", "set", self.outer, "up")


def _slot_state(block: int, slot: int) -> Path:
    return STATE_DIR / f"{block}.{slot}.json"


def _try_lock(path: Path) -> Optional[int]:
    """An fd holding an exclusive flock on ``path``, or None if another process holds it."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _clear_block(block: int) -> None:
    """Remove what the block holds: every host on its slots, then its bridge."""
    for slot in range(SLOTS):
        _teardown(_slot_state(block, slot))
    _teardown(STATE_DIR / f"{block}.json")


def _take_block() -> tuple[int, int]:
    """The first free block and its lock's fd; on the way, every free block's leftovers (a killed run's fabric and
    hosts: its lock is free) are removed."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    chosen = None
    for b in range(BLOCKS):
        fd = _try_lock(STATE_DIR / f"{b}.lock")
        if fd is None:
            continue
        _clear_block(b)
        if chosen is None:
            chosen = (b, fd)
        else:
            os.close(fd)
    if chosen is None:
        raise RuntimeError(f"all {BLOCKS} host blocks of {SUBNET}.0/24 are in use")
    return chosen


class Fabric:
    """A block's bridge in the root namespace with its gateway address (module doc)."""

    def __init__(self, block: int, bridge: str, lock_fd: Optional[int] = None):
        self.block, self.bridge, self._lock_fd = block, bridge, lock_fd

    @property
    def gateway(self) -> str:
        return f"{SUBNET}.{16 * self.block + 1}"

    @property
    def cidr(self) -> str:
        """The block's network (its /28), e.g. for a server's allow-list."""
        return f"{SUBNET}.{16 * self.block}/28"

    @classmethod
    def make(cls) -> "Fabric":
        block, fd = _take_block()
        fabric = cls(block, f"tl{block:x}{secrets.token_hex(2)}br", fd)
        (STATE_DIR / f"{block}.json").write_text(json.dumps({"bridge": fabric.bridge}), encoding="utf-8")
        try:
            _ip("link", "add", fabric.bridge, "type", "bridge")
            _ip("link", "set", fabric.bridge, "addrgenmode", "none")  # no IPv6 link-local address (module doc)
            _ip("addr", "add", f"{fabric.gateway}/28", "dev", fabric.bridge)
            _ip("link", "set", fabric.bridge, "up")
        except BaseException:
            fabric.remove()
            raise
        return fabric

    @classmethod
    def from_env(cls) -> Optional["Fabric"]:
        """The test run's fabric (``$TRAINLEDGER_TEST_HOSTS_FABRIC``), or None."""
        value = os.environ.get(FABRIC_ENV, "").split()
        return cls(int(value[0]), value[1]) if len(value) == 2 else None

    def env_value(self) -> str:
        return f"{self.block} {self.bridge}"

    def remove(self) -> None:
        """Every host left on the bridge, then the bridge; the block released. Only the maker's."""
        if self._lock_fd is None:
            return
        _clear_block(self.block)
        os.close(self._lock_fd)
        self._lock_fd = None


class Hosts:
    """``n`` hosts on the run's bridge (see the module doc). Use as a context manager, or :meth:`up` / :meth:`down`."""

    def __init__(self, n: int = 2, prefix: str = "node"):
        if not 1 <= n <= 12:
            raise ValueError("n: 1 to 12 hosts fit in a /28 block")
        self.n, self.prefix = n, prefix
        self.fabric: Optional[Fabric] = None
        self._own_fabric = False
        self.slots: list[int] = []
        self._slot_fds: list[int] = []
        self.hosts: list[Host] = []

    # -- life cycle --
    def up(self) -> "Hosts":
        self.fabric = Fabric.from_env()
        self._own_fabric = self.fabric is None
        if self.fabric is None:
            self.fabric = Fabric.make()
        try:
            b, token = self.fabric.block, secrets.token_hex(2)
            self._take_slots()
            stem = f"tl{b:x}{token}"  # 7 characters
            self.hosts = [Host(i, f"{self.prefix}{i}-{token}", f"{stem}-h{i}", f"{SUBNET}.{16 * b + 2 + slot}",
                               f"{stem}h{i}") for i, slot in enumerate(self.slots)]
            for h, slot in zip(self.hosts, self.slots):
                _slot_state(b, slot).write_text(json.dumps({"netns": [h.netns], "links": [h.outer]}), encoding="utf-8")
            names = "".join(f"{h.addr}\t{h.name}\n" for h in self.hosts)
            for h in self.hosts:
                _ip("netns", "add", h.netns)
                (ETC_NETNS / h.netns).mkdir(parents=True, exist_ok=True)
                (ETC_NETNS / h.netns / "hosts").write_text(f"127.0.0.1\tlocalhost\n{names}", encoding="utf-8")
                _ip("link", "add", h.outer, "type", "veth", "peer", "name", f"{h.outer}p", "netns", h.netns)
                _ip("link", "set", h.outer, "addrgenmode", "none")  # before it is up: no address comes or goes
                _ip("link", "set", h.outer, "master", self.bridge)
                _ip("link", "set", h.outer, "up")
                ns = ["-n", h.netns]
                _ip(*ns, "link", "set", f"{h.outer}p", "name", h.iface)
                _ip(*ns, "addr", "add", f"{h.addr}/28", "dev", h.iface)
                _ip(*ns, "link", "set", h.iface, "up")
                _ip(*ns, "link", "set", "lo", "up")
                _ip(*ns, "route", "add", "default", "via", self.gateway)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Kill every process of every host, delete its namespace and link; release the slots (and the fabric, if
        this set made its own)."""
        if self.fabric is None:
            return
        for slot, fd in zip(self.slots, self._slot_fds):
            _teardown(_slot_state(self.fabric.block, slot))
            os.close(fd)
        self.slots, self._slot_fds = [], []
        if self._own_fabric:
            self.fabric.remove()
        self.fabric = None

    def __enter__(self) -> "Hosts":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    @property
    def block(self) -> int:
        return self.fabric.block

    @property
    def bridge(self) -> str:
        return self.fabric.bridge

    @property
    def gateway(self) -> str:
        return self.fabric.gateway

    @property
    def cidr(self) -> str:
        """The set's network (its block's /28), e.g. for a server's allow-list."""
        return self.fabric.cidr

    def hostfile(self, path: Path, slots: int = 1) -> Path:
        """A DeepSpeed hostfile (``NAME slots=N``) of these hosts, host 0 first."""
        path.write_text("".join(f"{h.name} slots={slots}\n" for h in self.hosts), encoding="utf-8")
        return path

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    # -- slots --
    def _take_slots(self) -> None:
        """The first ``n`` free slots of the fabric's block; a free slot's leftover host (its owner is dead: its lock
        free) is removed on the way."""
        b = self.fabric.block
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        for slot in range(SLOTS):
            if len(self.slots) == self.n:
                break
            fd = _try_lock(STATE_DIR / f"{b}.{slot}.lock")
            if fd is None:
                continue
            _teardown(_slot_state(b, slot))
            self.slots.append(slot)
            self._slot_fds.append(fd)
        if len(self.slots) < self.n:
            raise RuntimeError(f"only {len(self.slots)} of the {SLOTS} host slots of block {b} are free; {self.n} asked")


def _teardown(state: Path) -> None:
    """Remove the set described by ``state`` (if any): its processes, namespaces, links and bridge."""
    try:
        names = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for ns in names.get("netns", []):
        for _ in range(50):  # a process may be forking while we kill: until the namespace is empty
            out = _ip("netns", "pids", ns, check=False).stdout.split()
            if not out:
                break
            for pid in out:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            time.sleep(0.05)
        _ip("netns", "del", ns, check=False)
        shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
    for link in [*names.get("links", []), names.get("bridge")]:
        if link:
            _ip("link", "del", link, check=False)
    state.unlink(missing_ok=True)
