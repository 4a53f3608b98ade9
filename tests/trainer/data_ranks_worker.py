"""Real multi-rank data check: each rank reads its epoch-0 samples from the tar shards.

    python -m torch.distributed.run --nproc-per-node W data_ranks_worker.py SHARD_DIR OUT.json MICRO GRAD_ACCUM

Ranks take their dp rank from the process group (gloo), read their share of
epoch 0 through WebDataset, and all-gather the sample keys; rank 0 writes
{"world": W, "keys": [[keys of rank 0], [keys of rank 1], ...], "per_step": [...]}.
"""

import json
import os
import sys
from itertools import islice

import torch.distributed as dist
from trainledger.trainer.data import SampleStream


def main() -> None:
    shard_dir, out, micro, accum = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    stream = SampleStream(shard_dir, dp_rank=rank, dp_size=world, micro_batch=micro, grad_accum=accum, seed=7)
    count = len(stream.epoch_keys(0))
    keys = [key for key, _ in islice(stream.samples(), count)]
    gathered = [None] * world
    dist.all_gather_object(gathered, keys)
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"world": world, "keys": gathered}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # skip teardown of torch's leftover gloo threads (see trainledger.trainer.train.run_and_exit)
