"""``trainledger slurm map add|list|remove``: validated rules, most specific first, one-line errors."""

from __future__ import annotations

import json

import pytest


def _json(r):
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.output)


def test_add_list_remove(cli):
    a = _json(cli("slurm", "map", "add", "--partition", "gpu", "--node-type", "rtx4090-8x", "--offer", "rtx4090-rent", "--json"))
    b = _json(cli("slurm", "map", "add", "--partition", "gpu", "--gpu-type", "a100", "--node-type", "a100-8x", "--json"))
    c = _json(cli("slurm", "map", "add", "--nodes", "h200-*", "--node-type", "h200-8x", "--by-node", "--json"))
    d = _json(cli("slurm", "map", "add", "--partition", "gpu", "--cluster", "west", "--node-type", "h100-8x", "--json"))
    assert (a["id"], a["result"], a["offer"], a["by_node"]) == (1, "added", "rtx4090-rent", False)
    rules = _json(cli("slurm", "map", "list", "--json"))
    # tried most specific first: nodes (4), GPU type + partition (3), then partition with a cluster before without
    assert [r["id"] for r in rules] == [c["id"], b["id"], d["id"], a["id"]] == [3, 2, 4, 1]
    assert rules[0] == {"id": 3, "cluster": "", "partition": "", "gpu_type": "", "node_pattern": "h200-*",
                        "node_type": "h200-8x", "offer": None, "by_node": True, "specificity": [4, 0, -3],
                        "billing_weights": "", "max_tres": False, "node_tres": "", "share_rule": "node"}
    assert [r["share_rule"] for r in rules] == ["node", "gpus", "gpus", "gpus"]  # by node; else GPUs held ÷ the type's
    text = cli("slurm", "map", "list").output.splitlines()
    assert text[0].split() == ["id", "cluster", "partition", "GPU", "type", "nodes", "node", "type", "offer", "by", "node",
                               "share"]
    assert text[2].split() == ["3", "*", "*", "*", "h200-*", "h200-8x", "-", "yes", "node"]
    gone = _json(cli("slurm", "map", "remove", "2", "--json"))
    assert (gone["result"], gone["gpu_type"]) == ("removed", "a100")
    assert [r["id"] for r in _json(cli("slurm", "map", "list", "--json"))] == [3, 4, 1]


@pytest.mark.parametrize("args, error", [
    (["--node-type", "rtx4090-8x"], "slurm map: give at least one of --partition, --gpu-type or --nodes"),
    (["--partition", "gpu", "--node-type", "v100-4x"], "--node-type: unknown 'v100-4x'; use one of a100-8x, h100-8x, h200-8x, rtx4090-8x"),
    (["--partition", "gpu", "--node-type", "a100-8x", "--offer", "rtx4090-rent"],
     "--offer: 'rtx4090-rent' is not an offer for a100-8x; use one of (none)"),
    (["--partition", "a b", "--node-type", "a100-8x"], "--partition: 'a b' may not contain spaces, commas, '|' or control characters"),
    (["--gpu-type", "x" * 101, "--node-type", "a100-8x"], "--gpu-type: at most 100 characters, got 101"),
    (["--partition", "gpu", "--node-type", "a100-8x", "--billing-weights", "CPU=one"],
     "--billing-weights: 'CPU=one' must be NAME=NUMBER[,...] as Slurm writes it (e.g. CPU=1.0,Mem=0.25G,GRES/gpu=2.0), "
     "at most 400 characters"),
    (["--partition", "gpu", "--node-type", "a100-8x", "--billing-weights", "CPU=1", "--by-node"],
     "--billing-weights: a --by-node rule pays the whole node; drop one of them"),
    (["--partition", "gpu", "--node-type", "a100-8x", "--billing-weights", "CPU=1", "--node-tres", "mem=10G"],
     "--node-tres: one node (mem=10G) bills 0 under CPU=1; give the TRES of one whole node of the partition, e.g. "
     "cpu=64,mem=512G,gres/gpu=8"),
    # 2 × 0.25 = 0.5, which Slurm keeps as billing 0
    (["--partition", "gpu", "--node-type", "a100-8x", "--billing-weights", "CPU=0.25", "--node-tres", "cpu=2"],
     "--node-tres: one node (cpu=2) bills 0 under CPU=0.25; give the TRES of one whole node of the partition, e.g. "
     "cpu=64,mem=512G,gres/gpu=8"),
])
def test_bad_rules_are_one_line_and_write_nothing(cli, args, error):
    r = cli("slurm", "map", "add", *args)
    assert r.exit_code == 2 and r.stderr == f"error: {error}\n", r.stderr
    assert _json(cli("slurm", "map", "list", "--json")) == []


def test_a_second_rule_for_the_same_jobs_needs_replace(cli):
    _json(cli("slurm", "map", "add", "--partition", "gpu", "--node-type", "rtx4090-8x", "--json"))
    r = cli("slurm", "map", "add", "--partition", "gpu", "--node-type", "a100-8x")
    assert r.exit_code == 2 and r.stderr == ("error: slurm map: rule 1 already matches --partition gpu; pass --replace "
                                             "to change it, or remove it first\n")
    upd = _json(cli("slurm", "map", "add", "--partition", "gpu", "--node-type", "a100-8x", "--replace", "--json"))
    assert (upd["id"], upd["result"], upd["node_type"]) == (1, "updated", "a100-8x")
    assert cli("slurm", "map", "remove", "9").stderr == "error: RULE_ID: no Slurm mapping rule 9; rules: 1 (see `trainledger slurm map list`)\n"
