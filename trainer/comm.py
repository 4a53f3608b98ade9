"""Measured communication time: timed wrappers around DeepSpeed's communication backend.

DeepSpeed routes its collectives (ZeRO reduce-scatter/all-gather, gradient
all-reduce, pipeline send/recv, the trainer's tensor-parallel all-reduces)
through ``deepspeed.comm``, whose calls land on one backend object. The
:class:`CommTimer` wraps that object's communication methods and adds up the
wall-clock seconds spent inside them. Nested calls count once.

On CPU (gloo) synchronous collectives block, so the time is the collective's
duration; for async ops only the launch is counted (their wait shows up as
compute). On CUDA each timed call is bracketed by device synchronisation —
as DeepSpeed's own comms logger does — so the figure is the serialised
communication time, an upper bound on what overlap could hide; turn
``comm_timing`` off for peak-throughput runs. (DeepSpeed's comms logger is
not used: its per-op timers accumulate and re-sum every event, so its
latencies are cumulative and its cost grows with run length.)

comm_share = Σ seconds in communication calls during steps ÷ Σ step seconds
"""

from __future__ import annotations

import functools
import threading
import time

#: Backend methods that move data between ranks.
COMM_METHODS = (
    "all_reduce", "all_reduce_coalesced", "inference_all_reduce", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_base",
    "all_gather_coalesced", "all_to_all_single", "all_to_all", "send", "recv", "isend", "irecv",
    "batch_isend_irecv", "gather", "scatter", "barrier",
)


class CommTimer:
    """Accumulates seconds spent in DeepSpeed communication calls of this process."""

    def __init__(self, synchronize_cuda: bool = False):
        self.seconds = 0.0
        self.calls = 0
        self._sync = synchronize_cuda
        self._local = threading.local()
        self._installed: list[tuple[object, str]] = []

    def _wrap(self, fn):
        timer = self

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            depth = getattr(timer._local, "depth", 0)
            if depth:
                return fn(*args, **kwargs)
            timer._local.depth = 1
            try:
                if timer._sync:
                    import torch

                    torch.cuda.synchronize()
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    if timer._sync:
                        import torch

                        torch.cuda.synchronize()
                    timer.seconds += time.perf_counter() - start
                    timer.calls += 1
            finally:
                timer._local.depth = 0

        return timed

    def install(self) -> "CommTimer":
        """Wrap the initialised ``deepspeed.comm`` backend's communication methods."""
        from deepspeed.comm import comm as ds_comm

        backend = ds_comm.cdb
        if backend is None:
            raise RuntimeError("deepspeed.comm is not initialised; call deepspeed.init_distributed() first")
        for name in COMM_METHODS:
            fn = getattr(backend, name, None)
            if fn is None or name in vars(backend):
                continue  # missing, or already wrapped by an instance attribute
            setattr(backend, name, self._wrap(fn))
            self._installed.append((backend, name))
        return self

    def uninstall(self) -> None:
        for backend, name in self._installed:
            try:
                delattr(backend, name)
            except AttributeError:
                pass
        self._installed.clear()

    def __enter__(self) -> "CommTimer":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()
