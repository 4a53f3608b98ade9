"""A plain torch.distributed script (not the bundled trainer): all-reduces on gloo, then reports.

    torchrun --nproc-per-node 2 ddp_job.py OUT_DIR ITERATIONS

Each rank writes ``OUT_DIR/rank<R>.txt``: world size, LOCAL_WORLD_SIZE and its own wall seconds.
"""

import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    t0 = time.time()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.ones(50_000)
    for _ in range(int(sys.argv[2])):
        dist.all_reduce(x)
        x.fill_(1.0)
    dist.barrier()
    with open(os.path.join(sys.argv[1], f"rank{rank}.txt"), "w") as fh:
        fh.write(f"{world} {os.environ['LOCAL_WORLD_SIZE']} {time.time() - t0}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
