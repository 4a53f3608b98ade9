"""``trainledger demo``: a deterministic, clearly labelled demo history.

The seed scenario (SPEC §1): an owned 8-node cluster of 8× RTX 4090 over the
six months ending with the current month. Project ``demo-pretrain`` trains a
1.3B model on all 8 nodes with ``3d``; project ``demo-finetune`` fine-tunes on
2 nodes with ``zero2``. Some runs fail or are cancelled; there are idle weeks.
Every-month budgets (:data:`DEMO_BUDGETS`: the team and both projects) let the
Overview answer "will we go over?" at once.
Every demo row has a run id starting with ``demo-`` and the setting
``demo=true`` marks the ledger, so nobody mistakes it for real usage.

After the history, :func:`start_demo_sweep` starts a small *real* strategy
sweep on this machine in the background (``trainledger.runs.sweep.start_background``):
:data:`DEMO_SWEEP` on the shipped tiny config, :data:`DEMO_SWEEP_STEPS` steps
each, project ``demo-sweep``. These are tracked runs with ordinary run ids,
costed as RTX 4090 nodes; the Strategies page fills in as they finish.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates import costs
from trainledger.money.rates.months import month_bounds, months_between
from trainledger.store.catalog.prices import backdate_first_versions
from trainledger.store.models import (
    Fleet,
    MetricSample,
    NodeType,
    Offer,
    Project,
    Run,
    RunNode,
    RunStatus,
    Setting,
    User,
)
from trainledger.store.types import utcnow

SEED = 20261202
#: the demo's node type, named wherever the demo records a run (its history and its sweep): never a default
DEMO_NODE_TYPE = "rtx4090-8x"
# 1.3B GPT (24 layers, d=2048, 16 heads, seq 2048): FLOPs/token = 6N + 12·L·H·Q·T
DEMO_MODEL = {"model_shape": "1.3b", "params": 1_313_000_000, "n_layers": 24, "hidden": 2048, "heads": 16, "seq_len": 2048}
FLOPS_PER_TOKEN = 6 * DEMO_MODEL["params"] + 12 * 24 * 16 * (2048 // 16) * 2048

# --- the demo's magnitudes, and where they come from ---------------------------------------------------------
# Power: an RTX 4090 has a 450 W board power limit (NVIDIA's specification); under sustained training a card draws
#   most of it, scaling with how busy it is. The host (2 CPUs, RAM, NICs, fans, PSU losses) adds ~0.4-0.6 kW.
#   So a node of 8 draws 8 × 450 W × (35% + 65% × GPU-Util) + 0.5 kW: ~3.2-4.1 kW at 60-100% GPU-Util, the
#   3-4 kW an 8x4090 server is specified and measured at under load (the preset's nominal 4.0 kW per node).
# Peak: 165.2 dense BF16 TFLOPS per 4090 with FP32 accumulate (NVIDIA Ada Lovelace architecture whitepaper), the
#   node type's peak_bf16_tflops. Tokens/s = MFU × peak × GPUs ÷ FLOPs per token (PaLM's 6N + 12·L·H·Q·T).
# MFU: well-run LLM training reaches ~30-45% (PaLM 540B: 46.2%, Chowdhery et al. 2022; Megatron-LM 3D parallel:
#   ~40-52% of peak, Narayanan et al. 2021; MosaicML/Databricks report 35-45% on A100). PCIe cards without NVLink on
#   25 GbE lose some to communication: pretraining 33-41%, fine-tuning (ZeRO-2, 2 nodes) 28-36%.
# GPU-Util: NVML's busy share counts a kernel running, not FLOPs, so it sits far above MFU in steady training
#   (85-95% for pretraining, a little lower with ZeRO-2's gradient traffic and short fine-tunes).
# Failures: ~12% of pretraining and ~15% of fine-tuning runs fail or are cancelled after a few hours (out of
#   memory, NCCL timeouts, a lost node: Meta's OPT-175B logbook and the Llama 3 paper's 419 interruptions in
#   54 days on 16k GPUs show failures are routine at scale; a small cluster sees fewer, per run).
# Capacity: the owned fleet has FLEET_NODES nodes; pretraining uses all 8, fine-tunes 2 each (at most 3 side by
#   side, on distinct nodes), and a block starts only after the previous one ended, so no instant uses more
#   nodes than the fleet has.
FLEET_NODES = 8
# Budgets (every month, CNY): the team's 38,000 sits just above the owned fleet's ~33-36k a month, so a busy month's
#   forecast comes close; pretraining's 25,000 is crossed in its busiest months; fine-tuning's 2,000 holds.
DEMO_BUDGETS = (("", "38000"), ("demo-pretrain", "25000"), ("demo-finetune", "2000"))
GPU_POWER_KW = 0.45
GPU_IDLE_SHARE = 0.35  # of board power drawn at 0% busy share while a job holds the card
HOST_POWER_KW = 0.5
PRETRAIN = {"nodes": 8, "strategy": "3d", "dp": 8, "tp": 2, "pp": 4, "zero_stage": 1, "mfu": (0.33, 0.41),
            "util": (0.86, 0.95), "comm": (0.12, 0.30)}
FINETUNE = {"nodes": 2, "strategy": "zero2", "dp": 16, "tp": 1, "pp": 1, "zero_stage": 2, "mfu": (0.28, 0.36),
            "util": (0.78, 0.90), "comm": (0.05, 0.12)}
MICRO_BATCH, GRAD_ACCUM = 4, 8
FAILURES = ("CUDA out of memory on rank {rank} (demo)", "NCCL watchdog timeout on rank {rank} (demo)",
            "node demo-node{node:02d} lost: ECC uncorrectable error (demo)")


def node_power_kw(gpus: int, gpu_util: float) -> float:
    """A node's mean draw (kW) at a GPU busy share: GPUs × 450 W × (35% + 65% × util) + the host's 0.5 kW."""
    return HOST_POWER_KW + gpus * GPU_POWER_KW * (GPU_IDLE_SHARE + (1 - GPU_IDLE_SHARE) * gpu_util)


def _add_months(month: str, delta: int) -> str:
    y, m = map(int, month.split("-"))
    idx = y * 12 + (m - 1) + delta
    return f"{idx // 12:04d}-{idx % 12 + 1:02d}"


#: the steps of :func:`generate_demo` that report progress: runs, per-node figures and losses, phases, budgets
DEMO_STEPS = 4


def generate_demo(session: Session, end_month: Optional[str] = None, now: Optional[datetime] = None,
                  progress: Optional[Callable[[int, Optional[int]], None]] = None) -> dict[str, int]:
    """Fill an empty ledger with six months of demo history; refuses a ledger that has runs.
    ``progress(steps done, DEMO_STEPS)`` after each step."""
    step = (lambda done: progress(done, DEMO_STEPS)) if progress else (lambda done: None)
    if session.exec(select(Run.id).limit(1)).first() is not None:
        if is_demo(session):  # running the README's first command twice is fine
            from sqlalchemy import func

            return {"runs": session.exec(select(func.count()).select_from(Run)).one(), "months": 6,
                    "samples": 0, "already_present": True}
        raise LedgerInputError("demo: this ledger already has runs; point --db at a new file (e.g. --db sqlite:///demo.db)")
    now = now or utcnow()
    end_month = end_month or now.strftime("%Y-%m")
    first_month = _add_months(end_month, -5)
    demo = _Demo.start(session, first_month, now)
    backdate_first_versions(session, month_bounds(first_month, timezone.utc)[0])  # the presets' prices stood then
    demo.walk(first_month, end_month)
    session.add_all(demo.runs)
    session.flush()
    step(1)
    samples = demo.add_nodes_and_losses()
    session.flush()
    step(2)
    add_demo_phases(session, demo.runs, demo.hosts)
    session.flush()
    step(3)
    add_demo_budgets(session)
    step(4)
    return {"runs": len(demo.runs), "months": len(months_between(first_month, end_month)), "samples": samples}


@dataclass
class _Demo:
    """The demo ledger being written: its cluster, projects and users, and the runs so far."""

    session: Session
    rng: random.Random
    now: datetime
    nt: NodeType
    own: Offer
    projects: dict[str, Project]
    users: dict[str, User]
    runs: list[Run] = field(default_factory=list)
    hosts: dict[str, list[int]] = field(default_factory=dict)  # run id -> the fleet nodes (demo-nodeNN) it ran on

    @classmethod
    def start(cls, session: Session, first_month: str, now: datetime) -> "_Demo":
        """The demo marker, the owned 8-node fleet, two projects and three users."""
        rng = random.Random(SEED)
        nt = session.exec(select(NodeType).where(NodeType.name == DEMO_NODE_TYPE)).one()
        own = session.exec(select(Offer).where(Offer.name == "rtx4090-own")).one()
        start, _ = month_bounds(first_month, timezone.utc)
        session.add(Setting(key="demo", value="true"))
        session.add(Fleet(name="demo-cluster", offer_id=own.id, node_count=FLEET_NODES, valid_from=start.date()))
        projects = {n: Project(name=n) for n in ("demo-pretrain", "demo-finetune")}
        users = {n: User(name=n, role=r) for n, r in (("alice", "lead"), ("bob", "viewer"), ("chen", "viewer"))}
        session.add_all([*projects.values(), *users.values()])
        session.flush()
        return cls(session, rng, now, nt, own, projects, users)

    def walk(self, first_month: str, end_month: str) -> None:
        """Walk the six months: pretraining blocks, fine-tunes between, an idle fortnight in month 3.

        A block (one pretraining run on all nodes, or 1-3 fine-tunes on 2 nodes each) starts only after the
        previous block's last run ended, so the fleet is never over-used.
        """
        rng, tz = self.rng, timezone.utc
        t = month_bounds(first_month, tz)[0] + timedelta(hours=9)
        idle_from = month_bounds(_add_months(first_month, 2), tz)[0] + timedelta(days=7)
        idle_to = idle_from + timedelta(days=14)
        users_cycle = ["alice", "bob", "chen"]
        i = 0
        end = min(self.now, month_bounds(end_month, tz)[1])
        while t < end:
            if idle_from <= t < idle_to:
                t = idle_to + timedelta(hours=9)
                continue
            i += 1
            if rng.random() < 0.55:
                hours = rng.uniform(30, 90)
                status = RunStatus.succeeded if rng.random() > 0.12 else rng.choice([RunStatus.failed, RunStatus.cancelled])
                if status != RunStatus.succeeded:
                    hours = rng.uniform(2, 12)
                self.add("pretrain", t, hours, status, "alice", list(range(PRETRAIN["nodes"])))
                t += timedelta(hours=hours + rng.uniform(2, 20))
            else:
                block_end = t
                for j in range(rng.randint(1, 3)):  # fine-tunes on 2 nodes each, often side by side
                    hours = rng.uniform(3, 14)
                    status = RunStatus.succeeded if rng.random() > 0.15 else rng.choice([RunStatus.failed, RunStatus.cancelled])
                    t0 = t + timedelta(hours=rng.uniform(0, 3))
                    self.add("finetune", t0, hours, status, users_cycle[i % 3], [2 * j, 2 * j + 1])
                    block_end = max(block_end, t0 + timedelta(hours=hours))
                t = max(t + timedelta(hours=rng.uniform(12, 40)), block_end + timedelta(hours=rng.uniform(1, 6)))

    def add(self, kind: str, t0: datetime, hours: float, status: RunStatus, user: str, hosts: list[int]) -> Optional[Run]:
        """One pretraining (8 nodes, 3d) or fine-tuning (2 nodes, zero2) run on fleet nodes ``hosts``; cut at now, none after it."""
        rng, nt = self.rng, self.nt
        t1 = t0 + timedelta(hours=hours)
        if t0 >= self.now:
            return None
        if t1 > self.now:
            t1 = self.now
            hours = (t1 - t0).total_seconds() / 3600
        n = len(self.runs) + 1
        spec = PRETRAIN if kind == "pretrain" else FINETUNE
        nodes = spec["nodes"]
        util, mfu = rng.uniform(*spec["util"]), rng.uniform(*spec["mfu"])
        gpus = nodes * nt.gpus_per_node
        tps = mfu * nt.peak_bf16_tflops * 1e12 * gpus / FLOPS_PER_TOKEN
        tokens_per_step = spec["dp"] * MICRO_BATCH * GRAD_ACCUM * DEMO_MODEL["seq_len"]
        step_s = tokens_per_step / tps
        tokens = int(tps * hours * 3600)
        loss = (2.1 if kind == "pretrain" else 1.6) + rng.uniform(0, 0.3) if status == RunStatus.succeeded else None
        error = None
        if status == RunStatus.failed:
            error = rng.choice(FAILURES).format(rank=rng.randrange(gpus), node=rng.choice(hosts))
        run = Run(id=f"demo-{n:04d}", name=f"{kind}-{t0:%m%d}-{n:03d}", project_id=self.projects[f"demo-{kind}"].id,
                  user_id=self.users[user].id, launcher="deepspeed", node_type_id=nt.id, offer_id=self.own.id, nodes=nodes,
                  gpus_per_node=nt.gpus_per_node, world_size=gpus, strategy=spec["strategy"], dp=spec["dp"],
                  tp=spec["tp"], pp=spec["pp"], zero_stage=spec["zero_stage"], micro_batch=MICRO_BATCH,
                  grad_accum=GRAD_ACCUM, **DEMO_MODEL, config={"demo": True},
                  status=status, created_at=t0, started_at=t0, ended_at=t1, heartbeat_at=t1,
                  steps=tokens // tokens_per_step, tokens=tokens, step_time_median_s=step_s, step_time_p95_s=step_s * 1.08,
                  tokens_per_s=tps, mfu=mfu, gpu_util_mean=util, gpu_util_p95=min(0.99, util + 0.04), util_source="nvml",
                  peak_mem_bytes=int(rng.uniform(19, 23) * 2**30), comm_share=rng.uniform(*spec["comm"]),
                  final_loss=loss, exit_code=0 if status == RunStatus.succeeded else (1 if status == RunStatus.failed else None),
                  error=error)
        self.runs.append(run)
        self.hosts[run.id] = hosts
        return run

    def add_nodes_and_losses(self) -> int:
        """Per-node figures of every run (busy share, energy at :func:`node_power_kw`) and loss curves of the
        succeeded pretraining runs; returns the samples added."""
        rng, samples = self.rng, 0
        for run in self.runs:
            pretrain = run.strategy == PRETRAIN["strategy"]
            straggler_rank = 5 if pretrain and run.id.endswith("3") else None
            hours = float(costs.hours_between(run.started_at, run.ended_at))
            for r, host in enumerate(self.hosts[run.id]):
                util = run.gpu_util_mean - (0.25 if r == straggler_rank else rng.uniform(-0.02, 0.02))
                util = min(0.99, util)
                self.session.add(RunNode(run_id=run.id, hostname=f"demo-node{host:02d}", node_rank=r, gpu_util_mean=util,
                                         gpu_util_p95=min(0.99, util + 0.04), util_source="nvml",
                                         mem_peak_bytes=run.peak_mem_bytes, step_time_share=1 / run.nodes,
                                         energy_kwh=hours * node_power_kw(run.gpus_per_node, util),
                                         straggler=r == straggler_rank))
            if pretrain and run.status == RunStatus.succeeded:
                span = (run.ended_at - run.started_at) / 40
                for k in range(40):
                    loss = run.final_loss + 6.0 * math.exp(-k / 6) + rng.uniform(-0.03, 0.03)
                    self.session.add(MetricSample(run_id=run.id, node="", gpu=-1, metric="loss", ts=run.started_at + span * k, value=loss))
                    samples += 1
        return samples


DEMO_SWEEP = ("dp", "zero2", "pp", "tp", "3d")  # 3d: 4 processes, the others 2
DEMO_SWEEP_STEPS = 10
DEMO_SWEEP_PROJECT = "demo-sweep"


def add_demo_budgets(session: Session) -> None:
    """The demo's every-month budgets (:data:`DEMO_BUDGETS`), through ``budget set``'s own function."""
    from trainledger.money.outlook.budgets import set_budget

    for project, amount in DEMO_BUDGETS:
        set_budget(session, amount, project=project or None)


def sweep_unavailable(end_month: Optional[str] = None, now: Optional[datetime] = None) -> Optional[str]:
    """Why the demo cannot start its sweep here (None if it can)."""
    import importlib.util

    now = now or utcnow()
    if end_month and end_month < now.strftime("%Y-%m"):
        return (f"the history ends in {end_month}, before this month, and the sweep's runs would be dated now; "
                "leave out --end-month to get one")
    missing = [m for m in ("torch", "deepspeed") if importlib.util.find_spec(m) is None]
    if missing:
        return f"the trainer is not installed here ({', '.join(missing)} missing: pip install 'trainledger[train]')"
    return None


def start_demo_sweep(url: str) -> dict:
    """Start the demo's strategy sweep in the background (returns at once): sweep id, strategies, pid, log."""
    from trainledger.runs.launch import shipped_config_dir
    from trainledger.runs.sweep import SweepRequest, start_background

    req = SweepRequest(config=shipped_config_dir() / "dp.yaml", strategies=list(DEMO_SWEEP),
                       steps=DEMO_SWEEP_STEPS, gpus_per_node=2, project=DEMO_SWEEP_PROJECT, node_type=DEMO_NODE_TYPE)
    return start_background(url, req)


