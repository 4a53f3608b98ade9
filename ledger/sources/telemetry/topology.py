"""Where a wrapped command runs: nodes, this node's rank, processes and GPUs per node, the shared run id.

``trainledger run`` learns the topology, strongest source first, from

1. its own flags (``--nodes``, ``--node-rank``, ``--gpus-per-node``, ``--run-id``);
2. the environment it runs in: Slurm (``SLURM_JOB_ID``, ``SLURM_JOB_NUM_NODES``,
   ``SLURM_NODEID``, ``SLURM_GPUS_ON_NODE``/``SLURM_JOB_GPUS``, ``SLURM_RESTART_COUNT``),
   torchelastic (``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``/``NODE_RANK``,
   ``TORCHELASTIC_RUN_ID``), DeepSpeed's launcher (``CROSS_SIZE``, ``CROSS_RANK``,
   ``LOCAL_SIZE``) and ``CUDA_VISIBLE_DEVICES``;
3. the command it wraps: ``torchrun``/``python -m torch.distributed.run``
   (``--nnodes``, ``--nproc-per-node``, ``--node-rank``, ``--rdzv-id``, ``--standalone``),
   ``deepspeed`` (``--num_nodes``, ``--num_gpus``), ``accelerate launch``
   (``--num_machines``, ``--num_processes``, ``--machine_rank``), ``srun`` (``-N``,
   ``--ntasks-per-node``).

A flag that contradicts the environment or the command (``--nodes 2`` inside a
one-node Slurm allocation) is an error, as is a multi-node run without a shared
run id. The run id of a Slurm job is :func:`trainledger.store.ids.slurm_run_id` (with the
cluster only from ``--cluster``, as ``slurm sync --cluster``), the id ``slurm sync`` gives
the job's accounting record; a requeued job (``SLURM_RESTART_COUNT`` N > 0) is
``<that id>-r<N>`` (:func:`trainledger.store.ids.slurm_attempt_id`, the id the sync gives that
attempt's record too), recorded as a restart of ``-r<N−1>`` (or of the first run).

A Slurm job is one run (the allocation, what is paid for), whatever its steps: the
first wrapped step (the batch script, or step 0) owns it; a later step (``SLURM_STEP_ID``
> 0), or a wrapper started after the job's run already ended, is a *part*: it adds
its node row ``NODE/stepN`` to the job's run and never registers or ends it.
``srun -N k`` in the command is a step on k nodes of an n-node allocation; the run
keeps the allocation's n nodes.

One wrapper per node records the node. A wrapper started for a second task of
the same node (``SLURM_LOCALID`` or ``LOCAL_RANK`` > 0) or inside another
wrapper's command (``TRAINLEDGER_WRAPPED``) records nothing and just runs the
command (``passive``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from trainledger.errors import LedgerInputError
from trainledger.sources.telemetry.sampling import owned_gpus
from trainledger.store.envsettings import env_run_id
from trainledger.store.ids import new_run_id, previous_attempt, slurm_attempt_id, slurm_run_id, validate_run_id

ENV_WRAPPED = "TRAINLEDGER_WRAPPED"  # set in the command's environment: the run id it is wrapped in
ENV_RUN_ID = "TRAINLEDGER_RUN_ID"

#: torchrun options that take no value
_TORCHRUN_FLAGS_NO_VALUE = {"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path", "--run_path"}


@dataclass
class CommandFacts:
    """What the wrapped command line says about the topology (None: it does not say)."""

    launcher: str
    nodes: Optional[int] = None
    node_rank: Optional[int] = None
    processes_per_node: Optional[int] = None
    rendezvous_id: Optional[str] = None


@dataclass
class Topology:
    """The node this wrapper records and the run it belongs to."""

    run_id: str
    run_id_from: str  # --run-id | env | slurm | torchrun | new
    nodes: int
    node_rank: int
    node_name: str
    gpus_per_node: int
    processes_per_node: Optional[int]
    launcher: str
    gpus: Optional[list[str]]  # the GPUs the job owns on this node (None: the environment does not say)
    resume_of: Optional[str] = None
    passive: Optional[str] = None  # why this wrapper records nothing (None: it records its node)
    facts: dict = field(default_factory=dict)  # what was detected where, recorded with the run
    part: Optional[str] = None  # a later part of a Slurm job's run (``step3``): adds its node, never owns
    alloc: dict = field(default_factory=dict)  # what the node holds: gpus, mig devices, exclusive (shares)

    @property
    def owns_run(self) -> bool:
        """Node 0 registers the run and records its end; the others add their node (as do later parts of a
        Slurm job: its steps after the first)."""
        return self.node_rank == 0 and self.part is None

    @property
    def node_key(self) -> str:
        """The name this wrapper's node row has in the run: the node's name, ``NODE/stepN`` for a part."""
        return self.node_name if self.part is None else f"{self.node_name}/{self.part}"[:200]

    def make_part(self, part: str) -> None:
        """Record this wrapper as a later part of its (Slurm job's) run, not as its owner."""
        self.part = part


def _int(value: Optional[str], what: str) -> Optional[int]:
    if value is None or value == "":
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise LedgerInputError(f"{what}: expected a whole number, got {value!r}") from None


def _range_int(value: Optional[str], what: str) -> Optional[int]:
    """``2`` → 2; an elastic ``1:4`` or Slurm ``2-4`` range → its maximum if both ends agree, else None."""
    if value is None:
        return None
    for sep in (":", "-"):
        if sep in value:
            lo, hi = value.split(sep, 1)
            return _int(hi, what) if _int(lo, what) == _int(hi, what) else None
    return _int(value, what)


def _options(args: Sequence[str], flags: set[str]) -> dict[str, Optional[str]]:
    """``--opt value`` / ``--opt=value`` / ``-N value`` options up to the first positional argument."""
    out: dict[str, Optional[str]] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "--":
            break
        if "=" in a:
            k, v = a.split("=", 1)
            out[k.replace("_", "-")] = v
        elif a in flags or i + 1 >= len(args):
            out[a.replace("_", "-")] = None
        else:
            out[a.replace("_", "-")] = args[i + 1]
            i += 1
        i += 1
    return out


def parse_command(command: Sequence[str]) -> CommandFacts:
    """The launcher of a command line and the topology its options give."""
    prog = os.path.basename(command[0]) if command else ""
    args = list(command[1:])
    if prog.startswith("python") and args[:2] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
        prog, args = "torchrun", args[2:]
    if prog == "torchrun":
        o = _options(args, _TORCHRUN_FLAGS_NO_VALUE)
        nproc = o.get("--nproc-per-node")
        return CommandFacts("torchrun", 1 if "--standalone" in o else _range_int(o.get("--nnodes"), "torchrun --nnodes"),
                            _int(o.get("--node-rank"), "torchrun --node-rank"),
                            _int(nproc, "torchrun --nproc-per-node") if nproc and nproc.isdigit() else None,
                            o.get("--rdzv-id") if o.get("--rdzv-id") not in (None, "none") else None)
    if prog == "deepspeed":
        o = _options(args, {"--no_ssh", "--no-ssh", "--autotuning", "--force_multi", "--force-multi"})
        return CommandFacts("deepspeed", _int(o.get("--num-nodes"), "deepspeed --num_nodes"),
                            _int(o.get("--node-rank"), "deepspeed --node_rank"),
                            _int(o.get("--num-gpus"), "deepspeed --num_gpus"))
    if prog == "accelerate" and args[:1] == ["launch"]:
        o = _options(args[1:], {"--multi-gpu", "--cpu", "-m", "--module", "--no-python", "--use-deepspeed",
                                "--use-fsdp", "--debug", "-q", "--quiet"})
        machines = _int(o.get("--num-machines"), "accelerate --num_machines")
        procs = _int(o.get("--num-processes"), "accelerate --num_processes")
        return CommandFacts("accelerate", machines, _int(o.get("--machine-rank"), "accelerate --machine_rank"),
                            procs // machines if procs and machines else (procs if machines in (None, 1) else None))
    if prog == "srun":
        o = _options(args, {"--exclusive", "-l", "--label", "--pty", "-u", "--unbuffered"})
        nodes = o.get("-N", o.get("--nodes"))
        return CommandFacts("srun", _range_int(nodes, "srun --nodes"), None,
                            _int(o.get("--ntasks-per-node"), "srun --ntasks-per-node"))
    return CommandFacts("python" if prog.startswith("python") else (prog[:20] or "command"))


def _slurm(env: Mapping[str, str]) -> dict:
    if not env.get("SLURM_JOB_ID"):
        return {}
    gpus = _int(env.get("SLURM_GPUS_ON_NODE"), "SLURM_GPUS_ON_NODE")
    return {"job_id": env["SLURM_JOB_ID"], "cluster": env.get("SLURM_CLUSTER_NAME", ""),
            "nodes": _int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES"), "SLURM_JOB_NUM_NODES"),
            "node_rank": _int(env.get("SLURM_NODEID"), "SLURM_NODEID"), "gpus": gpus,
            "local_id": _int(env.get("SLURM_LOCALID"), "SLURM_LOCALID"),
            "restarts": _int(env.get("SLURM_RESTART_COUNT"), "SLURM_RESTART_COUNT") or 0,
            "node_name": env.get("SLURMD_NODENAME"), "step": _step(env),
            "step_nodes": _int(env.get("SLURM_STEP_NUM_NODES"), "SLURM_STEP_NUM_NODES")}


def _step(env: Mapping[str, str]) -> Optional[int]:
    """The job step this wrapper runs in (``srun``), None in the batch script or an ``salloc`` shell (Slurm's
    special step ids, batch/extern/interactive, are above 0xFFFFFFF0)."""
    step = _int(env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID"), "SLURM_STEP_ID")
    return step if step is not None and step < 0xFFFFFFF0 else None


def _elastic(env: Mapping[str, str]) -> dict:
    """torchelastic's (or DeepSpeed's launcher's) variables, when the wrapper itself runs as a worker."""
    local = env.get("LOCAL_RANK")
    if local is None:
        return {}
    world = _int(env.get("WORLD_SIZE"), "WORLD_SIZE")
    local_world = _int(env.get("LOCAL_WORLD_SIZE") or env.get("LOCAL_SIZE"), "LOCAL_WORLD_SIZE")
    rank = env.get("GROUP_RANK") or env.get("NODE_RANK") or env.get("CROSS_RANK")
    cross = _int(env.get("CROSS_SIZE"), "CROSS_SIZE")
    rid = env.get("TORCHELASTIC_RUN_ID")
    return {"local_rank": _int(local, "LOCAL_RANK"), "node_rank": _int(rank, "GROUP_RANK"),
            "nodes": cross or (world // local_world if world and local_world else None),
            "processes": local_world, "rendezvous_id": rid if rid not in (None, "", "none") else None}


@dataclass
class Flags:
    """The topology flags of ``trainledger run`` (None: not given)."""

    run_id: Optional[str] = None
    nodes: Optional[int] = None
    node_rank: Optional[int] = None
    gpus_per_node: Optional[int] = None
    node_name: Optional[str] = None
    cluster: Optional[str] = None
    resume_of: Optional[str] = None
    exclusive: bool = False
    mig_profile: Optional[str] = None


def allocation(flags: Flags, env: Mapping[str, str], command: Sequence[str], gpus: Optional[list[str]],
               slurm_gpus: Optional[int]) -> dict:
    """What this node's run holds of it, for its share (:func:`trainledger.money.allocation.shares.alloc_share`): the GPUs it
    owns (``CUDA_VISIBLE_DEVICES``, else Slurm's GPU lists, else ``SLURM_GPUS_ON_NODE``; None: not said), its
    MIG devices with their profile (``--mig-profile`` or ``$TRAINLEDGER_MIG_PROFILE``), and whether it holds
    the node exclusively (``--exclusive``, or ``srun --exclusive`` / ``--exclusive`` in an sbatch-style command)."""
    held = len(gpus) if gpus else (slurm_gpus if gpus is None else None)
    mig = [g for g in gpus or [] if g.startswith("MIG-")]
    profile = flags.mig_profile or env.get("TRAINLEDGER_MIG_PROFILE") or None
    exclusive = bool(flags.exclusive) or (bool(command) and os.path.basename(command[0]) in ("srun", "sbatch", "salloc")
                                          and "--exclusive" in command)
    return {"gpus": held, "mig": len(mig), "mig_profile": profile, "exclusive": exclusive}


def _agree(flag_name: str, flag: Optional[int], found: list[tuple[str, Optional[int]]]) -> Optional[int]:
    """The flag's value if it agrees with every source that says something, else the sources' value;
    a one-line error when they disagree."""
    known = [(src, v) for src, v in found if v is not None]
    for src, v in known:
        if flag is not None and flag != v:
            raise LedgerInputError(f"{flag_name} {flag} conflicts with {src} = {v}; drop {flag_name} or fix the "
                                   f"{'command' if ' ' in src else 'environment'}")
    values = {v for _, v in known}
    if flag is None and len(values) > 1:
        raise LedgerInputError(f"{flag_name.lstrip('-')}: the sources disagree ({', '.join(f'{s} = {v}' for s, v in known)}); "
                               f"pass {flag_name}")
    return flag if flag is not None else (known[0][1] if known else None)


def resolve(flags: Flags, env: Mapping[str, str], command: Sequence[str],
            nvml_gpus: Optional[int] = None) -> Topology:
    """The topology of this wrapper from its flags, its environment and its command (see the module doc)."""
    cmd, slurm, elastic = parse_command(command), _slurm(env), _elastic(env)
    # inside an allocation, `srun -N k` is a step on k of its nodes: the run is the allocation (what is paid for)
    cmd_nodes = None if slurm and cmd.launcher == "srun" else cmd.nodes
    nodes = _agree("--nodes", flags.nodes, [("SLURM_JOB_NUM_NODES", slurm.get("nodes")),
                                            ("WORLD_SIZE ÷ LOCAL_WORLD_SIZE", elastic.get("nodes")),
                                            (f"{cmd.launcher} nodes in the command", cmd_nodes)]) or 1
    node_rank = _agree("--node-rank", flags.node_rank, [("SLURM_NODEID", slurm.get("node_rank")),
                                                       ("GROUP_RANK", elastic.get("node_rank")),
                                                       (f"{cmd.launcher} node rank in the command", cmd.node_rank)]) or 0
    if nodes < 1 or not 0 <= node_rank < nodes:
        raise LedgerInputError(f"--node-rank: {node_rank} is not a node of a {nodes}-node run (0 to {nodes - 1})")
    processes = elastic.get("processes") or cmd.processes_per_node
    gpus = owned_gpus(env)
    gpn = flags.gpus_per_node or (len(gpus) if gpus else None) or slurm.get("gpus") or nvml_gpus or processes or 1
    run_id, source, resume_of = _run_id(flags, env, slurm, elastic, cmd, nodes)
    passive = None
    if env.get(ENV_WRAPPED):
        passive = f"already inside the wrapper of run {env[ENV_WRAPPED]}"
    elif (slurm.get("local_id") or 0) > 0:
        passive = f"task {slurm['local_id']} of this node (SLURM_LOCALID); task 0 records the node"
    elif (elastic.get("local_rank") or 0) > 0:
        passive = f"local rank {elastic['local_rank']}; local rank 0 records the node"
    node_name = flags.node_name or slurm.get("node_name") or socket.gethostname()
    facts = {"command": vars(cmd), "slurm": slurm or None, "elastic": elastic or None, "gpus": gpus}
    part = f"step{slurm['step']}" if source == "slurm" and (slurm.get("step") or 0) > 0 else None
    alloc = allocation(flags, env, command, gpus, slurm.get("gpus"))
    return Topology(run_id, source, nodes, node_rank, node_name[:200], gpn, processes, cmd.launcher, gpus,
                    flags.resume_of or resume_of, passive, facts, part, alloc)


def slurm_part(topology: Topology, journal_dir) -> None:
    """A later wrapped part of a Slurm job on this node (its run's journal is here already): a part of the
    job's run, never its second owner (see docs/SLURM.md)."""
    from pathlib import Path

    if topology.run_id_from == "slurm" and topology.owns_run and (Path(journal_dir) / f"{topology.run_id}.jsonl").exists():
        topology.make_part(f"part-{os.getpid()}")


def _run_id(flags: Flags, env: Mapping[str, str], slurm: dict, elastic: dict, cmd: CommandFacts,
            nodes: int) -> tuple[str, str, Optional[str]]:
    """The run id, where it came from, and the run a requeued Slurm job restarts."""
    if flags.run_id:
        return validate_run_id(flags.run_id, "--run-id"), "--run-id", None
    from_env = env_run_id(env) if not env.get(ENV_WRAPPED) else None  # a bad one: said once, not used (issue 37)
    if from_env:
        return from_env, "env", None
    if slurm:
        # the id `slurm sync` gives the job: the cluster only when told (--cluster, as for the sync), never
        # from $SLURM_CLUSTER_NAME, which every job has and a sync without --cluster does not use
        base = slurm_run_id(slurm["job_id"], flags.cluster or "")
        n = slurm["restarts"]  # a requeued job: each attempt a run of its own, restarting the one before
        return slurm_attempt_id(base, n), "slurm", previous_attempt(base, n)
    rdzv = elastic.get("rendezvous_id") or cmd.rendezvous_id
    if rdzv and nodes > 1:
        return validate_run_id(f"torchrun-{rdzv}", "torchrun --rdzv-id (as run id torchrun-<id>)"), "torchrun", None
    if nodes > 1:
        raise LedgerInputError(f"--run-id: a {nodes}-node run needs one run id shared by every node's wrapper; pass "
                               "--run-id ID to each (under Slurm the job id is used; with torchrun, --rdzv-id)")
    return new_run_id(), "new", None
