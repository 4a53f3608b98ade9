"""``plan recommend --trial --run``: the best plans shrunk to the trial cluster run as one tracked sweep,
and the measured step time and memory come back beside the predictions."""

from __future__ import annotations

import json

import pytest

from tests.tracking.conftest import trainledger

pytestmark = pytest.mark.slow

#: a 2-process "node" on this CPU: the trial runs 2 processes per node, as the node type says
CPU_NODE = ('[[node_type]]\nname = "cpu-2x"\ngpu_model = "CPU (test)"\ngpus_per_node = 2\ngpu_memory_gb = 4\n'
            'peak_bf16_tflops = 0.05\nintra_node_gbytes_per_s = 2\nintra_node_latency_us = 50\n'
            'inter_node_gbits_per_s = 1\ninter_node_latency_us = 100\n\n'
            '[[offer]]\nname = "cpu-rent"\nnode_type = "cpu-2x"\nkind = "rent_elastic"\ncurrency = "CNY"\n'
            'price_per_node_hour = "1"\n')


def test_trial_runs_the_best_plan_as_a_tracked_sweep(sqlite_url, track_env, tmp_path):
    pricing = tmp_path / "cpu.toml"
    pricing.write_text(CPU_NODE)
    trainledger(["pricing", "import", pricing, "--db", sqlite_url], track_env)
    out = trainledger(["plan", "recommend", "--model", "llama-tiny", "--tokens", "1e6", "--node-type", "cpu-2x",
                       "--nodes", "1", "--batch-tokens", "1024", "--strategies", "zero2,tp", "--micro-batches", "4",
                       "--recompute", "none", "--trial", "--trial-nodes", "1", "--trial-count", "2",
                       "--trial-steps", "3", "--run", "--db", sqlite_url, "--json"], track_env, timeout=900)
    d = json.loads(out.stdout)
    t = d["trial"]
    assert t["ran"] is True and t["sweep_id"].startswith("sweep-")
    assert [e["from_plan"] for e in t["runs"]] == [p["plan"] for p in d["plans"][:2]]
    for e in t["runs"]:
        assert e["status"] == "succeeded", e
        assert e["measured_step_time_s"] > 0 and e["predicted_step_time_s"] > 0
        assert e["memory_kind"] == "cpu_max_rss" and e["measured_memory_gib"] > 0
    runs = json.loads(trainledger(["runs", "list", "--sweep", t["sweep_id"], "--db", sqlite_url, "--json"],
                                  track_env).stdout)
    assert sorted(r["strategy"] for r in runs) == sorted(e["config"]["parallel"]["strategy"] for e in t["runs"])
    assert {r["status"] for r in runs} == {"succeeded"}
