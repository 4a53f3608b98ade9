"""Several hosts on one machine: Linux network namespaces on a bridge, each with its own address and hostname.

A :class:`Hosts` set is a bridge in the root namespace (``10.231.0.<16·b + 1>``, a /28 of the project's own
``10.231.0.0/24``) and ``n`` network namespaces, each linked to the bridge by a veth pair whose inner end is
``eth0`` (``10.231.0.<16·b + 2 + i>``), with loopback up. Every namespace reaches the others and the root
namespace (the bridge address); a server in the root namespace that listens on the bridge address is
reachable from every host, as a head node's services are on a cluster network.

A process runs *on* a host with :meth:`Host.cmd`: ``nsenter --net=/run/netns/NS -- unshare --mount --uts --
python -c ENTER HOSTS NAME COMMAND...`` — the host's network namespace, a UTS namespace whose hostname is the
host's name and a mount namespace whose /etc/hosts lists every host, then ``exec`` of the command (an argument
list all the way, never a shell). :meth:`Host.kill_all` kills every process in the namespace
(``ip netns pids``): the host "dies"; :meth:`Host.cut` takes its link down.

Parallel test processes never collide: a set holds block ``b`` (0–15) of the /24 by an exclusive ``flock``
on ``/run/trainledger-hosts/<b>.lock`` and names everything ``tl<b:x><token>…`` (15 characters at most, the
kernel's limit for an interface). The names of a set are written next to its lock before anything is
created, so a set left behind by a killed test run is removed by the next set that starts (any block whose
lock is free and still has a set).

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


class Hosts:
    """``n`` hosts on a bridge (see the module doc). Use as a context manager, or :meth:`up` / :meth:`down`."""

    def __init__(self, n: int = 2, prefix: str = "node"):
        if not 1 <= n <= 12:
            raise ValueError("n: 1 to 12 hosts fit in a /28 block")
        self.n, self.prefix = n, prefix
        self.block: Optional[int] = None
        self._lock_fd: Optional[int] = None
        self.hosts: list[Host] = []
        self.bridge = ""
        self.gateway = ""

    # -- life cycle --
    def up(self) -> "Hosts":
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.block = self._take_block()
        b, token = self.block, secrets.token_hex(2)
        stem = f"tl{b:x}{token}"  # 7 characters
        base = 16 * b
        self.bridge, self.gateway = f"{stem}br", f"{SUBNET}.{base + 1}"
        self.hosts = [Host(i, f"{self.prefix}{i}-{token}", f"{stem}-h{i}", f"{SUBNET}.{base + 2 + i}", f"{stem}h{i}")
                      for i in range(self.n)]
        self._state().write_text(json.dumps({"bridge": self.bridge, "netns": [h.netns for h in self.hosts],
                                             "links": [h.outer for h in self.hosts]}), encoding="utf-8")
        names = "".join(f"{h.addr}\t{h.name}\n" for h in self.hosts)
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/28", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for h in self.hosts:
                _ip("netns", "add", h.netns)
                (ETC_NETNS / h.netns).mkdir(parents=True, exist_ok=True)
                (ETC_NETNS / h.netns / "hosts").write_text(f"127.0.0.1\tlocalhost\n{names}", encoding="utf-8")
                _ip("link", "add", h.outer, "type", "veth", "peer", "name", f"{h.outer}p", "netns", h.netns)
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
        """Kill every process of every host, delete the namespaces, links and bridge; release the block."""
        if self.block is None:
            return
        _teardown(self._state())
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self.block = None

    def __enter__(self) -> "Hosts":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    @property
    def cidr(self) -> str:
        """The set's network (its /28), e.g. for a server's allow-list."""
        return f"{SUBNET}.{16 * self.block}/28"

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

    # -- blocks --
    def _state(self) -> Path:
        return STATE_DIR / f"{self.block}.json"

    def _take_block(self) -> int:
        """The first free block; on the way, every free block's leftover set (its owner is dead: its lock free)
        is removed."""
        chosen = None
        for b in range(BLOCKS):
            fd = os.open(STATE_DIR / f"{b}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            _teardown(STATE_DIR / f"{b}.json")  # a set a killed test run left in this block
            if chosen is None:
                chosen, self._lock_fd = b, fd
            else:
                os.close(fd)
        if chosen is None:
            raise RuntimeError(f"all {BLOCKS} host blocks of {SUBNET}.0/24 are in use")
        return chosen


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
