"""Predicted vs measured: the planning model against a real CPU sweep on this machine (docs/PLANNER.md).

    python -m bench.plan_accuracy [--model llama-small] [--steps 6] [--repeats 3] [--json FILE]
    python -m bench.plan_accuracy --from-raw bench/plan_accuracy_raw.json      # refit, no sweep

1. ``bench/comm_probe.py`` under torchrun (2 processes): gloo's α and β on this
   machine, and the resident baseline of a trainer process (torch, DeepSpeed,
   gloo loaded) — the CPU's counterpart of the CUDA context in the allowance.
2. ``trainledger sweep --strategies S`` of each of dp, zero1, zero2, zero3, pp,
   tp (2 processes) and 3d (4 processes) for ``--steps`` steps into a fresh
   ledger, ``--repeats`` rounds (step 4).
3. For every run, ``trainledger.runs.plan.predict_run`` with a CPU profile: the
   compute rate (FLOP/s per process) calibrated, as the planner calibrates a
   GPU's efficiency, from the ledger's measured data-parallel runs of the sweep
   — leaving out the run being predicted — as FLOPs per step ÷ processes ÷
   (step time × (1 − comm share)); the rate per process scaled by
   min(1, cores ÷ processes) (3d runs 4 processes on this 2-core machine);
   links α, β from step 1; memory in fp32 with the baseline RSS as the reserve.
4. Calibrated (docs/PLANNER.md, "Calibration"): leave-one-strategy-out, the
   factors fitted by ``trainledger.runs.calibrate.fit`` on the other 6 strategies'
   runs predict the 7th. The raw measurements are saved to
   ``bench/results/plan_accuracy_raw.json``; ``--from-raw FILE`` refits from such
   a file without running anything (``bench/plan_accuracy_raw.json``: the measurement in docs/PLANNER.md).
   ``--repeats N`` rounds: the seven strategies run one at a time, each run bracketed by
   ``bench.cpu_probe`` (the GFLOP/s a process gets right then, as many processes as the run's ranks)
   and the load average, both stored with the run; the CPU profile of a probed run computes at the
   probed rate (``trainledger.runs.calibrate.cpu_hardware``), and a strategy's figures are medians of its runs.
5. The same sweep with ``--baseline-model`` (llama-tiny: ~0.2 M parameters):
   its runs hold the framework's own memory per strategy (DeepSpeed's engine,
   buffers, the data pipeline), so memory *above* that run isolates what the
   model adds — the part the planner's states + activations predict.

Prints a Markdown table (predicted, measured, error) and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench import RESULTS_DIR, ROOT, log

DP_ONLY = ("dp", "zero1", "zero2", "zero3")
STRATEGIES = (*DP_ONLY, "pp", "tp", "3d")


def _probe(tmp: Path, env: dict) -> dict:
    out = tmp / "probe.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29731",
           str(ROOT / "bench" / "comm_probe.py"), str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"comm probe exited {proc.returncode}: {proc.stderr[-500:]}")
    return json.loads(out.read_text())


def _sweep(tmp: Path, env: dict, url: str, model: str, steps: int, strategies: str | None = None) -> str:
    base = tmp / "configs" / f"{model}.yaml"
    base.parent.mkdir(exist_ok=True)
    base.write_text(yaml.safe_dump({"model": {"shape": model}, "parallel": {"micro_batch": 4, "global_batch": 8},
                                    "optimizer": {"lr": 1e-3, "warmup_steps": 1}, "log_every": 1}))
    env = {**env, "TRAINLEDGER_CONFIG_DIRS": str(base.parent)}
    cmd = [sys.executable, "-m", "trainledger.cli", "sweep", str(base), "--steps", str(steps), "--db", url, "--json"]
    if strategies:
        cmd += ["--strategies", strategies]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep exited {proc.returncode}: {proc.stderr[-800:]}")
    return json.loads(proc.stdout)["sweep_id"]


def _loadavg() -> list[float]:
    """The machine's load average (1, 5, 15 min), recorded with every measurement."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def measure(tmp: Path, env: dict, url: str, model: str, steps: int, repeats: int) -> tuple[list[dict], list[str]]:
    """``repeats`` rounds of the seven strategies, one run each, every run bracketed by a CPU probe
    (``bench.cpu_probe``: the GFLOP/s a process gets right then, with as many processes as the run's ranks)
    and the load average; the raw rows (``RAW_FIELDS`` + ``repeat``, ``loadavg``, ``probe_gflops_per_process``)
    and the sweep ids."""
    from bench.cpu_probe import Prober

    rows, sweep_ids = [], []
    with Prober(4) as prober:
        for rep in range(repeats):
            for strategy in STRATEGIES:
                n = 4 if strategy == "3d" else 2
                load0, rate0 = _loadavg(), prober.rate(n)
                sid = _sweep(tmp, env, url, model, steps, strategy)
                rate1, load1 = prober.rate(n), _loadavg()
                sweep_ids.append(sid)
                for r in raw_runs(url, sid):
                    rows.append({**r, "repeat": rep, "loadavg": [load0, load1],
                                 "probe_gflops_per_process": [rate0, rate1]})
                partial = RESULTS_DIR / "plan_accuracy_raw.partial.json"
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_text(json.dumps({"sweep": rows}, indent=1, default=str))
                log(f"plan_accuracy: round {rep + 1}/{repeats} {strategy}: {rows[-1]['step_time_median_s']:.3f} s, "
                    f"probe {rate0:.1f}/{rate1:.1f} GFLOP/s per process, load {load0[0]:.1f}/{load1[0]:.1f}")
    return rows, sweep_ids


