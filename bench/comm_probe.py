"""Measure this machine's collective latency and bandwidth (gloo) and a trainer process's resident baseline.

    python -m torch.distributed.run --nproc-per-node 2 bench/comm_probe.py OUT.json

Every rank initialises ``deepspeed.comm`` as the trainer does (``trainledger.trainer.distributed``)
and imports the trainer's engine; ``baseline_rss_bytes`` is the largest
resident set of a rank at that point (what a CPU run holds before its model,
data and optimizer). Then all-reduces of 1 KiB … 64 MiB fp32 are timed (median
of 7), and α, β fitted to the ring model t = 2(n−1)·α + 2(n−1)/n · M/β by least
squares on the relative error. Rank 0 writes the JSON.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time


def main(out: str) -> None:
    import torch
    import trainledger.trainer.engine  # noqa: F401  (the modules a training process holds)
    from deepspeed import comm as dist
    from trainledger.trainer.distributed import init_distributed, launch_env

    env = launch_env()
    init_distributed(env)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    n = env.world_size
    points = []
    for kib in (1, 16, 256, 4096, 16384, 65536):
        x = torch.ones(kib * 256, dtype=torch.float32)
        times = []
        for _ in range(7):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - t0)
        points.append((kib * 1024, statistics.median(times)))
    rss_all = [None] * n
    dist.all_gather_object(rss_all, rss)
    # t = a + b·M with a = 2(n−1)·α, b = 2(n−1)/(n·β), fitted by least squares on the relative error
    # (weights 1/t²), so the 1 KiB point fixes α as much as the 64 MiB point fixes β
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    w = [1 / y**2 for y in ys]
    sw, swx, swy = sum(w), sum(wi * x for wi, x in zip(w, xs)), sum(wi * y for wi, y in zip(w, ys))
    swxx, swxy = sum(wi * x * x for wi, x in zip(w, xs)), sum(wi * x * y for wi, x, y in zip(w, xs, ys))
    b = (sw * swxy - swx * swy) / (sw * swxx - swx**2)
    a = (swy - b * swx) / sw
    if env.rank == 0:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"world_size": n, "alpha_s": max(a, 0.0) / (2 * (n - 1)), "beta_bytes_per_s": 2 * (n - 1) / (n * b),
                       "points": points, "baseline_rss_bytes": max(rss_all)}, fh, indent=2)


if __name__ == "__main__":
    main(sys.argv[1])
    sys.stdout.flush()
    os._exit(0)
