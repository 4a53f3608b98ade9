"""Peak dense bf16 throughput per GPU, for MFU.

The figures are the ledger catalog's (spec §3): RTX 4090 165.2, A100 312,
H100 SXM 989, H200 989 TFLOPs. Unknown devices (and CPUs) give ``None``:
MFU is then not reported rather than guessed.
"""

from __future__ import annotations

import os
from typing import Optional

#: (substring of torch.cuda.get_device_name(), excluded substring, peak bf16 dense TFLOPs)
_PEAKS: tuple[tuple[str, Optional[str], float], ...] = (
    ("RTX 4090", None, 165.2),
    ("A100", None, 312.0),
    ("H100", "PCIE", 989.0),  # the SXM figure; PCIe parts peak lower and are not in the catalog
    ("H200", None, 989.0),
)


def lookup_peak_tflops(device_name: Optional[str]) -> Optional[float]:
    """Peak bf16 dense TFLOPs for a CUDA device name, or ``None`` when unknown."""
    if not device_name:
        return None
    upper = device_name.upper()
    for needle, exclude, tflops in _PEAKS:
        if needle in upper and not (exclude and exclude in upper):
            return tflops
    return None


def cuda_available() -> bool:
    """True when torch is installed and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def device_name() -> Optional[str]:
    """``torch.cuda.get_device_name()`` of the current device, or ``None`` on CPU."""
    if not cuda_available():
        return None
    import torch

    return torch.cuda.get_device_name()


def resolve_peak_tflops(configured: Optional[float] = None) -> Optional[float]:
    """Peak TFLOPs per device: config value, else ``$TRAINLEDGER_PEAK_TFLOPS``, else lookup; ``None`` on CPU."""
    if not cuda_available():
        return None
    if configured is not None:
        return float(configured)
    env = os.environ.get("TRAINLEDGER_PEAK_TFLOPS")
    if env:
        return float(env)
    return lookup_peak_tflops(device_name())