def _rate(run) -> float:
    """Achieved model FLOP/s per process in the compute part of a measured run."""
    from trainledger.trainer.config import config_from_dict
    from trainledger.trainer.shapes import flops_per_token

    cfg = config_from_dict(run.config["train"])
    factor = 4 / 3 if cfg.model.activation_checkpointing else 1.0
    flops = flops_per_token(cfg.shape) * run.micro_batch * run.grad_accum * run.dp * cfg.shape.seq_len * factor
    return flops / run.world_size / (run.step_time_median_s * (1 - (run.comm_share or 0.0)))


def predict_sweep(url: str, sweep_ids: str | list[str], probe: dict, cores: int,
                  reserve: dict[str, float] | None = None) -> list[dict]:
    """Predictions for every run of the sweep(s); ``reserve`` (by strategy) replaces the probe's baseline RSS."""
    from sqlmodel import select
    from trainledger.runs.plan import predict_run
    from trainledger.store.db import make_engine, session_scope
    from trainledger.store.models import Run
    from trainledger.trainer.plan.timing import Hardware, Link

    link = Link(probe["beta_bytes_per_s"], probe["alpha_s"])
    engine = make_engine(url)
    rows = []
    with session_scope(engine) as s:
        ids = [sweep_ids] if isinstance(sweep_ids, str) else sweep_ids
        runs = s.exec(select(Run).where(Run.sweep_id.in_(ids)).order_by(Run.created_at)).all()
        for run in runs:
            others = [_rate(r) for r in runs if r.strategy in DP_ONLY and r.id != run.id and r.step_time_median_s]
            rate = statistics.median(others)
            share = min(1.0, cores / run.world_size)
            hw = Hardware(name="cpu", gpus_per_node=run.gpus_per_node, gpu_memory_bytes=float("inf"),
                          peak_tflops=rate / 1e12, efficiency=share, intra=link, inter=link,
                          efficiency_source=f"median of {len(others)} other data-parallel runs")
            base = (reserve or {}).get(run.strategy, probe["baseline_rss_bytes"])
            row = predict_run(run, hw, precision="fp32", reserved=base)
            rows.append({**row, "compute_gflops_per_process": rate * share / 1e9})
    engine.dispose()
    return rows


RAW_FIELDS = ("id", "strategy", "nodes", "gpus_per_node", "world_size", "dp", "tp", "pp", "zero_stage", "micro_batch",
              "grad_accum", "config", "status", "step_time_median_s", "comm_share", "peak_mem_bytes", "mem_kind",
              "mfu", "steps")


