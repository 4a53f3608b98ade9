"""CLI surface: dry run, bad input (exit 2, one line), and imports that need no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from trainledger.trainer.cli import data_app, train_command
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "trainer" / "configs"


@pytest.fixture
def app() -> typer.Typer:
    """The two commands registered as ledger/cli.py registers them."""
    app = typer.Typer()
    app.add_typer(data_app, name="data")
    app.command("train")(train_command)
    return app


@pytest.mark.parametrize("name,world", [("dp", 1), ("zero1", 1), ("zero2", 1), ("zero3", 1), ("pp", 2),
                                        ("tp", 2), ("3d", 4)])
def test_shipped_configs_dry_run(app, name, world):
    out = CliRunner().invoke(app, ["train", str(CONFIGS / f"{name}.yaml"), "--dry-run", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["plan"]["strategy"] == name and report["plan"]["world_size"] == world
    assert report["deepspeed"]["train_batch_size"] == 16
    assert report["deepspeed"]["zero_optimization"]["stage"] == report["plan"]["zero_stage"]


def test_dry_run_prints_plan_and_deepspeed_json(app):
    out = CliRunner().invoke(app, ["train", str(CONFIGS / "zero2.yaml"), "--dry-run", "--nproc-per-node", "4"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "strategy        zero2 (ZeRO-2)"
    assert lines[1] == "world size      4 = dp 4 × tp 1 × pp 1 = nodes 1 × gpus_per_node 4"
    assert lines[2] == "batch           global 16 = micro 4 × grad_accum 1 × dp 4 sequences; 2048 tokens/step"
    assert "222,400 params; 1,678,464 FLOPs/token" in lines[3]
    from trainledger.trainer.plan.memory import memory_per_gpu
    from trainledger.trainer.shapes import SHAPES

    mem = memory_per_gpu(SHAPES["tiny"], dp=4, tp=1, pp=1, zero_stage=2, micro_batch=4, micro_batches=1,
                         precision="fp32")
    assert lines[5].startswith(f"memory/GPU      predicted {mem.total / 2**30:,.2f} GiB = model states ")
    ds = json.loads("\n".join(lines[7:]))
    assert ds["zero_optimization"]["stage"] == 2 and ds["gradient_accumulation_steps"] == 1


def test_nproc_per_node_is_per_node(app, tmp_path):
    config = tmp_path / "two-nodes.yaml"
    config.write_text(yaml.safe_dump({"parallel": {"strategy": "3d", "tp": 2, "pp": 2, "nodes": 2}}), encoding="utf-8")
    out = CliRunner().invoke(app, ["train", str(config), "--dry-run", "--json", "--nproc-per-node", "4"])
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)["plan"]
    assert (plan["world_size"], plan["nodes"], plan["gpus_per_node"], plan["dp"]) == (8, 2, 4, 2)
    run = CliRunner().invoke(app, ["train", str(config), "--nproc-per-node", "4"])
    assert run.exit_code == 2 and "the plan spans 2 nodes" in run.output


def test_bad_config_exits_2_with_one_line(app, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"parallel": {"strategy": "zero3", "pp": 2}}), encoding="utf-8")
    out = CliRunner().invoke(app, ["train", str(bad), "--dry-run"])
    assert out.exit_code == 2
    assert out.output.count("\n") == 1 and out.output.startswith("error: ZeRO-3 is incompatible")
    missing = CliRunner().invoke(app, ["train", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "cannot read config" in missing.output


def test_entry_point_refuses_before_starting(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"parallel": {"strategy": "tp", "tp": 3}}), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "trainledger.trainer.train", "--config", str(bad)], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WORLD_SIZE": "3", "RANK": "0", "LOCAL_RANK": "0"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: tp 3 does not divide n_heads 4: set parallel.tp to one of 1, 2, 4"


def test_planning_modules_import_without_torch():
    """trainer, shapes, config, parallel and cli work where torch/deepspeed are not installed."""
    code = (
        "import sys\n"
        "for m in ('torch', 'deepspeed', 'webdataset'): sys.modules[m] = None\n"
        "import trainledger.trainer, trainledger.trainer.shapes, trainledger.trainer.parallel, trainledger.trainer.cli, trainledger.trainer.metrics, trainledger.trainer.hardware\n"
        "import trainledger.trainer.plan.memory, trainledger.trainer.plan.timing, trainledger.trainer.plan.search\n"
        "from trainledger.trainer.parallel import resolve_plan, deepspeed_config\n"
        "cfg = {'model': {'shape': '7b'}, 'parallel': {'strategy': '3d', 'tp': 8, 'pp': 4, 'micro_batch': 1,"
        " 'global_batch': 512}}\n"
        "plan = resolve_plan(cfg, nodes=16, gpus_per_node=8)\n"
        "ds = deepspeed_config(plan, cfg)\n"
        "print(plan.dp, plan.grad_accum, ds['bf16']['enabled'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["4", "128", "False"]  # 128 ranks = 4 × 8 × 4; no CUDA → fp32


def test_a_user_set_torchdynamo_setting_is_kept():
    """The trainer's entry point turns TorchDynamo off only where its user has not said (trainer/train.py)."""
    from trainledger.trainer.train import EAGER_ENV, eager_by_default

    env: dict[str, str] = {}
    eager_by_default(env)
    assert env == {"TORCHDYNAMO_DISABLE": "1"} == dict([EAGER_ENV])
    env = {"TORCHDYNAMO_DISABLE": "0"}
    eager_by_default(env)
    assert env == {"TORCHDYNAMO_DISABLE": "0"}


@pytest.mark.slow
def test_a_zero2_rank_does_not_load_torchinductor(tmp_path, trainer_cache, launcher):
    """A real ZeRO-2 step through the trainer's entry point: DeepSpeed's gradient reduction imports its Muon
    optimizer, whose kernels are wrapped in ``torch.compile`` at import; with the trainer's default (TorchDynamo
    off) that loads no TorchInductor compiler. ``-X importtime`` lists every module the rank imported."""
    config = tmp_path / "zero2.yaml"
    config.write_text(yaml.safe_dump(launcher.parity_config("zero2", trainer_cache) | {"steps": 1}), encoding="utf-8")
    env = {k: v for k, v in launcher.env().items() if k != "TORCHDYNAMO_DISABLE"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "trainledger.trainer.train", "--config", str(config),
                           "--results-json", str(tmp_path / "r.json")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert {"deepspeed.runtime.zero.muon.original_muon", "torch._dynamo"} <= imported  # the reduction ran
    assert "torch._inductor.compile_fx" not in imported  # TorchInductor's compiler (torch._dynamo loads its config)
    assert json.loads((tmp_path / "r.json").read_text())["steps"] == 1
