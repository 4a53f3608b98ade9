"""The real-Slurm test cluster of tests/slurm/cluster.py with one slurmd per host of tests/hosts.py.

slurmctld, slurmdbd and munged run in the root namespace (the head node); slurmctld is reached at the
hosts' bridge address. Each host runs its own ``slurmd -N <its hostname>`` in its namespace, with its own
spool, pid and log files (``%n``), and is a node ``NodeName=<hostname> NodeAddr=10.231.0.x`` of the
cluster. munge's socket is a path, reachable from every namespace (they share the file system).
"""

from __future__ import annotations

import signal
import subprocess

from tests.hosts import Hosts
from tests.slurm.cluster import SlurmCluster, SlurmUnavailable


class HostsSlurm(SlurmCluster):
    def __init__(self, hosts: Hosts, cpus: int = 2) -> None:
        super().__init__(cpus=cpus, gpus=0)
        self.hosts = hosts

    def _write_configs(self) -> None:
        super()._write_configs()
        d, hs = self.dir, self.hosts
        text = self.conf.read_text()
        for old, new in (("SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldHost=localhost({hs.gateway})"),
                         (f"SlurmdSpoolDir={d / 'spool'}", f"SlurmdSpoolDir={d / 'spool'}/%n"),
                         (f"SlurmdPidFile={d / 'slurmd.pid'}", f"SlurmdPidFile={d}/slurmd-%n.pid"),
                         (f"SlurmdLogFile={d / 'slurmd.log'}", f"SlurmdLogFile={d}/slurmd-%n.log")):
            if old not in text:
                raise SlurmUnavailable(f"tests/slurm/cluster.py's slurm.conf changed: no {old!r}")
            text = text.replace(old, new)
        lines = [x for x in text.splitlines() if not x.startswith(("NodeName=", "PartitionName="))]
        lines += [f"NodeName={h.name} NodeAddr={h.addr} CPUs={self.cpus} Sockets=1 CoresPerSocket={self.cpus} "
                  "ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN" for h in hs]
        lines.append(f"PartitionName=debug Nodes={','.join(h.name for h in hs)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        for h in hs:
            (d / "spool" / h.name).mkdir()

    def _start_slurmd(self) -> None:
        for h in self.hosts:
            with open(self.dir / f"slurmd-{h.name}.out", "ab") as log:
                self.procs[f"slurmd-{h.index}"] = h.popen(["slurmd", "-D", "-N", h.name], env=self.env, stdout=log,
                                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                          start_new_session=True)

        def idle() -> bool:
            out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False, timeout=30).stdout.split()
            if any(s.rstrip("*~#$@^-") in ("drained", "draining", "inval", "down") for s in out):
                reason = self.run("sinfo", "-h", "-R", "-o", "%E", check=False).stdout.strip()
                raise SlurmUnavailable(f"nodes are {out}: {reason}; {self.log_tails()}")
            return len(out) == len(self.hosts) and all(s.rstrip("*~#") == "idle" for s in out)

        self.wait_for(f"{len(self.hosts)} nodes idle (sinfo)", idle)

    def log_tails(self) -> str:
        return " | ".join([f"{n}: {self.log_tail(n, 600)}" for n in ("slurmdbd", "slurmctld")]
                          + [f"slurmd {h.name}: {self.log_tail(f'slurmd-{h.name}', 600)}" for h in self.hosts])

    def stop(self) -> None:
        for h in self.hosts:
            p = self.procs.pop(f"slurmd-{h.index}", None)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=20)
        super().stop()