def raw_runs(url: str, sweep_id: str) -> list[dict]:
    """The sweep's runs as measured (the fields a calibration needs), to refit without re-running."""
    from sqlmodel import select
    from trainledger.store.db import make_engine, session_scope
    from trainledger.store.models import Run

    engine = make_engine(url)
    with session_scope(engine) as s:
        runs = s.exec(select(Run).where(Run.sweep_id == sweep_id).order_by(Run.created_at)).all()
        out = [{k: getattr(getattr(r, k), "value", getattr(r, k)) for k in RAW_FIELDS} for r in runs]
    engine.dispose()
    return out


def _cells(r: dict) -> str:
    """A row's first cells: strategy, processes, layout, ZeRO, step time measured, predicted, error."""
    return (f"| {r['strategy']} | {r['world_size']} | {r['dp']}×{r['tp']}×{r['pp']} | {r['zero_stage']} | "
            f"{r['measured_step_time_s']:.3f} s | {r['predicted_step_time_s']:.3f} s | {r['step_time_error']:+.0%} | ")


def _memory_cells(r: dict) -> str:
    return (f"{r['measured_memory_bytes'] / 2**20:,.0f} MiB | {r['predicted_memory_bytes'] / 2**20:,.0f} MiB | "
            f"{r['memory_error']:+.0%} | ")


def _mae(rows: list[dict]) -> tuple[float, float]:
    """Mean absolute relative error of step time and of memory."""
    return (statistics.fmean(abs(r["step_time_error"]) for r in rows),
            statistics.fmean(abs(r["memory_error"]) for r in rows))


def _cpu_model(r: dict):
    """The planning model of a raw run on the CPU profile: at its probed rate when the run has one
    (the mean of the probes before and after it), else at the nominal rate."""
    from trainledger.runs import calibrate as cal

    rate = r.get("probe_gflops_per_process")
    hw = cal.cpu_hardware(r["gpus_per_node"], gflops_per_process=statistics.fmean(rate) if rate else None)
    return cal.run_model(r, hw, "cpu")


def leave_one_out(raw: list[dict]) -> list[dict]:
    """Leave-one-strategy-out: for each strategy, calibrate (``trainledger.runs.calibrate.fit``) on the other
    strategies' runs (every repeat) and predict each of this strategy's runs; the strategy's measured figure
    is the median of its runs, its predicted figure the median of their predictions."""
    from trainledger.runs import calibrate as cal

    models = [_cpu_model(r) for r in raw]
    rows = []
    for strategy in dict.fromkeys(r["strategy"] for r in raw):
        train = [(m, r) for m, r in zip(models, raw) if r["strategy"] != strategy]
        mine = [(m, r) for m, r in zip(models, raw) if r["strategy"] == strategy]
        f = cal.fit([m for m, _ in train], [r["step_time_median_s"] for _, r in train],
                    [r["peak_mem_bytes"] for _, r in train])
        preds = [cal.predicted(m, f) for m, _ in mine]
        r0, steps = mine[0][1], [r["step_time_median_s"] for _, r in mine]
        step, mem = statistics.median(p[0] for p in preds), statistics.median(p[1] for p in preds)
        meas_step, meas_mem = statistics.median(steps), statistics.median(r["peak_mem_bytes"] for _, r in mine)
        rows.append({"strategy": strategy, "world_size": r0["world_size"], "dp": r0["dp"], "tp": r0["tp"],
                     "pp": r0["pp"], "zero_stage": r0["zero_stage"], "factors": f.as_dict(), "runs": len(mine),
                     "measured_step_range_s": [min(steps), max(steps)],
                     "measured_step_time_s": meas_step, "predicted_step_time_s": step,
                     "step_time_error": (step - meas_step) / meas_step,
                     "measured_memory_bytes": meas_mem, "predicted_memory_bytes": mem,
                     "memory_error": (mem - meas_mem) / meas_mem})
    return rows


