"""MFU of the ~1B shape on one GPU: ``python -m bench.mfu [--steps N] [--shape 1b]``.

Trains ``trainer/shapes.py``'s shape (default ``1b``: 24 layers, d 2048, 16
heads, seq 2048, vocab 32k) with the bundled trainer on one GPU in bf16
(``dp``, ZeRO-0, one rank, the shipped corpus), then prints tokens/s (tokens
per step ÷ median step time, warm-up excluded) and

    MFU = tokens/s × FLOPs per token ÷ peak bf16 FLOP/s of the GPU

with FLOPs per token = 6N + 12·L·H·Q·T (``trainledger.trainer.shapes.flops_per_token``)
and the peak from the ledger's catalog (``data/pricing.toml``: the node type
whose GPU matches ``torch.cuda.get_device_name()``). SPEC §11's goal: ≥ 45%
on H100/H200.

Without a GPU it prints one line ``no GPU available: …`` and exits 0; with
``--json FILE`` it writes ``{"mfu": null, "reason": …}`` there (what
``python -m bench`` records).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

GOAL = 0.45


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def catalog_peak(device_name: str) -> tuple[Optional[float], Optional[str]]:
    """(peak bf16 TFLOPs per GPU, node type name) from the catalog for a CUDA device name, else (None, None).

    A node type matches when its GPU family (the name's prefix before ``-``, e.g.
    ``h100`` of ``h100-8x``) appears in the device name; a PCIe part does not
    match an SXM catalog entry (its peak is lower).
    """
    from trainledger.store.catalog.presets import parse_pricing, preset_text

    dev = _norm(device_name)
    for nt in parse_pricing(preset_text()).node_type:
        family = _norm(nt.name.split("-")[0])
        if family and family in dev:
            if "pcie" in dev and "sxm" in _norm(nt.gpu_model):
                continue
            return nt.peak_bf16_tflops, nt.name
    return None, None


def no_gpu_reason() -> Optional[str]:
    dev = Path("/dev")
    if sys.platform.startswith("linux") and not any(dev.glob("nvidia[0-9]*")) and not (dev / "kfd").exists():
        return "no GPU device on this machine (no /dev/nvidia*, no /dev/kfd)"  # without importing torch (seconds)
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed ({exc})"
    if not torch.cuda.is_available():
        build = getattr(torch.version, "cuda", None)
        return (f"torch {torch.__version__} sees no CUDA device" if build
                else f"torch {torch.__version__} is a CPU build (no CUDA)")
    return None


def measure(shape: str, steps: int, micro_batch: int, grad_accum: int) -> dict[str, Any]:
    import torch
    from trainledger.money.rates import costs
    from trainledger.trainer.config import DataConfig, ModelConfig, OptimizerConfig, ParallelConfig, TrainConfig
    from trainledger.trainer.engine import Trainer
    from trainledger.trainer.parallel import resolve_plan
    from trainledger.trainer.shapes import flops_per_token, get_shape, param_count

    device = torch.cuda.get_device_name()
    peak, node_type = catalog_peak(device)
    cfg = TrainConfig(model=ModelConfig(shape=shape), data=DataConfig(),
                      parallel=ParallelConfig(strategy="dp", micro_batch=micro_batch,
                                              global_batch=micro_batch * grad_accum),
                      optimizer=OptimizerConfig(lr=3e-4, warmup_steps=min(10, steps)),
                      steps=steps, log_every=max(1, steps // 5), precision="bf16", peak_tflops=peak,
                      comm_timing=False)
    result = Trainer(cfg, resolve_plan(cfg, world_size=1)).run()
    s = get_shape(shape)
    fpt = flops_per_token(s)
    tps = result.tokens_per_s
    mfu = costs.mfu(tps, fpt, peak, 1, hardware=device)
    return {"device": device, "node_type": node_type, "peak_bf16_tflops": peak, "shape": shape,
            "params": param_count(s), "flops_per_token": fpt, "micro_batch": micro_batch, "grad_accum": grad_accum,
            "tokens_per_step": result.tokens_per_step, "steps": steps,
            "step_time_median_s": result.step_time_median_s, "tokens_per_s": tps,
            "achieved_tflops": tps * fpt / 1e12, "mfu": mfu, "trainer_mfu": result.mfu,
            "peak_memory_bytes": result.peak_memory_bytes[0], "goal": GOAL,
            "reason": None if peak else f"{device!r} is not in the catalog (data/pricing.toml): MFU not computed"}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.mfu", description="Tokens/s and MFU of one shape on one GPU (bf16).")
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps (the median step time is used)")
    ap.add_argument("--shape", default="1b", help="model shape from trainer/shapes.py (default 1b)")
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per micro-batch (lower it on a smaller GPU)")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    a = ap.parse_args(argv)
    reason = no_gpu_reason()
    if reason is not None:
        print(f"no GPU available: {reason}")
        if a.json:
            a.json.write_text(json.dumps({"mfu": None, "reason": f"no GPU available: {reason}"}))
        return 0
    os.environ.setdefault("TRAINLEDGER_CACHE_DIR", str(Path(tempfile.gettempdir()) / "trainledger-bench-shards"))
    out = measure(a.shape, a.steps, a.micro_batch, a.grad_accum)
    mfu = out["mfu"]
    print(f"{out['device']} ({out['node_type'] or 'not in the catalog'}, peak {out['peak_bf16_tflops'] or '?'} TFLOPs bf16): "
          f"{out['shape']} ({out['params'] / 1e9:.2f}B params), {out['tokens_per_s']:,.0f} tokens/s, "
          f"{out['achieved_tflops']:.1f} TFLOPs achieved, MFU "
          + (f"{mfu:.1%} (goal ≥ {GOAL:.0%})" if mfu is not None else "n/a: " + out["reason"]))
    if a.json:
        a.json.write_text(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)  # NCCL/gloo threads: leave without interpreter teardown (as trainledger.trainer.train does)


if __name__ == "__main__":
    sys.exit(main())
