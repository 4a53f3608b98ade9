"""Utilization sampling, off the training thread: one implementation for every way a run is tracked.

The bundled trainer samples each rank's own device, the run wrapper
(``trainledger run``) samples the GPUs its job owns or, on a machine without
GPUs, the CPU share of the command's whole process tree, and the Python API
uses the same sampler. What a sample means is in its ``source``:

* ``nvml``: GPU-Util, NVML ``utilization.gpu`` of each GPU (0–1), with memory in use
  and power draw (integrated to energy);
* ``cpu``: CPU utilization of the processes, CPU seconds ÷ (wall seconds × CPUs
  counted), with their resident memory. It is labelled as such and is never a
  GPU-Util figure.

Only the GPUs a job owns are read: those in ``CUDA_VISIBLE_DEVICES`` (indices or
``GPU-…`` UUIDs), else Slurm's ``SLURM_STEP_GPUS``/``SLURM_JOB_GPUS``, else
every GPU of the node (a job that sets none of them owns the node).
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

#: at most this many points of a series are kept for the ledger (evenly thinned)
MAX_SERIES_POINTS = 300
CPU_GPU = -1  # the "gpu" of a CPU reading: the whole process tree


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between closest ranks (NumPy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# --- which GPUs a job owns ----------------------------------------------------------

def owned_gpus(env: Mapping[str, str]) -> Optional[list[str]]:
    """The GPUs a job owns, as NVML indices or UUIDs; ``[]`` for none, None when the environment does not say.

    ``CUDA_VISIBLE_DEVICES`` wins (``""`` or ``-1``: no GPU; entries after an
    invalid one are invisible to CUDA, so they are dropped too); then Slurm's
    ``SLURM_STEP_GPUS`` and ``SLURM_JOB_GPUS`` (node-local indices).
    """
    for key in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if key not in env:
            continue
        out = []
        for item in (x.strip() for x in env[key].split(",")):
            if item.isdigit() or item.startswith(("GPU-", "MIG-")):
                out.append(item)
            else:  # "-1", "NoDevFiles", "": CUDA sees nothing from here on
                break
        return out
    return None


# --- probes: one read of the devices --------------------------------------------

class Reading(tuple):
    """``(gpu, util, memory_bytes, power_w)``: one device (or the process tree, gpu −1) at one instant."""

    __slots__ = ()

    def __new__(cls, gpu: int, util: Optional[float], memory_bytes: Optional[int] = None,
                power_w: Optional[float] = None):
        return super().__new__(cls, (gpu, util, memory_bytes, power_w))


class NvmlProbe:
    """GPU-Util, memory in use and power of some of the node's GPUs, through NVML (``nvidia-ml-py``).

    ``gpus``: NVML indices or UUIDs (``owned_gpus``); None = every GPU of the node.
    ``labels``: the ``gpu`` number each is recorded under (default: its position, 0…n−1,
    i.e. the CUDA device index the job sees). Raises when NVML or a GPU is missing.
    """

    source = "nvml"

    def __init__(self, gpus: Optional[Iterable[str | int]] = None, labels: Optional[Sequence[int]] = None):
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        if gpus is None:
            gpus = [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.handles = []
        for g in gpus:
            g = str(g)
            if g.isdigit():
                self.handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(g)))
            else:
                self.handles.append(pynvml.nvmlDeviceGetHandleByUUID(g))
        if not self.handles:
            raise RuntimeError("no GPU to sample")
        self.labels = list(labels) if labels is not None else list(range(len(self.handles)))

    def read(self) -> list[Reading]:
        nv = self._nvml
        out = []
        for label, h in zip(self.labels, self.handles):
            util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
            mem = int(nv.nvmlDeviceGetMemoryInfo(h).used)
            try:
                power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW → W
            except nv.NVMLError:
                power = None
            out.append(Reading(label, util, mem, power))
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


class CpuProbe:
    """CPU utilization of a set of processes: Σ CPU seconds ÷ (wall seconds × ``cpus``), and Σ resident memory.

    ``processes()`` returns the ``psutil.Process`` objects to count at each read
    (the trainer: its own process; the wrapper: the command's process tree). A
    process first seen after the previous read counts from its start; one that
    was already running when sampling began counts from then.
    """

    source = "cpu"

    def __init__(self, processes: Callable[[], list[Any]], cpus: int):
        self.processes = processes
        self.cpus = max(1, int(cpus))
        self._seen: dict[tuple[int, float], float] = {}  # (pid, create time) → CPU seconds at the last read
        self._last = time.time()
        self._started = self._last
        self.read()  # baseline

    @staticmethod
    def _cpu_seconds(p) -> float:
        t = p.cpu_times()
        return t.user + t.system

    def read(self) -> list[Reading]:
        import psutil

        now = time.time()
        busy, rss, seen = 0.0, 0, {}
        for p in self.processes():
            try:
                with p.oneshot():
                    key = (p.pid, p.create_time())
                    cpu = self._cpu_seconds(p)
                    rss += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            before = self._seen.get(key)
            if before is None:  # new since the last read: from its start; present at the first read: from now
                before = 0.0 if key[1] >= self._last and self._last > self._started else cpu
            busy += max(0.0, cpu - before)
            seen[key] = cpu
        wall = now - self._last
        self._seen, self._last = seen, now
        util = min(1.0, busy / (wall * self.cpus)) if wall > 0 else None
        return [Reading(CPU_GPU, util, rss or None, None)]

    def close(self) -> None:
        pass


def process_tree(root_pid: int) -> Callable[[], list[Any]]:
    """``processes()`` for :class:`CpuProbe`: the process ``root_pid`` and all its descendants, now."""
    import psutil

    root = psutil.Process(root_pid)

    def tree() -> list[Any]:
        try:
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
    return tree


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), the denominator of a process tree's CPU share."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def nvml_gpu_count(env: Mapping[str, str]) -> Optional[int]:
    """GPUs on this node as NVML counts them, when the environment does not say which the job owns
    (None: it says, or there is no NVML)."""
    if owned_gpus(env) is not None:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount()) or None
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def node_probe(env: Mapping[str, str], processes: Callable[[], list[Any]]):
    """The probe of a job on one node: NVML for the GPUs it owns, else the CPU share of ``processes``.

    A job that owns no GPU (``CUDA_VISIBLE_DEVICES=""``), a machine without
    NVML or without GPUs: CPU, labelled ``cpu``.
    """
    gpus = owned_gpus(env)
    if gpus != []:
        try:
            return NvmlProbe(gpus)
        except Exception:  # no driver, no GPU: the CPU share, labelled as such
            pass
    return CpuProbe(processes, available_cpus())


# --- the sampler ---------------------------------------------------------------------

class UtilSampler(threading.Thread):
    """Reads a probe every ``interval_s`` seconds in a daemon thread and keeps what the ledger needs.

    Per device (``gpu`` number; −1 for a process tree): the utilization series,
    the peak memory and the energy (power × time, when the probe reports power).
    """

    def __init__(self, probe, interval_s: float = 1.0):
        super().__init__(name="trainledger-util", daemon=True)
        self.probe = probe
        self.source: str = probe.source
        self.interval_s = interval_s
        self.series: dict[int, list[tuple[float, float]]] = {}  # gpu → [(unix time, ratio)]
        self.memory_bytes: Optional[int] = None  # Σ over devices at the last read
        self.memory_peak: dict[int, int] = {}
        self.energy_j: dict[int, float] = {}
        self._last_t: Optional[float] = None
        self._halt = threading.Event()

    def sample_once(self) -> None:
        t = time.time()
        readings = self.probe.read()
        dt = (t - self._last_t) if self._last_t is not None else 0.0
        self._last_t = t
        total_mem = None
        for gpu, util, mem, power in readings:
            if util is not None:
                self.series.setdefault(gpu, []).append((t, float(util)))
            if mem is not None:
                total_mem = (total_mem or 0) + mem
                self.memory_peak[gpu] = max(self.memory_peak.get(gpu, 0), mem)
            if power is not None:
                self.energy_j[gpu] = self.energy_j.get(gpu, 0.0) + power * dt
        self.memory_bytes = total_mem

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                self.sample_once()
            except Exception:  # a failed read is a missing sample, never a zero
                pass

    def stop(self) -> None:
        """Stop sampling after one last read (the tail since the previous one: a run shorter than the
        interval still gets its sample), and release the probe."""
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=self.interval_s + 5)
        try:
            if self._last_t is None or time.time() - self._last_t >= 0.1:
                self.sample_once()
        except Exception:
            pass
        try:
            self.probe.close()
        except Exception:
            pass

    def last(self) -> Optional[float]:
        """The latest utilization (mean over devices), None before the first sample."""
        lasts = [s[-1][1] for s in self.series.values() if s]
        return sum(lasts) / len(lasts) if lasts else None

    def summary(self) -> dict[str, Any]:
        """Mean and p95 over every device and sample, the thinned series, and per-device figures."""
        vals = [v for s in self.series.values() for _, v in s]
        merged = sorted((p for s in self.series.values() for p in s), key=lambda p: p[0])
        energy = sum(self.energy_j.values()) / 3.6e6 if self.energy_j else None
        return {"mean": sum(vals) / len(vals) if vals else None, "p95": percentile(vals, 95) if vals else None,
                "values": vals, "series": thin(merged), "source": self.source,
                "per_gpu": {g: thin(s) for g, s in sorted(self.series.items())},
                "mem_peak_bytes": max(self.memory_peak.values()) if self.memory_peak else None,
                "energy_kwh": energy}


def sample_rows(summary: dict[str, Any], node: str) -> list[list]:
    """A sampler summary as ledger samples ``[node, gpu, metric, ts, value]``: ``gpu_util`` per GPU
    (NVML), or ``cpu_util`` of the process tree (gpu −1)."""
    from datetime import datetime, timezone

    metric = "cpu_util" if summary["source"] == "cpu" else "gpu_util"
    return [[node, gpu, metric, datetime.fromtimestamp(t, timezone.utc).isoformat(), v]
            for gpu, series in summary["per_gpu"].items() for t, v in series]


def thin(series: list, max_points: int = MAX_SERIES_POINTS) -> list:
    """Every k-th point so that at most about ``max_points`` remain (the last one always kept)."""
    if len(series) <= max_points:
        return list(series)
    step = -(-len(series) // max_points)
    out = series[::step]
    if out[-1] is not series[-1]:
        out.append(series[-1])
    return out