def repeat_spread(raw: list[dict]) -> dict[str, float]:
    """Per strategy with more than one run: max ÷ min − 1 of its runs' step time × probed rate (the mean of the
    probes around the run) — what the probed CPU profile predicts to be one figure for one plan, so its spread is
    the run-to-run noise no model of the plan can explain."""
    out = {}
    for strategy in dict.fromkeys(r["strategy"] for r in raw):
        work = [r["step_time_median_s"] * statistics.fmean(r["probe_gflops_per_process"]) for r in raw
                if r["strategy"] == strategy and r.get("probe_gflops_per_process")]
        if len(work) > 1:
            out[strategy] = max(work) / min(work) - 1
    return out


def spread_line(raw: list[dict]) -> str:
    spread = repeat_spread(raw)
    if not spread:
        return ""
    return ("Run-to-run spread of one plan (step time × probed rate, max ÷ min − 1 over its runs): "
            + ", ".join(f"{k} {v:.0%}" for k, v in spread.items())
            + f"; median {statistics.median(spread.values()):.0%}.")


def loo_markdown(rows: list[dict]) -> str:
    """The leave-one-strategy-out table and its mean absolute errors (medians over a strategy's runs)."""
    lines = ["| left out | processes | dp×tp×pp | ZeRO | step measured | predicted | error | runs: measured min–max | "
             "peak RSS measured | predicted | error | factors fitted on the other 6 (compute, intra comm, bubble, "
             "memory, fixed) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, (lo, hi) = r["factors"], r.get("measured_step_range_s") or [r["measured_step_time_s"]] * 2
        lines.append(
            f"{_cells(r)}{r.get('runs', 1)}: {lo:.3f}–{hi:.3f} s | {_memory_cells(r)}{f['compute']:.3f}, "
            f"{f['intra_comm']:.2f}, {f['bubble']:.3f}, {f['memory']:.3f}, {f['memory_fixed']:.3f} |")
    mae_t, mae_m = _mae(rows)
    lines.append(f"\nLeave-one-strategy-out mean absolute error over {len(rows)} strategies: step time {mae_t:.1%} "
                 f"(target <= 15%); peak memory {mae_m:.1%} (target <= 10%).")
    return "\n".join(lines)


def markdown(rows: list[dict], tiny: dict[str, dict]) -> str:
    """The table: step time, peak RSS (reserve = the process baseline), and the memory above the tiny model's run."""
    head = ("| strategy | processes | dp×tp×pp | ZeRO | step measured | predicted | error | comm share measured | "
            "predicted | peak RSS measured | predicted | error | above tiny run: measured | predicted | error |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines, inc_errors = [head], []
    for r in rows:
        t = tiny[r["strategy"]]
        inc_meas = r["measured_memory_bytes"] - t["measured_memory_bytes"]
        inc_pred = r["predicted_memory_bytes"] - t["predicted_memory_bytes"]
        inc_err = (inc_pred - inc_meas) / inc_meas
        inc_errors.append(abs(inc_err))
        lines.append(
            f"{_cells(r)}{r['measured_comm_share']:.0%} | {r['predicted_comm_share']:.0%} | {_memory_cells(r)}"
            f"{inc_meas / 2**20:,.0f} MiB | {inc_pred / 2**20:,.0f} MiB | {inc_err:+.0%} |")
    mae_t, mae_m = _mae(rows)
    lines.append(f"\nMean absolute error over {len(rows)} runs: step time {mae_t:.0%}; peak memory {mae_m:.0%}; "
                 f"memory above the tiny model's run {statistics.fmean(inc_errors):.0%}.")
    return "\n".join(lines)


def measured_note(measured: dict, raw: list[dict]) -> str:
    """When and under what load the runs were measured (the raw file's ``measured`` and per-run fields)."""
    loads = [x for r in raw for x in (r.get("loadavg") or [])]
    rates = [x for r in raw for x in (r.get("probe_gflops_per_process") or [])]
    text = (f"Measured {measured['started']} – {measured['finished']}: {measured['model']}, {measured['steps']} steps, "
            f"{measured['repeats']} round(s) of the strategies on {measured['cpus']} CPUs")
    if loads:
        text += f"; 1-min load average {min(l[0] for l in loads):.1f}–{max(l[0] for l in loads):.1f}"
    if rates:
        text += f"; probe {min(rates):.1f}–{max(rates):.1f} GFLOP/s per process"
    return text + "."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.plan_accuracy", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-small")
    ap.add_argument("--baseline-model", default="llama-tiny", help="the near-empty model whose runs show the "
                    "framework's own memory per strategy (`none`: no such sweep, no uncalibrated table)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json", type=Path, default=RESULTS_DIR / "plan_accuracy.json")
    ap.add_argument("--repeats", type=int, default=3, help="rounds of the seven strategies (each run bracketed by "
                    "a CPU probe and the load average); the leave-one-out figures are medians over the rounds")
    ap.add_argument("--from-raw", type=Path, help="refit from a saved sweep's measurements "
                    "(bench/plan_accuracy_raw.json) instead of running the sweeps")
    a = ap.parse_args(argv)
    if a.from_raw:
        raw = json.loads(a.from_raw.read_text())
        text = loo_markdown(leave_one_out(raw["sweep"]))
        if spread_line(raw["sweep"]):
            text += "\n\n" + spread_line(raw["sweep"])
        if raw.get("measured"):
            text = measured_note(raw["measured"], raw["sweep"]) + "\n\n" + text
        print(text)
        return 0
    with tempfile.TemporaryDirectory(prefix="tl-plan-acc-") as t:
        tmp = Path(t)
        env = {**os.environ, "TRAINLEDGER_JOURNAL_DIR": str(tmp / "journal"), "XDG_DATA_HOME": str(tmp / "xdg"),
               "TRAINLEDGER_CACHE_DIR": str(tmp / "cache"), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        env.pop("TRAINLEDGER_DB_URL", None)
        url = f"sqlite:///{tmp / 'ledger.db'}"
        log("plan_accuracy: probing gloo α/β and the process baseline …")
        probe = _probe(tmp, env)
        log(f"plan_accuracy: α {probe['alpha_s'] * 1e6:.0f} µs, β {probe['beta_bytes_per_s'] / 1e9:.2f} GB/s, "
            f"baseline RSS {probe['baseline_rss_bytes'] / 2**20:.0f} MiB; {a.repeats} round(s) of {a.model} …")
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        rows_raw, sweep_ids = measure(tmp, env, url, a.model, a.steps, a.repeats)
        measured = {"started": started, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "model": a.model, "steps": a.steps, "repeats": a.repeats, "cpus": os.cpu_count()}
        raw = {"measured": measured, "sweep": rows_raw, "baseline_sweep": []}
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (RESULTS_DIR / "plan_accuracy_raw.json").write_text(json.dumps(raw, indent=1, default=str))
        rows, tiny = [], {}
        if a.baseline_model != "none":
            log(f"plan_accuracy: sweeping {a.baseline_model} (the framework's own memory per strategy) …")
            tiny_id = _sweep(tmp, env, url, a.baseline_model, a.steps)
            cores = os.cpu_count() or 1
            raw["baseline_sweep"] = raw_runs(url, tiny_id)
            (RESULTS_DIR / "plan_accuracy_raw.json").write_text(json.dumps(raw, indent=1, default=str))
            rows = predict_sweep(url, sweep_ids, probe, cores)
            tiny = {r["strategy"]: r for r in predict_sweep(url, tiny_id, probe, cores)}
    text = ((markdown(rows, tiny) + "\n\n" if tiny else "") + measured_note(measured, raw["sweep"]) + "\n\n"
            + loo_markdown(leave_one_out(raw["sweep"])) + "\n\n" + spread_line(raw["sweep"]))
    print(text)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"model": a.model, "baseline_model": a.baseline_model, "steps": a.steps,
                                  "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "probe": probe, "runs": rows,
                                  "baseline_runs": list(tiny.values()), "markdown": text}, indent=2, default=str))
    log(f"plan_accuracy: wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