def is_demo(session: Session) -> bool:
    row = session.get(Setting, "demo")
    return bool(row and row.value == "true")


# --- goodput: phases of the demo runs (trainledger.money.goodput.account) ------------------------------------------------------
# Start-up of a 1.3B DeepSpeed job on 8 nodes: process launch, NCCL init, data shards, model build: 4-10 min
#   (a resumed run adds 2-5 min of checkpoint restore); checkpoint saves of ~16 GB of model + optimizer state to
#   shared storage: 1-3 min every 2 h (fine-tunes: 20-60 s every hour); evals 3-8 min every 4 h; data waits 1-4%
#   of step time; a straggler node (the demo's flagged one) makes the others wait ~8% of each step, else 0.5-1.5%.
#   About 0.5% of the time no phase explains (unattributed). A pretraining run after an interrupted one resumes it.

def add_demo_phases(session: Session, runs: list[Run], hosts: dict[str, list[int]]) -> int:
    """``run_phase`` rows of the rank-0 node of every demo run, and ``resume_of`` on a pretraining run that
    follows an interrupted one (a chain); a separate random stream, so the rest of the demo is unchanged."""
    from trainledger.store.models import RunPhase

    rng = random.Random(SEED + 25)
    previous: Optional[Run] = None
    rows = 0
    for run in runs:
        pretrain = run.strategy == PRETRAIN["strategy"]
        resumed = pretrain and previous is not None and previous.status in (RunStatus.failed, RunStatus.cancelled)
        if resumed:
            run.resume_of = previous.id
        if pretrain:
            previous = run
        wall = (run.ended_at - run.started_at).total_seconds()
        phases = _demo_phase_seconds(rng, wall, pretrain, resumed, run.id.endswith("3"))
        node = f"demo-node{hosts[run.id][0]:02d}"
        for name, (secs, count) in phases.items():
            session.add(RunPhase(run_id=run.id, node=node, phase=name, seconds=secs, count=count,
                                 first_at=run.started_at, last_at=run.ended_at))
            rows += 1
    return rows


