"""Process group, launcher environment and the dp × tp × pp rank grid.

The backend follows the hardware: NCCL when CUDA is available, gloo on CPU.
Ranks come from the torchrun / DeepSpeed launcher environment (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); a plain
``python -m trainledger.trainer.train`` without them runs as a single process.

The grid is DeepSpeed's ``PipeModelDataParallelTopology(num_pp, num_mp,
num_dp)``: tensor-parallel ranks are adjacent (fast intra-node links), then
data parallel, then pipeline stages. Its ``PipelineParallelGrid`` is the
``mpu`` DeepSpeed uses for data-parallel groups and gradient norms.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from trainledger.trainer.parallel import ParallelPlan
from trainledger.trainer.tensor_parallel import TPGroup

#: Overrides the reported hostname; lets tests run two "nodes" on one machine.
HOSTNAME_ENV = "TRAINLEDGER_HOSTNAME"
#: Seconds a collective (and the process group's setup) may wait for the other ranks before it fails
#: (default: torch's, 30 minutes). A node that stops answering — its link cut, its host frozen — ends
#: the run this long after, instead of holding the ranks on the other nodes forever.
COMM_TIMEOUT_ENV = "TRAINLEDGER_COMM_TIMEOUT_S"


def comm_timeout():
    """``$TRAINLEDGER_COMM_TIMEOUT_S`` as a timedelta (None: torch's default; a bad value is said once and torch's
    default is used: ``trainledger.store.envsettings``, the job's side never stops over a setting)."""
    from datetime import timedelta

    from trainledger.store.envsettings import COMM_TIMEOUT_S, env_optional

    seconds = env_optional(COMM_TIMEOUT_S)
    return None if seconds is None else timedelta(seconds=seconds)


def hostname() -> str:
    """This process's node name: ``$TRAINLEDGER_HOSTNAME`` or the machine's hostname."""
    return os.environ.get(HOSTNAME_ENV) or socket.gethostname()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @property
    def nodes(self) -> int | None:
        """Node count implied by the launcher (world ÷ local world), when it says."""
        if self.world_size % self.local_world_size:
            return None
        return self.world_size // self.local_world_size


def launch_env(local_rank_arg: int | None = None) -> LaunchEnv:
    """Read the launcher environment; without one, set up a single local process."""
    if "WORLD_SIZE" not in os.environ:
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", local_rank_arg if local_rank_arg is not None else 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("LOCAL_SIZE") or world)
    return LaunchEnv(rank=int(os.environ.get("RANK", 0)), local_rank=local_rank, world_size=world,
                     local_world_size=local_world)


def backend_name() -> str:
    """``nccl`` with CUDA, else ``gloo``."""
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def init_distributed(env: LaunchEnv) -> str:
    """Initialise ``deepspeed.comm`` (idempotent); return the device string for this rank."""
    import deepspeed
    import torch

    device = "cpu"
    if torch.cuda.is_available():
        torch.cuda.set_device(env.local_rank)
        device = f"cuda:{env.local_rank}"
    else:
        # On CPU DeepSpeed JIT-compiles a shared-memory all-reduce op at init (about a minute, and a
        # C++ toolchain); only its inference all-reduce uses it, training collectives go through gloo.
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    timeout = comm_timeout()
    if timeout is not None:
        # the groups DeepSpeed makes later (data-, model-, pipe-parallel: dist.new_group without a timeout)
        # take torch's default, not the world group's: make the default this one
        import torch.distributed.distributed_c10d as c10d

        c10d.default_pg_timeout = timeout
    deepspeed.init_distributed(dist_backend=backend_name(), auto_mpi_discovery=False,
                               **({"timeout": timeout} if timeout is not None else {}))
    return device


@dataclass
class Grid:
    """The rank grid of a plan: DeepSpeed topology + mpu, and this rank's coordinates."""

    topology: object
    mpu: object
    dp_rank: int
    tp: TPGroup
    pp_stage: int


def build_grid(plan: ParallelPlan) -> Grid:
    """Create the process groups for ``plan`` (a collective call: every rank must make it)."""
    from deepspeed.runtime.pipe.topology import PipelineParallelGrid, PipeModelDataParallelTopology

    topology = PipeModelDataParallelTopology(num_pp=plan.pp, num_mp=plan.tp, num_dp=plan.dp)
    mpu = PipelineParallelGrid(topology=topology)
    tp = TPGroup(group=mpu.get_slice_parallel_group(), rank=mpu.get_slice_parallel_rank(),
                 size=mpu.get_slice_parallel_world_size())
    return Grid(topology=topology, mpu=mpu, dp_rank=mpu.get_data_parallel_rank(), tp=tp,
                pp_stage=mpu.get_stage_id())
