"""Trainer configs under hostile YAML/JSON: `trainledger train --dry-run` and `trainledger launch`.

* Any mutation of a shipped config (wrong types, unknown keys, absurd values,
  NaN/inf, huge integers, mangled text, a hostile DeepSpeed JSON beside it) is
  either a valid plan printed as strict JSON, or exit 2 with one line; never a
  traceback, never a hang (divisor hints are computed in O(√n)).
* Every known key given a wrong type or an absurd value is refused with a line
  that names that key.
* `launch` refuses a bad config before it registers anything: the ledger is unchanged.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from unittest import mock

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st
from trainledger.runs.launch import CONFIG_DIRS_ENV

from tests.hostile.conftest import FUZZ, REPO, assert_clean, assert_refused, invoke, snapshot, unchanged

CONFIGS = REPO / "trainer" / "configs"
SHIPPED = sorted(p.name for p in CONFIGS.glob("*.yaml"))
SCHEMA = {  # every leaf key and its type
    "model": {"shape": str, "n_layers": int, "d_model": int, "n_heads": int, "seq_len": int, "vocab_size": int,
              "activation_checkpointing": bool},
    "data": {"corpus": str, "shards": str, "cache_dir": str, "seq_len": int, "shard_size": int},
    "parallel": {"strategy": str, "dp": int, "tp": int, "pp": int, "zero_stage": int, "micro_batch": int,
                 "grad_accum": int, "global_batch": int, "nodes": int, "gpus_per_node": int, "hostfile": str},
    "optimizer": {"lr": float, "weight_decay": float, "betas": tuple, "eps": float, "warmup_steps": int,
                  "min_lr_ratio": float, "grad_clip": float},
    "": {"steps": int, "seed": int, "log_every": int, "precision": str, "peak_tflops": float, "comm_timing": bool,
         "deepspeed": dict},
}
LEAVES = [(section, key) for section, keys in SCHEMA.items() for key in keys]


def _strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-4, 64),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                   st.sampled_from(["auto", "nan", ".inf", "1e3", "dp", "3d", "zero3", "-1", "tiny", "70b", "fp16", "0"]))
value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=6)


@st.composite
def mutated_config(draw):
    cfg = yaml.safe_load((CONFIGS / draw(st.sampled_from(SHIPPED))).read_text())
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(["leaf", "leaf", "leaf", "section", "unknown", "deepspeed"]))
        if where == "leaf":
            section, key = draw(st.sampled_from(LEAVES))
            if section and not isinstance(cfg.get(section), dict):
                cfg[section] = {}
            (cfg[section] if section else cfg)[key] = draw(value)
        elif where == "section":
            cfg[draw(st.sampled_from([s for s in SCHEMA if s]))] = draw(value)
        elif where == "unknown":
            cfg[draw(st.text(min_size=1, max_size=10))] = draw(value)
        else:
            cfg["deepspeed"] = draw(st.dictionaries(
                st.sampled_from(["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                 "zero_optimization", "optimizer", "gradient_clipping", "pipeline", "bf16", "fp16",
                                 "tensor_parallel", "scheduler"]),
                value | st.fixed_dictionaries({"stage": value}) | st.fixed_dictionaries({"params": value}), max_size=3))
    fmt = draw(st.sampled_from(["yaml", "json"]))
    text = yaml.safe_dump(cfg, allow_unicode=True) if fmt == "yaml" else json.dumps(cfg, ensure_ascii=False, default=str)
    if draw(st.booleans()):  # and mangle the text a little
        chars = list(text)
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, max(0, len(chars) - 1)))
            chars[i:i + draw(st.integers(0, 1))] = list(draw(st.sampled_from(list(":-[]{}&*!|>'\"\n\t#%@`,") + ["\x00", "é"])))
        text = "".join(chars)
    return text


@FUZZ
@given(text=mutated_config(), ds=st.one_of(st.none(), st.dictionaries(st.text(max_size=30), value, max_size=4)))
def test_mutated_configs_dry_run_cleanly(tmp_path, text, ds):
    cfg = tmp_path / "fuzz.yaml"
    cfg.write_text(text, encoding="utf-8")
    args = ["train", cfg, "--dry-run", "--json"]
    if ds is not None:
        (tmp_path / "ds.json").write_text(json.dumps(ds, default=str))
        args += ["--deepspeed-config", tmp_path / "ds.json"]
    out = invoke(args)
    event(f"exit {out.exit_code}")
    assert_clean(out, context=(text, ds))
    if out.exit_code == 0:
        plan = _strict_json(out.stdout)["plan"]  # valid output is strict JSON (no NaN/Infinity)
        assert plan["dp"] * plan["tp"] * plan["pp"] == plan["world_size"]


WRONG_TYPES = {int: [[1], "many", 1.5, {"a": 1}, True], float: [[1], {"a": 1}, "fast", True], str: [[1], {"a": 1}, 7],
               bool: ["maybe", 2, [True]], tuple: ["x", [0.9], [0.9, 0.95, 0.99], 5], dict: [[1], "x", 3]}
ABSURD = {int: [-1, 2**40, 10**30, math.nan, math.inf], float: [math.nan, math.inf, -math.inf, -1.0]}
ABSURD_EXTRA = {("parallel", "zero_stage"): [4, -1], ("optimizer", "lr"): [0.0], ("optimizer", "eps"): [0.0],
                ("optimizer", "min_lr_ratio"): [1.5], ("optimizer", "betas"): [[1.0, 0.5], [-0.1, 0.9], [math.nan, 0.9]],
                ("", "peak_tflops"): [0.0], ("", "steps"): [0], ("", "log_every"): [0], ("model", "n_heads"): [0],
                ("parallel", "micro_batch"): [0], ("parallel", "tp"): [0], ("parallel", "pp"): [0], ("data", "shard_size"): [0],
                ("model", "shape"): ["huge", ""], ("parallel", "strategy"): ["fsdp", ""], ("", "precision"): ["fp8"],
                ("", "seed"): [2**32]}


def _cases():
    for section, key in LEAVES:
        kind = SCHEMA[section][key]
        values = list(WRONG_TYPES[kind]) + list(ABSURD.get(kind, [])) + list(ABSURD_EXTRA.get((section, key), []))
        for v in values:
            yield section, key, v


CASES = list(_cases())


def test_every_key_with_a_wrong_type_or_absurd_value_is_refused_by_name(tmp_path):
    base = yaml.safe_load((CONFIGS / "dp.yaml").read_text())
    cfg_path = tmp_path / "bad.yaml"
    for section, key, v in CASES:
        cfg = json.loads(json.dumps(base))
        (cfg.setdefault(section, {}) if section else cfg)[key] = v
        cfg_path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        out = invoke(["train", cfg_path, "--dry-run"])
        assert_refused(out, key, context=(section, key, v))


def test_yaml_bombs_and_unreadable_files_are_one_line(tmp_path):
    cases = {
        "deep.yaml": "[" * 5000,
        "deepmap.yaml": "{a: " * 3000,
        "alias.yaml": "a: &a [*a]",
        "tag.yaml": "x: !!python/object/apply:os.system ['touch PWNED']",
        "twodocs.yaml": "--- a\n--- b\n",
        "list.yaml": "[1, 2]",
        "binary.yaml": b"\xff\xfe\x00m\x00o",
        "empty.yaml": "",
    }
    for name, body in cases.items():
        f = tmp_path / name
        f.write_bytes(body if isinstance(body, bytes) else body.encode())
        out = invoke(["train", f, "--dry-run"])
        if name == "empty.yaml":  # an empty config is all defaults: a valid plan
            assert_clean(out, context=name, codes=(0,))
        else:
            assert_clean(out, context=name, codes=(2,))
    assert not (tmp_path / "PWNED").exists() and not (REPO / "PWNED").exists()
    assert_refused(invoke(["train", tmp_path, "--dry-run"]), "cannot read config", context="a directory")
    assert_refused(invoke(["train", tmp_path / "none.yaml", "--dry-run"]), "cannot read config", context="missing")


@pytest.fixture
def no_sbatch(monkeypatch):
    """`launch --launcher slurm` only writes its script here (nothing is submitted or started)."""
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "sbatch" else which(name, *a, **k))


@FUZZ
@given(text=mutated_config())
def test_launch_refuses_bad_configs_before_registering_anything(ledger, tmp_path, no_sbatch, text):
    cfg = tmp_path / "fuzz.yaml"
    cfg.write_text(text, encoding="utf-8")
    before = snapshot(ledger)
    with mock.patch.dict(os.environ, {CONFIG_DIRS_ENV: str(tmp_path)}):  # an allowed config directory
        out = invoke(["launch", cfg, "--launcher", "slurm", "--json"], ledger)
    event(f"exit {out.exit_code}")
    assert_clean(out, context=text)
    if out.exit_code == 2:
        unchanged(ledger, before, context=text)
    else:  # a valid config: one queued run and its sbatch script, nothing started
        assert _strict_json(out.stdout)["submitted"] is False
