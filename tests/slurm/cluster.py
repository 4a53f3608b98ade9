"""A throwaway single-host Slurm with accounting, for the Slurm tests (and ``python -m tests.slurm.cluster``).

munged, slurmdbd, slurmctld and slurmd (Debian's ``slurm-wlm``, ``slurmdbd``,
``munge``) started in a temporary directory with their own config, ports on
127.0.0.1, state, spool, pid and log paths; slurmdbd stores into its own
database on the MariaDB server at 127.0.0.1:3306 (created here, dropped by
:meth:`SlurmCluster.stop`). One node ``localhost`` with 4 CPUs and two GPUs of
type ``fake`` (plain files as device files: Slurm allocates and accounts for
them; nothing runs on them). Readiness is polled, never slept for.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional

MARIADB = dict(host="127.0.0.1", port="3306", user="root")
DAEMONS = ("munged", "slurmdbd", "slurmctld", "slurmd", "sacct", "sbatch", "sacctmgr", "scontrol")


class SlurmUnavailable(RuntimeError):
    """A piece of Slurm is not installed or would not start; the message says which."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_programs() -> list[str]:
    return [p for p in DAEMONS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


class SlurmCluster:
    def __init__(self, name: Optional[str] = None, cpus: int = 4, gpus: int = 2, extra_conf: str = "",
                 memory: bool = False, proctrack: str = "proctrack/linuxproc") -> None:
        self.name = name or f"tl{uuid.uuid4().hex[:8]}"
        self.db = f"tl_slurm_{uuid.uuid4().hex[:10]}"
        self.cpus, self.gpus = cpus, gpus
        self.extra_conf = extra_conf  # more slurm.conf lines (partitions with TRESBillingWeights, PriorityFlags)
        self.select = "CR_Core_Memory" if memory else "CR_Core"  # memory: allocated and accounted (mem= in AllocTRES)
        self.proctrack = proctrack  # linuxproc (as cgroup) signals every process of a step, pgid the task's group
        self.dir = Path(tempfile.mkdtemp(prefix="tl-slurm-"))
        self.dir.chmod(0o755)
        self.ports = {"ctld": _free_port(), "slurmd": _free_port(), "dbd": _free_port()}
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        self.account = "tlacct"

    # --- environment for clients ------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm client commands (sbatch, sacct, ...) talking to this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(args), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def wait_for(self, what: str, probe, timeout: float = 120, interval: float = 0.25):
        """Poll ``probe()`` until it returns a truthy value; raise with ``what`` and the logs after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {p.returncode} while waiting for {what}: {self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise SlurmUnavailable(f"timed out after {timeout:.0f} s waiting for {what}; {self.log_tails()}")
            time.sleep(interval)

    def log_tail(self, name: str, n: int = 1500) -> str:
        path = self.dir / f"{name}.log"
        try:
            return path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def log_tails(self) -> str:
        return " | ".join(f"{n}: {self.log_tail(n, 600)}" for n in ("slurmdbd", "slurmctld", "slurmd"))

    # --- start ------------------------------------------------------------------------
    def start(self) -> "SlurmCluster":
        missing = missing_programs()
        if missing:
            raise SlurmUnavailable(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm slurmdbd munge)")
        try:
            self._write_configs()
            self._start_munge()
            self._create_database()
            self._start_slurmdbd()
            self._start_slurmctld()
            self._register_accounts()
            self._start_slurmd()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_configs(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "gres"):
            (d / sub).mkdir()
        devices = [d / "gres" / f"gpu{i}" for i in range(self.gpus)]
        for dev in devices:
            dev.write_text("")
        # cred_expire: a requeued job waits this long before it may start again (default 120 s)
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket},cred_expire=10\n"
        gres = f"NodeName=localhost Name=gpu Type=fake File={d / 'gres'}/gpu[0-{self.gpus - 1}]\n" if self.gpus else ""
        (d / "gres.conf").write_text(gres)
        node_gres = f" Gres=gpu:fake:{self.gpus}" if self.gpus else ""
        self.conf.write_text(
            f"ClusterName={self.name}\n"
            f"SlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={self.ports['ctld']}\nSlurmdPort={self.ports['slurmd']}\n"
            f"SlurmUser={self.user}\nSlurmdUser=root\n{auth}CredType=cred/munge\n"
            f"StateSaveLocation={d / 'state'}\nSlurmdSpoolDir={d / 'spool'}\n"
            f"SlurmctldPidFile={d / 'slurmctld.pid'}\nSlurmdPidFile={d / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={d / 'slurmctld.log'}\nSlurmdLogFile={d / 'slurmd.log'}\n"
            f"ProctrackType={self.proctrack}\nTaskPlugin=task/none\n"
            f"SelectType=select/cons_tres\nSelectTypeParameters={self.select}\nMailProg=/bin/true\n"
            "JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=1\nJobCompType=jobcomp/none\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={self.ports['dbd']}\nAccountingStoragePass={self.munge_socket}\n"
            "AccountingStorageTRES=gres/gpu,gres/gpu:fake\n"
            "SlurmdParameters=config_overrides\nReturnToService=2\nMinJobAge=300\nKillWait=2\nInactiveLimit=0\nSchedulerParameters=defer_batch\n"
            "GresTypes=gpu\n"
            f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} Sockets=1 CoresPerSocket={self.cpus} "
            f"ThreadsPerCore=1 RealMemory=1000{node_gres} State=UNKNOWN\n"
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n"
            "PartitionName=batch Nodes=localhost MaxTime=INFINITE State=UP\n" + self.extra_conf)
        dbd = d / "slurmdbd.conf"
        dbd.write_text(
            f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={self.ports['dbd']}\nSlurmUser={self.user}\n"
            f"PidFile={d / 'slurmdbd.pid'}\nLogFile={d / 'slurmdbd.log'}\n"
            f"StorageType=accounting_storage/mysql\nStorageHost={MARIADB['host']}\nStoragePort={MARIADB['port']}\n"
            f"StorageUser={MARIADB['user']}\nStorageLoc={self.db}\n")
        dbd.chmod(0o600)

    def _start_munge(self) -> None:
        mdir = self.munge_socket.parent
        mdir.mkdir(mode=0o700)
        key = mdir / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        as_munge = os.geteuid() == 0
        if as_munge:
            shutil.chown(mdir, "munge", "munge")
            shutil.chown(key, "munge", "munge")
        mdir.chmod(0o755)
        cmd = ["munged", "--foreground", f"--socket={self.munge_socket}", f"--key-file={key}",
               f"--log-file={self.dir / 'munged.log'}", f"--pid-file={mdir / 'munged.pid'}",
               f"--seed-file={mdir / 'munged.seed'}"]
        if as_munge:
            (self.dir / "munged.log").touch()
            shutil.chown(self.dir / "munged.log", "munge", "munge")
            cmd = ["runuser", "-u", "munge", "--", *cmd]
        self._spawn("munged", cmd)
        self.wait_for("munged's socket", self.munge_socket.exists, timeout=30)

    def _mysql(self, sql: str, *database: str) -> str:
        """``sql`` on the MariaDB server (in ``database`` if given); its rows, tab-separated."""
        return subprocess.run(["mysql", "-h", MARIADB["host"], "-P", MARIADB["port"], "-u", MARIADB["user"], "-N",
                               "-e", sql, *database], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=60).stdout

    def accounting_sql(self, sql: str) -> str:
        """Run ``sql`` in slurmdbd's own database (to put a record in a state slurmdbd itself produces)."""
        return self._mysql(sql, self.db)

    def _create_database(self) -> None:
        try:
            self._mysql(f"CREATE DATABASE `{self.db}`")
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SlurmUnavailable(f"cannot create the slurmdbd database on MariaDB at "
                                   f"{MARIADB['host']}:{MARIADB['port']}: {getattr(exc, 'stderr', exc)}") from None
        self.db_created = True

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.dir / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def _start_slurmdbd(self) -> None:
        env_conf = ["-D", "-s"]
        self._spawn("slurmdbd", ["slurmdbd", *env_conf])

        def up() -> bool:
            return self.run("sacctmgr", "-n", "-P", "show", "cluster", check=False, timeout=30).returncode == 0

        self.wait_for("slurmdbd (sacctmgr show cluster)", up)

    def _start_slurmctld(self) -> None:
        self.run("sacctmgr", "-i", "add", "cluster", self.name)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        self.wait_for("slurmctld (scontrol ping)",
                      lambda: "UP" in self.run("scontrol", "ping", check=False, timeout=30).stdout)

    def _register_accounts(self) -> None:
        self.run("sacctmgr", "-i", "add", "account", self.account, f"cluster={self.name}")
        self.run("sacctmgr", "-i", "add", "user", self.user, f"account={self.account}", f"cluster={self.name}")

    def _start_slurmd(self) -> None:
        self._spawn("slurmd", ["slurmd", "-D", "-N", "localhost"])

        def idle() -> bool:
            out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False, timeout=30).stdout.split()
            if any(s.rstrip("*~#$@^-") in ("drained", "draining", "inval", "down") for s in out):
                reason = self.run("sinfo", "-h", "-R", "-o", "%E", check=False).stdout.strip()
                raise SlurmUnavailable(f"node localhost is {out}: {reason}")
            return bool(out) and all(s.rstrip("*~#") in ("idle",) for s in out)

        self.wait_for("node localhost idle (sinfo)", idle)

    # --- jobs -------------------------------------------------------------------------
    def sbatch(self, *args: str) -> str:
        """Submit a batch job; returns its job id."""
        defaults = [] if any(a.startswith(("--output", "-o")) for a in args) else [f"--output={self.dir}/job-%j.out"]
        out = self.run("sbatch", "--parsable", f"--chdir={self.dir}", *defaults, *args).stdout.strip()
        return out.split(";")[0]

    def job_state(self, job: str) -> str:
        """The job's state now: slurmctld's view (scontrol), else the accounting's latest record (sacct)."""
        out = self.run("scontrol", "-o", "show", "job", job, check=False).stdout
        for part in out.split():
            if part.startswith("JobState="):
                return part.split("=", 1)[1]
        acct = self.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "State", check=False).stdout.split()
        return acct[0] if acct else ""

    def requeue(self, job: str) -> None:
        """``scontrol requeue`` a running job; it starts again after ``cred_expire`` (10 s here, 120 s by default)."""
        self.run("scontrol", "requeue", job)

    # --- stop -------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop every daemon (SIGTERM, then SIGKILL of its process group), drop the database, remove the files."""
        for name in ("slurmd", "slurmctld", "slurmdbd", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=20)
        # job processes that slurmd started (their own sessions) are gone with slurmd's KillWait;
        # anything left that still names this cluster's files is ours
        for pid in pids_mentioning(str(self.dir)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if getattr(self, "db_created", False):
            try:
                self._mysql(f"DROP DATABASE IF EXISTS `{self.db}`")
            except (OSError, subprocess.CalledProcessError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def pids_mentioning(text: str) -> list[int]:
    """Processes whose command line or environment mentions ``text`` (this cluster's directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if text.encode() in blob:
            found.append(int(entry.name))
    return found


if __name__ == "__main__":  # a manual check: start, submit one job, print sacct, stop
    c = SlurmCluster().start()
    try:
        job = c.sbatch("--wrap", "sleep 1", "--gpus=1")
        job2 = c.sbatch("--wrap", "srun sleep 1", "-p", "batch", "-n", "2", "--gpus-per-task=1")
        c.wait_for("job done", lambda: c.job_state(job) in ("COMPLETED", "FAILED"), timeout=120)
        c.wait_for("job done", lambda: c.job_state(job2) in ("COMPLETED", "FAILED"), timeout=120)
        print(c.run("sacct", "--parsable2", "--duplicates", "-j", f"{job},{job2}",
                    "--format", "JobID,State,AllocTRES,NodeList,Partition,ElapsedRaw,Start,End").stdout)
    finally:
        c.stop()
