"""The runs in the ledger: ``trainledger runs list|show|reap``, and what the dashboard lists.

Every path that lists runs first reaps stale ones: a ``running`` run whose
heartbeat is older than :data:`STALE_AFTER` is marked ``crashed`` and ends at
its last heartbeat (it is still costed up to then).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Optional, Sequence

from sqlalchemy import func, update
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.allocation import shares
from trainledger.money.facts import rollup
from trainledger.money.rates import costs
from trainledger.money.rates.months import month_bounds, month_of, run_interval
from trainledger.sources.record.outcome import REAPED_ERROR
from trainledger.store.defaults import NOT_COSTED, not_costed_reason
from trainledger.store.lookup import get_run
from trainledger.store.models import (
    LIVE_STATUSES,
    MetricSample,
    NodeType,
    Offer,
    OfferKind,
    Project,
    Run,
    RunNode,
    RunStatus,
    User,
)
from trainledger.store.settings import display_timezone
from trainledger.store.types import report_clock, utcnow

STALE_AFTER = timedelta(seconds=60)


def reap_stale(session: Session, stale_after: timedelta = STALE_AFTER, now: Optional[datetime] = None) -> int:
    """Mark running runs with a stopped heartbeat as crashed, ended at the last heartbeat (their lost work
    runs from their last checkpoint to then), and the wrapper nodes whose heartbeat stopped as crashed."""
    now = now or utcnow()
    cutoff = now - stale_after
    stale = session.exec(
        select(Run.id, Run.heartbeat_at, Run.started_at, Run.last_checkpoint_at).where(
            Run.status == RunStatus.running, Run.heartbeat_at.is_not(None), Run.heartbeat_at < cutoff)
    ).all()
    for rid, hb, started, ckpt in stale:
        end = max(hb, started or hb)
        lost_from, lost_until = rollup.run_lost_interval(RunStatus.crashed, started, end, hb, ckpt)
        session.exec(
            update(Run).where(Run.id == rid, Run.status == RunStatus.running)
            .values(status=RunStatus.crashed, ended_at=end, lost_from=lost_from, lost_until=lost_until,
                    error=REAPED_ERROR)
        )
    session.exec(update(RunNode).where(RunNode.status == "running", RunNode.heartbeat_at < cutoff)
                 .values(status="crashed"))
    if stale:
        rollup.touch(session, [rid for rid, _, _, _ in stale])  # a Core UPDATE: fold it into the monthly rollup
    return len(stale)


def _status(value: Optional[str]) -> Optional[RunStatus]:
    if value is None:
        return None
    try:
        return RunStatus(value)
    except ValueError:
        raise LedgerInputError(f"--status: expected one of {', '.join(s.value for s in RunStatus)}, got {value!r}") from None


def _filters(session: Session, q, *, month: Optional[str], project: Optional[str], user: Optional[str],
             status: Optional[str], strategy: Optional[str], sweep: Optional[str],
             projects: Optional[Sequence[str]] = None):
    """``q`` narrowed in SQL by the ``runs list`` filters (joins to Project/User only when filtered by them);
    ``projects``: only runs of these projects (a dashboard user's scope; None: every run)."""
    if projects is not None:
        q = q.where(Run.project_id.in_(select(Project.id).where(Project.name.in_(list(projects)))))
    if month:
        ms, me = month_bounds(month, display_timezone(session))
        q = q.where(Run.started_at < me, (Run.ended_at.is_(None)) | (Run.ended_at > ms))
    if project:
        q = q.where(Run.project_id == select(Project.id).where(Project.name == project).scalar_subquery())
    if user:
        q = q.where(Run.user_id == select(User.id).where(User.name == user).scalar_subquery())
    if status:
        q = q.where(Run.status == _status(status))
    if strategy:
        q = q.where(Run.strategy == strategy)
    if sweep:
        q = q.where(Run.sweep_id == sweep)
    return q


def list_runs(session: Session, *, month: Optional[str] = None, project: Optional[str] = None,
              user: Optional[str] = None, status: Optional[str] = None, strategy: Optional[str] = None,
              sweep: Optional[str] = None, limit: int = 100, offset: int = 0,
              projects: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    """Runs, newest first, filtered in SQL; node-hours are the run's whole duration, lost GPU-hours its
    lost work (failed/crashed/cancelled: since its last checkpoint, else since its start). ``projects``: only
    runs of these projects (the dashboard's project scope).

    Only the page (``limit`` rows from ``offset``) is read: the newest-first order
    walks the ``started_at`` index, so the cost does not grow with the ledger.
    """
    reap_stale(session)
    q = (select(Run.id, Run.name, Project.name, User.name, Run.status, Run.strategy, NodeType.name,
                Run.nodes, Run.gpus_per_node, Run.started_at, Run.ended_at, Run.heartbeat_at, Run.tokens,
                Run.gpu_util_mean, Run.mfu, Run.final_loss, Run.sweep_id, Run.lost_from, Run.lost_until, Run.share,
                Run.offer_id)
         .outerjoin(NodeType, NodeType.id == Run.node_type_id)  # a run without a node type is listed too
         .outerjoin(Project, Project.id == Run.project_id)
         .outerjoin(User, User.id == Run.user_id))
    q = _filters(session, q, month=month, project=project, user=user, status=status, strategy=strategy, sweep=sweep,
                 projects=projects)
    q = q.order_by(Run.started_at.desc(), Run.id).offset(offset).limit(limit)
    now = utcnow()
    tz = display_timezone(session)
    out = []
    offered = set(session.exec(select(NodeType.name).join(Offer, Offer.node_type_id == NodeType.id)).all())
    for (rid, name, proj, usr, st, strat, nt, nodes, gpn, started, ended, hb, tokens, util, mfu_, loss,
         sweep_id, lost_from, lost_until, share, offer_id) in session.exec(q).all():
        st_v = getattr(st, "value", st)
        iv = run_interval(started, ended, st_v, hb, now)
        nh = shares.scale(costs.node_hours(nodes, costs.hours_between(*iv)), share) if iv else costs.ZERO  # held
        out.append({"id": rid, "name": name, "project": proj, "user": usr, "status": st_v, "strategy": strat,
                    "node_type": nt, "nodes": nodes, "gpus_per_node": gpn,
                    "started_at": started.astimezone(tz) if started else None,
                    "ended_at": ended.astimezone(tz) if ended else None, "node_hours": nh, "tokens": tokens, "gpu_util_mean": util, "mfu": mfu_,
                    "final_loss": loss, "sweep_id": sweep_id,
                    "lost_gpu_hours": (costs.gpu_hours(costs.node_hours(nodes, costs.hours_between(lost_from, lost_until)), gpn)
                                       if lost_from is not None else None)})
        if nt is None or (offer_id is None and nt not in offered):  # never priced as something else
            out[-1]["not_costed"] = not_costed_reason(nt)
    return out


def _indexed_by_end(session: Session) -> bool:
    """Whether ``run`` has an index leading with ``ended_at`` (looked up once per engine)."""
    bind = session.get_bind()
    key = str(bind.url)
    if key not in _END_INDEX:
        from sqlalchemy import inspect

        # the session's own connection: a second one would queue behind this transaction's write lock (SQLite)
        _END_INDEX[key] = any((ix.get("column_names") or [None])[0] == "ended_at"
                              for ix in inspect(session.connection()).get_indexes("run"))
    return _END_INDEX[key]


_END_INDEX: dict[str, bool] = {}


def count_runs(session: Session, *, month: Optional[str] = None, project: Optional[str] = None,
               user: Optional[str] = None, status: Optional[str] = None, strategy: Optional[str] = None,
               sweep: Optional[str] = None) -> int:
    """How many runs :func:`list_runs` would list with these filters and no limit (COUNT in SQL).

    With a month and an index on ``run(ended_at, …)``, the count is split into runs
    started in the month, runs started before it that end inside or after it, and
    runs started before it with no end, so each part is an index range of about
    the month's size; otherwise it is one COUNT over the ``started_at`` index range
    up to the month's end (it grows with the ledger: ~0.1 s per million runs).
    """
    rest = dict(project=project, user=user, status=status, strategy=strategy, sweep=sweep)
    base = select(func.count()).select_from(Run)
    if not month or not _indexed_by_end(session):
        return session.exec(_filters(session, base, month=month, **rest)).one()
    ms, me = month_bounds(month, display_timezone(session))
    parts = (base.where(Run.started_at >= ms, Run.started_at < me),
             base.where(Run.ended_at > ms, Run.started_at < ms),
             base.where(Run.ended_at.is_(None), Run.started_at < ms))
    return sum(session.exec(_filters(session, q, month=None, **rest)).one() for q in parts)


def cost_under_offers(offers: list, nodes: int, duration_hours: Decimal) -> list[dict[str, Any]]:
    """A run of ``nodes`` × ``duration_hours`` costed under each offer, sorted by offer name.

    rent_elastic: nodes × billed hours × hourly rate (granularity and minimum per run);
    own / rent_reserved: node-hours × full-use rate per node-hour (730 h month).
    Offers may be ledger rows or detached copies (the Planner costs planned runs with it;
    ``show_run`` passes them at their list prices converted to the presented currency).
    """
    nh = costs.node_hours(nodes, duration_hours)
    out = []
    for o in sorted(offers, key=lambda o: o.name):
        kind = getattr(o.kind, "value", o.kind)
        if kind == OfferKind.rent_elastic.value:
            c = costs.elastic_run_cost(o, nodes, duration_hours)
            basis = "billed node-hours × hourly rate"
        else:
            c = nh * costs.busy_rate_per_node_hour(o)
            basis = "node-hours × full-use rate per node-hour (730 h month)"
        out.append({"offer": o.name, "kind": kind, "currency": o.currency, "cost": c, "basis": basis})
    return out


def _lines_by_run(session: Session, runs: list[Run], currency: Optional[str] = None,
                  now: Optional[datetime] = None) -> tuple[dict[str, list[dict[str, Any]]], list]:
    """Each run's month lines of the monthly report at ``now`` (cost and lost work at the prices in force then,
    energy and CO2e, final or provisional), per run id, and the carbon intensities applied. ``currency``: as
    ``report monthly --currency``."""
    from trainledger.money.rates.months import months_between

    tz = display_timezone(session)
    now = now or utcnow()
    months: set[str] = set()
    for run in runs:
        iv = run_interval(run.started_at, run.ended_at, run.status.value, run.heartbeat_at, now)
        if iv:
            months.update(months_between(month_of(iv[0], tz), month_of(iv[1], tz)))
    out: dict[str, list[dict[str, Any]]] = {run.id: [] for run in runs}
    intensities: list = []
    for month in sorted(months):
        rep = monthly_report(session, month, lines={run.id for run in runs}, projects=False, currency=currency, now=now)
        for sl in rep.runs:
            out[sl.run_id].append({"month": month, "node_hours": sl.node_hours, "cost": sl.cost, "offer": sl.offer,
                                   "lost_gpu_hours": sl.lost_gpu_hours, "lost_work_cost": sl.lost_work_cost,
                                   "currency": rep.currency, "energy_kwh": sl.energy_kwh, "co2e_kg": sl.co2e_kg,
                                   "co2e_basis": sl.co2e_basis, "finality": sl.finality})
            intensities += [(sl.run_id, i) for i in sl.intensities]
    return out, intensities


def resume_chain(session: Session, run_id: str) -> list[Run]:
    """The runs linked to ``run_id`` by ``resume_of`` (restarts from a checkpoint, requeues of a Slurm job),
    first to last: its predecessors back to the first run, then the runs restarted from it, by start."""
    run = get_run(session, run_id)
    back = [run]
    seen = {run.id}
    while back[0].resume_of and back[0].resume_of not in seen:
        prev = session.get(Run, back[0].resume_of)
        if prev is None:
            break
        back.insert(0, prev)
        seen.add(prev.id)
    frontier, after = [run.id], []
    while frontier:
        nxt = session.exec(select(Run).where(Run.resume_of.in_(frontier)).order_by(Run.started_at, Run.id)).all()
        nxt = [r for r in nxt if r.id not in seen]
        seen.update(r.id for r in nxt)
        after += nxt
        frontier = [r.id for r in nxt]
    return back + after


def show_run(session: Session, run_id: str, currency: Optional[str] = None,
             now: Optional[datetime] = None) -> dict[str, Any]:
    """A run with its nodes, its cost, lost work, energy and CO2e per month (actual, at the prices in force then),
    its cost under every offer (at their list prices), and its resume chain (the runs restarted from one another)
    with their total cost and lost work, as at ``now`` (default: ``$TRAINLEDGER_NOW``, else the clock).
    ``currency``: as ``report monthly --currency``. ``finality``: final, or provisional while a month
    of it drawn from a fleet has not closed (docs/MONEY.md)."""
    reap_stale(session)
    run = get_run(session, run_id)
    nt = session.get(NodeType, run.node_type_id) if run.node_type_id is not None else None
    now = now or report_clock()
    iv = run_interval(run.started_at, run.ended_at, run.status.value, run.heartbeat_at, now)
    duration = costs.hours_between(*iv) if iv else costs.ZERO
    nh = shares.scale(costs.node_hours(run.nodes, duration), run.share)  # node-hours held (shares)
    under = [{**u, "cost": shares.scale(u["cost"], run.share)}  # the run pays its share of each node
             for u in cost_under_offers(_list_prices(session, run.node_type_id, currency, now), run.nodes, duration)
             if run.node_type_id is not None]
    chain = resume_chain(session, run.id)
    lines, applied = _lines_by_run(session, chain, currency, now)
    monthly = lines[run.id]
    intensities: list = []
    for rid, i in applied:
        if rid == run.id and i not in intensities:
            intensities.append(i)
    data = run.model_dump()
    data["status"] = run.status.value
    data["node_type"] = nt.name if nt else None
    data["project"] = session.get(Project, run.project_id).name if run.project_id else None
    data["user"] = session.get(User, run.user_id).name if run.user_id else None
    data["duration_hours"] = duration
    data["node_hours"] = nh
    sliced = (run.share_basis or "").startswith(("mig", "gpu_fraction"))  # slices of GPUs: share × the node's GPUs
    data["gpu_hours"] = (costs.gpu_hours(nh, nt.gpus_per_node) if nt and run.share and sliced
                         else costs.gpu_hours(costs.node_hours(run.nodes, duration), run.gpus_per_node))
    data["cost_actual"] = sum((x["cost"] for x in monthly), costs.ZERO) if monthly else None
    if not monthly and iv and (nt is None or (run.offer_id is None and not under)):  # no offer can cost it
        data["cost_actual"] = NOT_COSTED
        data["not_costed"] = not_costed_reason(nt.name if nt else None)
    data["finality"] = ("provisional" if any(x["finality"] == "provisional" for x in monthly) else "final") \
        if monthly else None
    data.update(_lost(run, monthly))
    data["cost_by_month"] = monthly
    data["cost_under_offers"] = under
    data["cost_per_1m_tokens"] = costs.cost_per_million_tokens(data["cost_actual"], run.tokens) if monthly else None
    data["currency"] = monthly[0]["currency"] if monthly else (under[0]["currency"] if under else None)
    data.update(_run_carbon(monthly, intensities))
    data["nodes_detail"] = [n.model_dump(exclude={"id", "run_id"}) for n in
                            session.exec(select(RunNode).where(RunNode.run_id == run.id).order_by(RunNode.node_rank, RunNode.hostname)).all()]
    data["resume_chain"] = _chain(chain, lines) if len(chain) > 1 else None
    return data


def _list_prices(session: Session, node_type_id: int, currency: Optional[str], now: datetime) -> list:
    """The node type's offers at their list prices (newest version), converted at the rate in force now."""
    from trainledger.money.rates.fx import at_list_prices

    return at_list_prices(session, session.exec(select(Offer).where(Offer.node_type_id == node_type_id)).all(), currency, now)


def _run_carbon(monthly: list[dict[str, Any]], intensities: list) -> dict[str, Any]:
    """A run's energy and CO2e: Σ of its months, how they were known, and the intensities applied."""
    from trainledger.money.rates.carbon import DEFAULT

    known = [m for m in monthly if m["co2e_kg"] is not None]
    bases = {m["co2e_basis"] for m in monthly if m["co2e_basis"]}
    return {"energy_kwh": sum((m["energy_kwh"] for m in monthly), costs.ZERO) if monthly else None,
            "co2e_kg": sum((m["co2e_kg"] for m in known), costs.ZERO) if known else None,
            "co2e_basis": bases.pop() if len(bases) == 1 else ("mixed" if bases else None),
            "carbon_intensity_assumed": any(i.assumed for i in intensities) if intensities else DEFAULT.assumed,
            "carbon_intensity_g_per_kwh": [i.g_per_kwh for i in intensities],
            "carbon_location": ", ".join(dict.fromkeys(i.location for i in intensities if i.location)) or None,
            "carbon_intensity_source": "; ".join(dict.fromkeys(i.source for i in intensities if i.source)) or None}


def model_card(session: Session, run_id: str, training_type: str = "pre-training", currency: Optional[str] = None) -> dict[str, Any]:
    """A Hugging Face model-card metadata block for a run: ``co2_eq_emissions`` (emissions in grams, source,
    training_type, geographical_location, hardware_used) and the run's GPU-hours and cost."""
    if training_type not in ("pre-training", "fine-tuning"):
        raise LedgerInputError(f"--training-type: expected pre-training or fine-tuning, got {training_type!r}")
    d = show_run(session, run_id, currency)
    if d["co2e_kg"] is None:
        raise LedgerInputError(f"RUN_ID: {d['id']} has no CO2e: it never started, or its node type has no "
                               "nominal_power_kw and no energy was measured (`trainledger collect`)")
    nt = session.exec(select(NodeType).where(NodeType.name == d["node_type"])).one()
    basis = {"measured": "measured energy", "estimated": "energy estimated from nominal power x node-hours",
             "mixed": "partly measured, partly estimated energy"}.get(d["co2e_basis"], "energy")
    g = ", ".join(format(x.normalize(), "f") for x in d["carbon_intensity_g_per_kwh"])
    assumed = " (assumed default grid intensity)" if d["carbon_intensity_assumed"] else ""
    return {"co2_eq_emissions": {
        "emissions": float((d["co2e_kg"] * 1000).quantize(Decimal("0.01"))),
        "source": f"trainledger: {basis}, {d['energy_kwh'].quantize(Decimal('0.001'))} kWh x {g} gCO2e/kWh{assumed}",
        "training_type": training_type,
        "geographical_location": d["carbon_location"] or "unknown",
        "hardware_used": f"{d['nodes']} x {nt.gpus_per_node} {nt.gpu_model} ({d['nodes'] * nt.gpus_per_node} GPUs)"},
        "training_compute": {"run_id": d["id"], "gpu_hours": float(d["gpu_hours"].quantize(Decimal("0.001"))),
                             "cost": None if not isinstance(d["cost_actual"], Decimal) else str(costs.cents(d["cost_actual"])),
                             "currency": d["currency"], "energy_kwh": float(d["energy_kwh"].quantize(Decimal("0.001"))),
                             "co2e_basis": d["co2e_basis"]}}


def _lost(run: Run, monthly: list[dict[str, Any]]) -> dict[str, Any]:
    """Lost work of a run (``trainledger.money.rates.months.lost_interval``): its span, GPU-hours and cost."""
    lost = run.lost_from is not None
    return {"lost_hours": costs.hours_between(run.lost_from, run.lost_until) if lost else None,
            "lost_gpu_hours": sum((x["lost_gpu_hours"] for x in monthly), costs.ZERO) if lost else None,
            "lost_work_cost": sum((x["lost_work_cost"] for x in monthly), costs.ZERO) if lost else None,
            "lost_since": ("checkpoint" if run.last_checkpoint_at is not None else "start") if lost else None}


def _chain(chain: list[Run], lines: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A resume chain read as one job: its runs, and their total node-hours, cost and lost work."""
    rows = []
    for r in chain:
        ls = lines[r.id]
        rows.append({"id": r.id, "status": r.status.value, "resume_of": r.resume_of, "started_at": r.started_at,
                     "ended_at": r.ended_at, "last_checkpoint_step": r.last_checkpoint_step,
                     "node_hours": sum((x["node_hours"] for x in ls), costs.ZERO),
                     "cost": sum((x["cost"] for x in ls), costs.ZERO),
                     "lost_work_cost": sum((x["lost_work_cost"] for x in ls), costs.ZERO)})
    return {"runs": rows, "node_hours": sum((r["node_hours"] for r in rows), costs.ZERO),
            "cost": sum((r["cost"] for r in rows), costs.ZERO),
            "lost_work_cost": sum((r["lost_work_cost"] for r in rows), costs.ZERO)}


# --- what the dashboard lists: months with runs, filter values, loss curves, live progress ----------

def run_month_span(session: Session) -> Optional[tuple[str, str]]:
    """First and last month (display time zone) in which a run started; None for an empty ledger."""
    first, last = session.exec(select(func.min(Run.started_at), func.max(Run.started_at))).one()
    if first is None:
        return None
    tz = display_timezone(session)
    return month_of(first, tz), month_of(last, tz)


def filter_values(session: Session, projects: Optional[Sequence[str]] = None) -> dict[str, list[str]]:
    """Distinct projects, users and strategies for the Runs filters (SELECT DISTINCT, not a scan in Python);
    ``projects``: only those projects, and the users and strategies of their runs (the dashboard's project scope)."""
    if projects is not None:
        mine = select(Project.id).where(Project.name.in_(list(projects)))
        return {
            "project": list(session.exec(select(Project.name).where(Project.name.in_(list(projects)))
                                         .order_by(Project.name)).all()),
            "user": list(session.exec(select(User.name).where(User.id.in_(
                select(Run.user_id).where(Run.project_id.in_(mine)))).order_by(User.name)).all()),
            "strategy": [s for s in session.exec(select(Run.strategy).where(Run.project_id.in_(mine)).distinct()
                                                 .order_by(Run.strategy)).all() if s],
        }
    return {
        "project": list(session.exec(select(Project.name).order_by(Project.name)).all()),
        "user": list(session.exec(select(User.name).order_by(User.name)).all()),
        "strategy": [s for s in session.exec(select(Run.strategy).distinct().order_by(Run.strategy)).all() if s],
    }


def loss_curve(session: Session, run_id: str, metric: str = "loss") -> list[dict[str, Any]]:
    """A run's run-level series of ``metric`` (MetricSample, gpu = -1 or any), oldest first."""
    rows = session.exec(select(MetricSample.ts, MetricSample.value, MetricSample.node)
                        .where(MetricSample.run_id == run_id, MetricSample.metric == metric)
                        .order_by(MetricSample.ts)).all()
    return [{"ts": ts, "value": v, "node": node or "run"} for ts, v, node in rows]


ACTIVE = LIVE_STATUSES


def active_runs(session: Session, limit: int = 20) -> list[dict[str, Any]]:
    """Queued and running runs, newest first (stale ones are reaped first, as ``runs list`` does)."""
    reap_stale(session)
    rows = session.exec(select(Run.id, Run.name, Run.status, Run.strategy, Run.sweep_id)
                        .where(Run.status.in_(ACTIVE)).order_by(Run.created_at.desc(), Run.id).limit(limit)).all()
    return [{"id": rid, "name": name, "status": st.value, "strategy": strat, "sweep_id": sweep}
            for rid, name, st, strat, sweep in rows]


def run_progress(session: Session, run_id: str) -> dict[str, Any]:
    """Where a run is: status, steps done of planned, heartbeat age, loss so far.

    steps done = the run's recorded steps once it has ended, else the latest
    ``tokens`` sample (cumulative tokens) ÷ tokens per step, with tokens per step
    = micro-batch × grad-accum × dp × seq len; planned steps from its config.
    """
    reap_stale(session)
    run = get_run(session, run_id)
    per_step = (run.micro_batch or 0) * (run.grad_accum or 0) * (run.dp or 0) * (run.seq_len or 0)
    tokens_seen = session.exec(select(func.max(MetricSample.value))
                               .where(MetricSample.run_id == run.id, MetricSample.metric == "tokens")).one()
    planned = ((run.config or {}).get("train") or {}).get("steps")
    if run.steps is not None:
        done = run.steps
    elif tokens_seen and per_step:
        done = int(round(tokens_seen / per_step))
    else:
        done = 0
    now = utcnow()
    hb = run.heartbeat_at.replace(tzinfo=run.heartbeat_at.tzinfo or timezone.utc) if run.heartbeat_at else None
    loss = loss_curve(session, run.id)
    return {"id": run.id, "name": run.name, "status": run.status.value, "active": run.status in ACTIVE,
            "strategy": run.strategy, "world_size": run.world_size, "sweep_id": run.sweep_id,
            "steps_done": done, "steps_planned": planned,
            "heartbeat_age_s": (now - hb).total_seconds() if hb else None,
            "loss": loss, "last_loss": loss[-1]["value"] if loss else run.final_loss,
            "final_loss": run.final_loss, "tokens_per_s": run.tokens_per_s, "error": run.error,
            "exit_code": run.exit_code, "log_path": run.log_path, "cancellable": run.pgid is not None or run.status == RunStatus.queued}
