"""`trainledger collect` against a real Prometheus scraping a fake DCGM/node_exporter cluster and real trainer exporters."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from sqlmodel import Session, select
from trainledger.sources.telemetry.collect import (
    M_FB,
    M_LOSS,
    M_POWER,
    M_RX,
    M_TOKENS,
    M_UTIL,
    grid,
    node_of,
    pick_step,
    strip_port,
)
from trainledger.store.db import make_engine
from trainledger.store.models import MetricSample, Run, RunNode

from tests.collect.conftest import (
    ETH_BPS,
    FB,
    IB_BPS,
    POWER_W,
    TRAINER_LOSS,
    TRAINER_RUN,
    TRAINER_UTIL,
    UTIL,
    WINDOW_S,
    free_port,
)
from tests.helpers import add_run

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
#: per node: 2 GPUs × 300 W over the window, in kWh
NODE_KWH = 2 * POWER_W * WINDOW_S / 3.6e6
FAST = ["--min-step", "5", "--rate-window", "5"]  # 1 s scrapes in the test Prometheus


def _add_run(session, run_id, prom, nodes=3, hostnames=()):
    add_run(session, run_id, prom.start, WINDOW_S / 3600, nodes=nodes)
    for rank, host in enumerate(hostnames):
        session.add(RunNode(run_id=run_id, hostname=host, node_rank=rank))
    session.commit()


def _nodes(url, run_id) -> dict[str, RunNode]:
    engine = make_engine(url)
    with Session(engine) as s:
        out = {n.hostname: n for n in s.exec(select(RunNode).where(RunNode.run_id == run_id)).all()}
    engine.dispose()
    return out


def _samples(url, run_id) -> list[MetricSample]:
    engine = make_engine(url)
    with Session(engine) as s:
        out = s.exec(select(MetricSample).where(MetricSample.run_id == run_id)
                     .order_by(MetricSample.metric, MetricSample.node, MetricSample.gpu, MetricSample.ts)).all()
    engine.dispose()
    return out


def _collect(cli, prom_url, *args):
    return cli("collect", "--prometheus", prom_url, *FAST, *args, "--json")


def test_collect_stores_node_figures_series_and_flags_stragglers(cli, session, ledger_url, prom):
    _add_run(session, TRAINER_RUN, prom)  # no RunNodes yet: they come from the trainer's series
    r = _collect(cli, prom.url, "--run", TRAINER_RUN)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    (run,) = d["runs"]
    assert d["reachable"] is True and run["nodes_from"] == "trainer series"
    assert d["warnings"] == [] and r.stderr == ""
    # node-b has no DCGM_FI_PROF_GR_ENGINE_ACTIVE (GeForce-like): noted, not an error
    assert any("DCGM_FI_PROF_GR_ENGINE_ACTIVE absent for node-b" in n for n in d["notes"])

    nodes = _nodes(ledger_url, TRAINER_RUN)
    assert sorted(nodes) == ["node-a", "node-b", "node-c"]
    for host, n in nodes.items():
        assert n.util_source == "dcgm"
        assert n.gpu_util_mean == pytest.approx(UTIL[host] / 100, abs=1e-9)  # percent → ratio
        assert n.gpu_util_p95 == pytest.approx(UTIL[host] / 100, abs=1e-9)
        assert n.mem_peak_bytes == int(max(FB[host]) * 2**20)  # MiB → bytes, peak GPU of the node
        assert n.energy_kwh == pytest.approx(NODE_KWH, rel=0.03)  # mJ counter increase → kWh
        # Ethernet (lo excluded; node-a's IPoIB ib0 not double counted) + InfiniBand port data
        assert n.nic_rx_bytes_per_s == pytest.approx(ETH_BPS + IB_BPS[host], rel=0.03)
        assert n.nic_tx_bytes_per_s == pytest.approx(ETH_BPS + IB_BPS[host], rel=0.03)
    # stragglers: node-b's GPU-Util is 48 points under the median (88 %); node-c moves 2 GB/s vs 6 GB/s
    assert {h: n.straggler for h, n in nodes.items()} == {"node-a": False, "node-b": True, "node-c": True}
    reasons = {s["hostname"]: " ".join(s["reasons"]) for s in run["stragglers"]}
    assert reasons["node-b"].startswith("GPU-Util 40.0% vs run median 88.0%")
    assert reasons["node-c"].startswith("communication-blocked")
    assert run["energy_kwh"] == pytest.approx(3 * NODE_KWH, rel=0.03)
    # the run had no GPU-Util of its own: DCGM's, labelled as such
    engine = make_engine(ledger_url)
    with Session(engine) as s:
        r_ = s.get(Run, TRAINER_RUN)
        assert r_.util_source == "dcgm" and r_.gpu_util_mean == pytest.approx((0.9 + 0.4 + 0.88) / 3)
    engine.dispose()

    # downsampled series: 5 s steps on the epoch grid of the window, measured values only
    samples = _samples(ledger_url, TRAINER_RUN)
    points = len(grid(prom.start, prom.end, pick_step(WINDOW_S, 5)))
    by = {}
    for x in samples:
        by.setdefault((x.metric, x.node, x.gpu), []).append(x.value)
    assert all(v is not None for vals in by.values() for v in vals)
    assert by[(M_UTIL, "node-b", 1)] == pytest.approx([0.4] * points)
    assert by[(M_FB, "node-a", 1)] == pytest.approx([21000 * 2**20] * points)
    assert by[(M_POWER, "node-c", 0)] == pytest.approx([POWER_W] * points)
    assert by[(M_RX, "node-c", -1)] == pytest.approx([ETH_BPS + IB_BPS["node-c"]] * points, rel=0.05)
    assert by[(M_LOSS, "", -1)] == pytest.approx([TRAINER_LOSS] * points)  # the trainer's own exporter
    assert by[("trainer_gpu_util", "node-a", -1)] == pytest.approx([TRAINER_UTIL] * points)
    assert all(v > 0 for v in by[(M_TOKENS, "", -1)])

    # `runs show` prints the flags
    shown = json.loads(cli("runs", "show", TRAINER_RUN, "--json").stdout)
    assert {n["hostname"]: n["straggler"] for n in shown["nodes_detail"]} == {"node-a": False, "node-b": True, "node-c": True}

    # a second collect stores nothing twice and changes nothing
    r2 = _collect(cli, prom.url, "--run", TRAINER_RUN)
    assert r2.exit_code == 0, r2.output
    again = _samples(ledger_url, TRAINER_RUN)
    assert len(again) == len(samples)
    assert [(x.metric, x.node, x.gpu, x.ts, x.value) for x in again] == [(x.metric, x.node, x.gpu, x.ts, x.value) for x in samples]
    assert len(_nodes(ledger_url, TRAINER_RUN)) == 3


def test_prometheus_down_stores_missing_then_next_collect_fills(cli, session, ledger_url, prom):
    _add_run(session, "run-down", prom, hostnames=("node-a", "node-b", "node-c"))
    dead = f"http://127.0.0.1:{free_port()}"
    r = _collect(cli, dead, "--run", "run-down")
    assert r.exit_code == 1, r.output  # documented: Prometheus unreachable → 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: Prometheus at {dead} unreachable (")
    assert "stored as missing" in lines[0]
    assert json.loads(r.stdout)["reachable"] is False
    samples = _samples(ledger_url, "run-down")
    points = len(grid(prom.start, prom.end, 5))
    assert len(samples) == 3 * 5 * points  # 3 nodes × 5 expected series × grid points
    assert all(x.value is None for x in samples)  # missing, never zero
    assert all(n.gpu_util_mean is None and n.energy_kwh is None and n.nic_rx_bytes_per_s is None
               for n in _nodes(ledger_url, "run-down").values())
    # the same again stores nothing twice
    assert _collect(cli, dead, "--run", "run-down").exit_code == 1
    assert len(_samples(ledger_url, "run-down")) == len(samples)

    r = _collect(cli, prom.url, "--run", "run-down")
    assert r.exit_code == 0, r.output
    filled = _samples(ledger_url, "run-down")
    assert filled and all(x.value is not None for x in filled)
    nodes = _nodes(ledger_url, "run-down")
    assert nodes["node-b"].gpu_util_mean == pytest.approx(0.4) and nodes["node-b"].straggler
    assert nodes["node-a"].energy_kwh == pytest.approx(NODE_KWH, rel=0.03)


def test_missing_series_warns_stores_missing_and_is_filled_later(cli, session, ledger_url, prom):
    # an imported run: no RunNodes and no trainer series; the window's three DCGM hosts are its three nodes
    _add_run(session, "run-import", prom)
    # map by Hostname only: node_exporter series (instance only) cannot be placed → NIC missing
    r = _collect(cli, prom.url, "--run", "run-import", "--node-label", "Hostname")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["runs"][0]["nodes_from"] == "DCGM series"
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("warning: run run-import: no node_network_receive_bytes_total for node-a, node-b, node-c")
    nodes = _nodes(ledger_url, "run-import")
    assert nodes["node-a"].gpu_util_mean == pytest.approx(0.9) and nodes["node-a"].nic_rx_bytes_per_s is None
    nic = [x for x in _samples(ledger_url, "run-import") if x.metric == M_RX]
    assert nic and all(x.value is None for x in nic)
    # with the port-stripped instance label as well, the next collect fills them
    r = _collect(cli, prom.url, "--run", "run-import", "--node-label", "Hostname,instance")
    assert r.exit_code == 0 and r.stderr == "", r.output
    nic = [x for x in _samples(ledger_url, "run-import") if x.metric == M_RX]
    assert nic and all(x.value is not None for x in nic)
    assert _nodes(ledger_url, "run-import")["node-a"].nic_rx_bytes_per_s == pytest.approx(6e9, rel=0.03)


def test_every_grafana_expression_evaluates_against_prometheus(prom):
    from prometheus_api_client import PrometheusConnect

    dash = json.loads((REPO / "deploy" / "grafana" / "trainledger.json").read_text())
    # the cost panels read `trainledger exporter`: tests/test_exporter.py evaluates them against a Prometheus scraping it
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])
             if not re.search(r"trainledger_(cost|budget|idle|waste|gpu_seconds|time_utilization|month_elapsed|runs_running)|ALERTS", t["expr"])]
    assert len(exprs) >= 12
    names = " ".join(exprs)
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                   "node_network_receive_bytes_total", "node_network_transmit_bytes_total", "trainledger_tokens_total", "trainledger_loss"):
        assert metric in names
    variables = {"$__rate_interval": "5s", "$__range": "20s", "$node": ".*", "$run_id": ".*"}
    pc = PrometheusConnect(prom.url)
    for expr in exprs:
        q = expr
        for k, v in variables.items():
            q = q.replace(k, v)
        assert "$" not in q.replace("$1", ""), q
        result = pc.custom_query(q, params={"time": f"{prom.end.timestamp():.3f}"})  # raises on a PromQL error
        assert result, f"no data for {expr}"
    # the variables' label_values() come from series that exist
    for v in dash["templating"]["list"][1:]:
        m = re.match(r"label_values\((\w+), (\w+)\)", v["definition"])
        assert pc.custom_query(f"count by ({m.group(2)}) ({m.group(1)})")


def test_prometheus_yml_is_valid_for_promtool():
    import shutil

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    out = subprocess.run([promtool, "check", "config", str(REPO / "deploy" / "prometheus.yml")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (REPO / "deploy" / "prometheus.yml").read_text()
    assert ":9400" in text and ":9100" in text and ":9500" in text


def test_label_mapping_and_downsampling_grid():
    assert strip_port("node-a:9100") == "node-a"
    assert strip_port("10.0.0.7:9100") == "10.0.0.7"
    assert strip_port("[fe80::1]:9100") == "fe80::1"
    assert strip_port("fe80::1") == "fe80::1"
    assert node_of({"Hostname": "gpu01", "instance": "10.0.0.7:9400"}, ("Hostname", "instance")) == "gpu01"
    assert node_of({"instance": "gpu01:9100"}, ("Hostname", "instance")) == "gpu01"
    assert node_of({"instance": "gpu01:9100"}, ("Hostname",)) is None
    # step = max(15 s, window / 300) rounded up the ladder; a week (2,016 s) → 1 h
    assert pick_step(600) == 15 and pick_step(3 * 3600) == 60 and pick_step(7 * 86400) == 3600
    from datetime import datetime, timezone

    pts = grid(datetime(2026, 11, 3, 8, 0, 7, tzinfo=timezone.utc), datetime(2026, 11, 3, 8, 1, 0, tzinfo=timezone.utc), 15)
    assert [p.second for p in pts] == [15, 30, 45, 0]