def _demo_phase_seconds(rng: random.Random, wall: float, pretrain: bool, resumed: bool,
                        straggler: bool) -> dict[str, tuple[float, int]]:
    """Seconds and counts per phase of one demo run of ``wall`` seconds (they add up to less than ``wall``)."""
    startup = min(wall * 0.2, rng.uniform(240, 600))
    out = {"startup": (startup, 1)}
    if resumed:
        out["checkpoint_restore"] = (min(wall * 0.05, rng.uniform(120, 300)), 1)
    every, save = (7200, (60, 180)) if pretrain else (3600, (20, 60))
    saves = int(wall // every)
    if saves:
        out["checkpoint_save"] = (sum(rng.uniform(*save) for _ in range(saves)), saves)
    evals = int(wall // 14400)
    if evals:
        out["eval"] = (sum(rng.uniform(180, 480) for _ in range(evals)), evals)
    stepping = max(0.0, wall * 0.995 - sum(v[0] for v in out.values()))
    data = stepping * rng.uniform(0.01, 0.04)
    wait = stepping * (0.08 if straggler and pretrain else rng.uniform(0.005, 0.015))
    steps = max(1, int(stepping // 6))
    out.update(data=(data, steps), straggler_wait=(wait, steps), step=(stepping - data - wait, steps))
    return out
