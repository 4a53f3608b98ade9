"""How fast this machine computes right now: single-threaded fp32 matmuls in N concurrent processes.

    python -m bench.cpu_probe PROCESSES [--seconds 3]      # prints GFLOP/s per process (median of the processes)

On a shared machine a process's compute rate changes from minute to minute with
the other jobs' load. ``bench.plan_accuracy`` runs this probe right before and
right after each measured run, with as many processes as the run has ranks, so
the CPU profile's compute rate is what a rank could get *at that time* — the
CPU's counterpart of knowing which GPU (and clock) a run had. The probe is a
separate process: it never sees the run's own step times.

The work is the trainer's own kind: ``torch.mm`` of a micro-batch of 4 × 256
tokens by a 256 × 256 weight (llama-small's attention projection), fp32, one
thread. The processes stay loaded between probes (:class:`Prober`), start together, run for ``--seconds``, and
each reports 2·M·K·N·count ÷ elapsed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

M, K, N = 1024, 256, 256


def _worker(inbox, out) -> None:
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(M, K), torch.randn(K, N)
    torch.mm(a, b)  # warm
    while (job := inbox.get()) is not None:
        seconds, start_at = job
        time.sleep(max(0.0, start_at - time.time()))
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            torch.mm(a, b)
            count += 1
        out.put(2 * M * K * N * count / elapsed / 1e9)


class Prober:
    """Up to ``size`` idle probe processes (torch loaded once); :meth:`rate` runs ``n`` of them together."""

    def __init__(self, size: int = 4):
        ctx = mp.get_context("spawn")
        self._out = ctx.Queue()
        self._inboxes = [ctx.Queue() for _ in range(size)]
        self._procs = [ctx.Process(target=_worker, args=(q, self._out), daemon=True) for q in self._inboxes]
        for p in self._procs:
            p.start()

    def rate(self, n: int, seconds: float = 3.0) -> float:
        """GFLOP/s per process: the median over ``n`` concurrent single-threaded matmul loops."""
        start_at = time.time() + 0.5
        for q in self._inboxes[:n]:
            q.put((seconds, start_at))
        return statistics.median(self._out.get(timeout=900) for _ in range(n))

    def close(self) -> None:
        for q in self._inboxes:
            q.put(None)
        for p in self._procs:
            p.join(timeout=60)

    def __enter__(self) -> "Prober":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def probe(processes: int, seconds: float = 3.0) -> float:
    """One probe of ``processes`` concurrent processes (starts and stops its own)."""
    with Prober(processes) as p:
        return p.rate(processes, seconds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cpu_probe", description=__doc__.splitlines()[0])
    ap.add_argument("processes", type=int)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args(argv)
    print(f"{probe(a.processes, a.seconds):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
