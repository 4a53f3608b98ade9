"""The ledger's tables (SPEC §3).

Conventions: money is ``Decimal`` (``Money`` column), timestamps are UTC
(``UTCDateTime``), sizes are in base units (bytes), utilizations are ratios
in [0, 1]. Three utilizations are never conflated:

* *time utilization* — share of fleet node-hours spent in runs (computed);
* *GPU-Util* — the NVML/DCGM busy share (``gpu_util_*``; ``util_source`` says
  whether it was NVML, DCGM or, on CPU-only runs, process CPU utilization);
* *MFU* — achieved model FLOPs ÷ peak (``mfu``; null on CPU).
"""

from __future__ import annotations

import enum
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Optional

import trainledger as _root
from sqlalchemy import JSON, BigInteger, Column, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel
from trainledger.store.types import Money, Rate, UTCDateTime, utcnow


class OfferKind(str, enum.Enum):
    rent_elastic = "rent_elastic"
    rent_reserved = "rent_reserved"
    own = "own"


class RunStatus(str, enum.Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    crashed = "crashed"


#: statuses whose cost after the last checkpoint is lost work (SPEC §4; the badput category lost_work)
WASTE_STATUSES = (RunStatus.failed, RunStatus.crashed, RunStatus.cancelled)
#: statuses of a run that has not finished
LIVE_STATUSES = (RunStatus.queued, RunStatus.running)


def _money(**kw: Any) -> Any:
    return Field(default=None, sa_type=Money, **kw)


def _ts(**kw: Any) -> Any:
    return Field(default=None, sa_type=UTCDateTime, **kw)


class NodeType(SQLModel, table=True):
    """A hardware profile: one node of a cluster."""

    __tablename__ = "node_type"

    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=100)
    gpu_model: str = Field(max_length=100)
    gpus_per_node: int
    gpu_memory_gb: float
    peak_bf16_tflops: float  # dense, per GPU
    interconnect: str = Field(default="", max_length=100)
    network: str = Field(default="", max_length=100)
    # Link speeds for the planner's alpha-beta model (data/pricing.toml gives their sources); None: not known
    intra_node_gbytes_per_s: Optional[float] = None  # per GPU, one direction (NVLink / PCIe)
    intra_node_latency_us: Optional[float] = None
    inter_node_gbits_per_s: Optional[float] = None  # per node, all NICs, one direction
    inter_node_latency_us: Optional[float] = None
    source: str = Field(default="preset", max_length=20)  # preset | user
    # added in migration 0009: nominal draw of one node at load, for CO2e when energy was not measured
    nominal_power_kw: Optional[Decimal] = Field(default=None, sa_type=Money)


#: the fields that make up an offer's price; each version in ``offer_price`` carries all of them
PRICE_FIELDS = ("price_per_node_hour", "price_per_node_month", "billing_granularity_hours", "minimum_hours",
                "capex_per_node", "depreciation_months", "residual_value", "power_kw_load", "power_kw_idle",
                "electricity_price_per_kwh", "pue", "operations_per_node_month")
#: the price fields in units of the offer's currency (converted to present money in another one)
CURRENCY_FIELDS = ("price_per_node_hour", "price_per_node_month", "capex_per_node", "residual_value",
                   "electricity_price_per_kwh", "operations_per_node_month")


class OfferPricing(SQLModel):
    """The price fields of an offer (:data:`PRICE_FIELDS`), in the offer's currency."""

    # rent_elastic / rent_reserved
    price_per_node_hour: Optional[Decimal] = _money()
    price_per_node_month: Optional[Decimal] = _money()
    billing_granularity_hours: Optional[Decimal] = _money()
    minimum_hours: Optional[Decimal] = _money()
    # own
    capex_per_node: Optional[Decimal] = _money()
    depreciation_months: Optional[int] = None
    residual_value: Optional[Decimal] = _money()
    power_kw_load: Optional[Decimal] = _money()
    power_kw_idle: Optional[Decimal] = _money()
    electricity_price_per_kwh: Optional[Decimal] = _money()
    pue: Optional[Decimal] = _money()
    operations_per_node_month: Optional[Decimal] = _money()


class Offer(OfferPricing, table=True):
    """How node-hours of a node type are paid for (SPEC §3).

    Its price fields hold its newest price version (``offer_price``): the list price
    used for what-ifs (``cost compare``, the Planner, "cost under every offer").
    Real usage is costed at the version in force when the node-hours were used.
    """

    __tablename__ = "offer"

    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=100)
    node_type_id: int = Field(foreign_key="node_type.id", index=True)
    kind: OfferKind = Field(max_length=20)
    currency: str = Field(default="CNY", max_length=3)
    source: str = Field(default="preset", max_length=20)
    notes: str = Field(default="", max_length=500)


class OfferPrice(OfferPricing, table=True):
    """One version of an offer's prices, in force from ``valid_from`` until the next version's (migration 0009).

    ``version`` counts the versions of an offer in the order they were added; a
    retroactive version can start before a later-numbered one. Usage before an
    offer's first version is costed at the first version.
    """

    __tablename__ = "offer_price"
    __table_args__ = (UniqueConstraint("offer_id", "valid_from", name="uq_offer_price_from"),
                      UniqueConstraint("offer_id", "version", name="uq_offer_price_version"))

    id: Optional[int] = Field(default=None, primary_key=True)
    offer_id: int = Field(foreign_key="offer.id", index=True)
    version: int
    valid_from: datetime = Field(sa_type=UTCDateTime)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    note: str = Field(default="", max_length=500)


class FxRate(SQLModel, table=True):
    """An exchange rate: 1 ``base`` = ``rate`` ``quote``, in force from the start of ``valid_from``
    (a calendar day in the display time zone) until the pair's next rate (migration 0009)."""

    __tablename__ = "fx_rate"
    __table_args__ = (UniqueConstraint("base", "quote", "valid_from", name="uq_fx_rate"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    base: str = Field(max_length=3)
    quote: str = Field(max_length=3)
    valid_from: date
    rate: Decimal = Field(sa_type=Rate)
    source: str = Field(default="", max_length=200)


class CarbonIntensity(SQLModel, table=True):
    """Grid carbon intensity (gCO2e per kWh) of a node type's site, or of every node type without
    its own (``node_type_key`` 0), in force from the start of ``valid_from`` (migration 0009)."""

    __tablename__ = "carbon_intensity"
    __table_args__ = (UniqueConstraint("node_type_key", "valid_from", name="uq_carbon_intensity"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    node_type_key: int = 0  # node type id; 0 = the ledger-wide figure
    valid_from: date
    g_per_kwh: Decimal = Field(sa_type=Rate)
    location: str = Field(default="", max_length=100)  # the site or grid region, e.g. "CN" or "CN-North"
    source: str = Field(default="", max_length=200)


class Fleet(SQLModel, table=True):
    """A cluster held under a fixed-cost offer (``own`` or ``rent_reserved``)."""

    __tablename__ = "fleet"

    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(unique=True, max_length=100)
    offer_id: int = Field(foreign_key="offer.id", index=True)
    node_count: int
    valid_from: date
    valid_to: Optional[date] = None  # exclusive; None = still held
    #: how its idle is charged back: none (NULL) | proportional | even | weights:<project=w,...> (trainledger.money.allocation.idle_share)
    idle_share: Optional[str] = Field(default=None, max_length=1000)


class Project(SQLModel, table=True):
    __tablename__ = "project"

    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True, max_length=100)


class User(SQLModel, table=True):
    __tablename__ = "user_account"  # "user" is reserved in PostgreSQL

    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True, max_length=100)
    role: str = Field(default="viewer", max_length=20)  # viewer | lead


class Setting(SQLModel, table=True):
    """Ledger-wide settings (display time zone, currency, ...)."""

    __tablename__ = "setting"

    key: str = Field(primary_key=True, max_length=100)
    value: str = Field(max_length=1000)


class Run(SQLModel, table=True):
    """One training run, tracked or imported."""

    __tablename__ = "run"
    __table_args__ = (
        Index("ix_run_started_ended", "started_at", "ended_at"),
        Index("ix_run_ended_started", "ended_at", "started_at"),  # runs of a month: count and list (migration 0003)
        Index("ix_run_status_heartbeat", "status", "heartbeat_at"),
    )

    id: str = Field(primary_key=True, max_length=64)
    name: str = Field(default="", max_length=200)
    project_id: Optional[int] = Field(default=None, foreign_key="project.id", index=True)
    user_id: Optional[int] = Field(default=None, foreign_key="user_account.id", index=True)
    launcher: str = Field(default="", max_length=20)  # deepspeed | torchrun | slurm | import | local
    # None (migration 0018): recorded without a node type, so not costed (``trainledger.store.defaults``)
    node_type_id: Optional[int] = Field(default=None, foreign_key="node_type.id", index=True)
    offer_id: Optional[int] = Field(default=None, foreign_key="offer.id", index=True)
    nodes: int
    gpus_per_node: int
    world_size: Optional[int] = None
    # strategy
    strategy: str = Field(default="", max_length=20, index=True)
    dp: Optional[int] = None
    tp: Optional[int] = None
    pp: Optional[int] = None
    zero_stage: Optional[int] = None
    micro_batch: Optional[int] = None
    grad_accum: Optional[int] = None
    # model shape
    model_shape: str = Field(default="", max_length=50)
    params: Optional[int] = Field(default=None, sa_type=BigInteger)
    n_layers: Optional[int] = None
    hidden: Optional[int] = None
    heads: Optional[int] = None
    seq_len: Optional[int] = None
    sweep_id: Optional[str] = Field(default=None, max_length=64, index=True)
    config: Optional[dict] = Field(default=None, sa_column=Column(JSON))
    status: RunStatus = Field(default=RunStatus.queued, max_length=20)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    started_at: Optional[datetime] = _ts()
    ended_at: Optional[datetime] = _ts()
    heartbeat_at: Optional[datetime] = _ts()
    # results
    steps: Optional[int] = None
    tokens: Optional[int] = Field(default=None, sa_type=BigInteger)
    step_time_median_s: Optional[float] = None
    step_time_p95_s: Optional[float] = None
    tokens_per_s: Optional[float] = None
    mfu: Optional[float] = None
    gpu_util_mean: Optional[float] = None
    gpu_util_p95: Optional[float] = None
    util_source: Optional[str] = Field(default=None, max_length=10)  # nvml | dcgm | cpu
    peak_mem_bytes: Optional[int] = Field(default=None, sa_type=BigInteger)
    comm_share: Optional[float] = None
    final_loss: Optional[float] = None
    exit_code: Optional[int] = None
    error: Optional[str] = Field(default=None, max_length=4000)
    pid: Optional[int] = None
    hostname: Optional[str] = Field(default=None, max_length=200)
    # added in migration 0002 (tracked runs)
    pgid: Optional[int] = None  # process group of a launched run (``runs cancel`` signals it)
    log_path: Optional[str] = Field(default=None, max_length=500)
    tokens_per_epoch: Optional[int] = Field(default=None, sa_type=BigInteger)
    mem_kind: Optional[str] = Field(default=None, max_length=30)  # cuda_max_allocated | cpu_max_rss
    # added in migration 0004 (capture: the run wrapper, the Python API, lost work)
    # the run this one continues (a resumed run, a requeued Slurm job's earlier attempt): a chain reads as one job
    resume_of: Optional[str] = Field(default=None, max_length=64, index=True)
    last_checkpoint_at: Optional[datetime] = _ts()
    last_checkpoint_step: Optional[int] = Field(default=None, sa_type=BigInteger)
    last_checkpoint_path: Optional[str] = Field(default=None, max_length=500)
    # lost work (trainledger.money.rates.months.lost_interval): a failed, crashed or cancelled run loses
    # [last checkpoint (else start), end]; kept in step with the row by the rollup's session hook
    lost_from: Optional[datetime] = _ts()
    lost_until: Optional[datetime] = _ts()
    # added in migration 0015 (shared nodes): the part of each node the run held, an exact fraction "N/D"
    # (None: the whole node), and the rule that gave it (gpus | gpu_fraction | mig:PROFILE | billing | exclusive | node)
    share: Optional[str] = Field(default=None, max_length=40)
    share_basis: Optional[str] = Field(default=None, max_length=60)


class SlurmMap(SQLModel, table=True):
    """Which node type (and offer) a Slurm job ran on, by partition, GPU type and node names (migration 0005).

    A rule matches a job when every field it sets matches (empty = any); the
    most specific matching rule wins (``trainledger.sources.imports.slurm.resolve``).
    ``by_node``: the job pays for every node it touches whatever its GPU count
    (exclusive nodes): uneven GPU spreads and jobs without GPUs are costed too.
    """

    __tablename__ = "slurm_map"
    __table_args__ = (UniqueConstraint("cluster", "partition", "gpu_type", "node_pattern", name="uq_slurm_map_rule"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    cluster: str = Field(default="", max_length=64)  # "" = any cluster
    partition: str = Field(default="", max_length=100)
    gpu_type: str = Field(default="", max_length=100)  # the TYPE of gres/gpu:TYPE
    node_pattern: str = Field(default="", max_length=200)  # shell glob over host names, e.g. gpu-a[0-9]*
    node_type_id: int = Field(foreign_key="node_type.id", index=True)
    offer_id: Optional[int] = Field(default=None, foreign_key="offer.id", index=True)
    by_node: bool = False
    # migration 0015: Slurm's billing for the partition (TRESBillingWeights, PriorityFlags=MAX_TRES) and the
    # TRES of one whole node it is divided by; empty weights: the share is GPUs held ÷ GPUs of the node type
    billing_weights: Optional[str] = Field(default=None, max_length=400)
    max_tres: Optional[bool] = None
    node_tres: Optional[str] = Field(default=None, max_length=200)


class RunNode(SQLModel, table=True):
    """Per-node figures of a run."""

    __tablename__ = "run_node"
    __table_args__ = (UniqueConstraint("run_id", "hostname", name="uq_run_node_host"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", index=True, max_length=64)
    hostname: str = Field(max_length=200)
    node_rank: Optional[int] = None
    gpu_util_mean: Optional[float] = None
    gpu_util_p95: Optional[float] = None
    util_source: Optional[str] = Field(default=None, max_length=10)
    mem_peak_bytes: Optional[int] = Field(default=None, sa_type=BigInteger)
    energy_kwh: Optional[float] = None
    nic_rx_bytes_per_s: Optional[float] = None
    nic_tx_bytes_per_s: Optional[float] = None
    step_time_share: Optional[float] = None
    straggler: bool = False
    # added in migration 0004: nodes of `trainledger run` (one wrapper per node)
    status: Optional[str] = Field(default=None, max_length=20)  # running | succeeded | failed | cancelled | crashed
    heartbeat_at: Optional[datetime] = _ts()
    exit_code: Optional[int] = None
    processes: Optional[int] = None  # training processes on the node (torchrun's local world size)


class MetricSample(SQLModel, table=True):
    """A downsampled time-series point."""

    __tablename__ = "metric_sample"
    __table_args__ = (
        UniqueConstraint("run_id", "node", "gpu", "metric", "ts", name="uq_metric_sample"),
    )

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=64)
    node: str = Field(default="", max_length=200)
    gpu: int = -1  # -1: a node- or run-level series
    metric: str = Field(max_length=100)
    ts: datetime = Field(sa_type=UTCDateTime)
    value: Optional[float] = None  # None = missing (never stored as zero)


# --- pre-aggregated monthly rollup (ledger/rollup.py; migration 0003) ------------------

class RollupFacts(SQLModel):
    """The additive facts of a set of run slices (``trainledger.money.facts.rollup.Facts``): integers, an exact
    decimal as text (kWh) and JSON text (billing rule → billed node-hours; GPU-Util source → slices).

    Lost work (migration 0004): ``lost_*`` of runs that ended failed/crashed/cancelled without a
    checkpoint (the whole slice), ``lost_ckpt_*`` of those that checkpointed (the part after it)."""

    slices: int = 0
    node_us: int = Field(default=0, sa_type=BigInteger)
    gpu_us: int = Field(default=0, sa_type=BigInteger)
    tokens: int = Field(default=0, sa_type=BigInteger)
    util_slices: int = 0
    util_us: int = Field(default=0, sa_type=BigInteger)
    util_w: int = Field(default=0, sa_type=BigInteger)
    mfu_us: int = Field(default=0, sa_type=BigInteger)
    mfu_w: int = Field(default=0, sa_type=BigInteger)
    kwh: str = Field(default="0", max_length=60)
    kwh_slices: int = 0
    kwh_node_us: int = Field(default=0, sa_type=BigInteger)
    billed: str = Field(default="{}", max_length=2000)
    util_sources: str = Field(default="{}", max_length=200)
    lost_node_us: int = Field(default=0, sa_type=BigInteger)
    lost_gpu_us: int = Field(default=0, sa_type=BigInteger)
    lost_ckpt_node_us: int = Field(default=0, sa_type=BigInteger)
    lost_ckpt_gpu_us: int = Field(default=0, sa_type=BigInteger)
    lost_billed: str = Field(default="{}", max_length=2000)
    lost_ckpt_billed: str = Field(default="{}", max_length=2000)


class RollupSlice(RollupFacts, table=True):
    """One run's part of one charge period (a calendar month in the display time zone, cut where a
    price, exchange rate or carbon intensity takes effect) and its additive facts."""

    __tablename__ = "rollup_slice"
    __table_args__ = (
        UniqueConstraint("run_id", "month", "charge_from", name="uq_rollup_slice"),
        Index("ix_rollup_slice_scope", "month", "node_type_id", "start_at"),
    )

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=64)  # indexed by uq_rollup_slice
    month: str = Field(max_length=7)
    charge_from: datetime = Field(sa_type=UTCDateTime)  # start of the charge period (migration 0009)
    node_type_id: int
    offer_id: Optional[int] = None  # as recorded on the run (resolved when read)
    project_id: Optional[int] = None
    status: str = Field(max_length=20)
    start_at: datetime = Field(sa_type=UTCDateTime)
    end_at: datetime = Field(sa_type=UTCDateTime)
    nodes: int
    gpus_per_node: int
    split: bool = False
    held: Optional[int] = Field(default=None, sa_type=BigInteger)  # nodes × share in 1/720720 node units (0015)


class RollupMonth(RollupFacts, table=True):
    """The facts of ``rollup_slice`` summed per charge period, node type, recorded offer, project and status."""

    __tablename__ = "rollup_month"
    __table_args__ = (UniqueConstraint("month", "charge_from", "node_type_id", "offer_key", "project_key", "status",
                                       name="uq_rollup_month"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    month: str = Field(max_length=7)
    charge_from: datetime = Field(sa_type=UTCDateTime)  # start of the charge period (migration 0009)
    node_type_id: int
    offer_key: int = 0  # offer id, 0 = none recorded
    project_key: int = 0  # project id, 0 = none
    status: str = Field(max_length=20)


class RollupPeak(SQLModel, table=True):
    """Peak nodes in use at one instant, per month and node type (offer_key −1) and per recorded offer."""

    __tablename__ = "rollup_peak"
    __table_args__ = (UniqueConstraint("month", "node_type_id", "offer_key", name="uq_rollup_peak"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    month: str = Field(max_length=7)
    node_type_id: int
    offer_key: int
    peak: int = 0


class GoodputMonth(SQLModel, table=True):
    """A month's goodput totals as last computed (``trainledger.money.goodput.month_totals``, migration 0021): the
    :class:`~trainledger.money.goodput.goodput_core.MonthAccount`'s exact figures and each project's waste, read
    back only while ``fingerprint`` (a hash of everything the account depends on) still matches the ledger.
    Only months that are over and touched by no live run are stored; a row is a cache, never a source."""

    __tablename__ = "goodput_month"

    month: str = Field(primary_key=True, max_length=7)
    currency: str = Field(primary_key=True, max_length=3)  # the presentation currency asked for; "" = the default
    fingerprint: str = Field(max_length=64)
    digest: str = Field(max_length=64)  # sha256 of fingerprint + payload: a damaged row is recomputed
    payload: str = Field(sa_type=Text)  # JSON: Decimals as exact strings, categories by name
    computed_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class MonthLines(SQLModel, table=True):
    """A month's presented lines as last computed (``trainledger.reports.month_lines_store``, migration 0022): the
    monthly report with every run line and the chargeback statements, as the export and the dashboard present them,
    read back only while ``fingerprint`` (a hash of everything they depend on) still matches the ledger. Only months
    that are over and touched by no live run are stored; a row is a cache, never a source."""

    __tablename__ = "month_lines"

    month: str = Field(primary_key=True, max_length=7)
    currency: str = Field(primary_key=True, max_length=3)  # the presentation currency asked for; "" = the default
    fingerprint: str = Field(max_length=64)
    digest: str = Field(max_length=64)  # sha256 of fingerprint + payload: a damaged row is recomputed
    payload: str = Field(sa_type=Text)  # JSON: the presented values themselves (cent strings, floats, text)
    computed_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class Budget(SQLModel, table=True):
    """A spending limit: the whole team's or one project's, for one month or for every month.

    A one-month budget (``period`` ``YYYY-MM``) replaces the every-month one
    (``period`` ``monthly``) of the same scope in its month. The amount is in
    ``currency``, which must be the offers' (checked when it is set). ``threshold_pct``: at risk
    once spent to date reaches that percent of the amount (NULL: 100, the forecast alone; migration 0017).
    """

    __tablename__ = "budget"
    __table_args__ = (UniqueConstraint("project_key", "period", name="uq_budget"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    project_key: int = 0  # project id, 0 = the whole team
    period: str = Field(max_length=7)  # "monthly" or YYYY-MM
    amount: Decimal = Field(sa_type=Money)
    currency: str = Field(max_length=3)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    threshold_pct: Optional[Decimal] = Field(default=None, sa_type=Money)


# --- dashboard sign-in (app/serving/sessions.py; migration 0007) ------------------------------------------

class DashboardSession(SQLModel, table=True):
    """A signed-in dashboard session: the browser holds a random token in a cookie, the ledger its SHA-256.

    Valid until ``expires_at``, while the user is still in the auth file with the
    same password hash (``password_fp``); signing out deletes the row.
    """

    __tablename__ = "dashboard_session"

    token_hash: str = Field(primary_key=True, max_length=64)  # SHA-256 hex of the cookie's token
    user_name: str = Field(max_length=100, index=True)
    password_fp: str = Field(max_length=64)  # SHA-256 hex of the user's password_hash entry at sign-in
    created_at: datetime = Field(sa_type=UTCDateTime)
    expires_at: datetime = Field(sa_type=UTCDateTime, index=True)
    # where the user signed in (migration 0020): "file" (the users file: role and scope read from it on every
    # page run) or "oidc" (an OpenID provider: the role and project scope mapped from its claims at sign-in)
    source: str = Field(default="file", max_length=10, sa_column_kwargs={"server_default": "file"})
    role: Optional[str] = Field(default=None, max_length=20)  # oidc only: admin | lead | viewer
    projects: Optional[list] = Field(default=None, sa_column=Column(JSON, nullable=True))  # oidc: None = all


class OidcLogin(SQLModel, table=True):
    """A sign-in through the OpenID provider in flight: kept from the redirect until its callback, used once."""

    __tablename__ = "oidc_login"

    state_hash: str = Field(primary_key=True, max_length=64)  # SHA-256 hex of the state sent to the provider
    nonce: str = Field(max_length=200)
    code_verifier: str = Field(max_length=200)  # PKCE (S256)
    next_path: str = Field(max_length=2000)  # where the browser goes after (already checked by safe_next)
    created_at: datetime = Field(sa_type=UTCDateTime)


class AuditLog(SQLModel, table=True):
    """One write to the ledger from the dashboard or the CLI: who, when, from where, what, before and after.

    Append-only: triggers (migration 0020) refuse UPDATE and DELETE on SQLite and PostgreSQL.
    """

    __tablename__ = "audit_log"

    id: Optional[int] = Field(default=None, primary_key=True)
    at: datetime = Field(sa_type=UTCDateTime, index=True)
    actor: str = Field(max_length=200)  # the dashboard user, or the CLI's OS user
    origin: str = Field(max_length=20)  # "dashboard" | "cli"
    client: str = Field(max_length=200)  # the browser's address, or the CLI's host name
    action: str = Field(max_length=80, index=True)  # e.g. "budget.set", "offer.add", "fleet.idle_policy"
    target: str = Field(max_length=300)  # what was changed: a project, an offer, a fleet, a setting
    before: Optional[Any] = Field(default=None, sa_column=Column(JSON, nullable=True))
    after: Optional[Any] = Field(default=None, sa_column=Column(JSON, nullable=True))


# --- the planner's calibration (ledger/runs/calibrate.py; migration 0014) -------------------------

class PlanCalibration(SQLModel, table=True):
    """The planning model's factors fitted to measured runs of one node type (``trainledger plan calibrate``).

    ``device``: ``gpu`` or ``cpu`` (runs that measured CPU memory are CPU trials booked to the node type and
    calibrate its CPU profile, never its GPUs). ``provenance``: the runs used, each run's residuals, the
    ranges they give and which factors the runs could fit.
    """

    __tablename__ = "plan_calibration"

    id: Optional[int] = Field(default=None, primary_key=True)
    node_type_id: int = Field(foreign_key="node_type.id", index=True)
    device: str = Field(default="gpu", max_length=10)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    sweep_id: Optional[str] = Field(default=None, max_length=64)
    n_runs: int = 0
    factors: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    provenance: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class RunPrediction(SQLModel, table=True):
    """What the planner predicted for a run when it was launched: step time, memory per GPU, and their ranges."""

    __tablename__ = "run_prediction"

    run_id: str = Field(primary_key=True, foreign_key="run.id", max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    calibration_id: Optional[int] = Field(default=None, foreign_key="plan_calibration.id")
    step_time_s: Optional[float] = None
    memory_bytes: Optional[float] = None
    detail: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


# --- goodput: per-node phase durations of a run (ledger/sources/record/phases.py; migration 0011) --------------------------

class RunPhase(SQLModel, table=True):
    """How long one node of a run spent in one phase (``startup``, ``data``, ``checkpoint_save``,
    ``checkpoint_restore``, ``eval``, ``step``, ``first_step``, ``straggler_wait``, a custom name), aggregated
    by the run's writer thread: never one row per step. ``seconds``/``count`` are the run's totals so far;
    ``ckpt_seconds``/``ckpt_count`` the totals at its last checkpoint (what an interrupted run kept).
    Rows named ``quality:<issue>`` count clipped bad input (``count``). Written as cumulative totals, so
    replaying a journal sets the same numbers again (``trainledger.money.goodput.account`` reads them)."""

    __tablename__ = "run_phase"
    __table_args__ = (UniqueConstraint("run_id", "node", "phase", name="uq_run_phase"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id", max_length=64)  # indexed by uq_run_phase
    node: str = Field(default="", max_length=200)  # hostname of the node that measured it
    phase: str = Field(max_length=100)
    seconds: float = 0.0
    count: int = 0
    ckpt_seconds: Optional[float] = None  # at the last checkpoint (None: never checkpointed)
    ckpt_count: Optional[int] = None
    first_at: Optional[datetime] = _ts()  # first time the phase began
    last_at: Optional[datetime] = _ts()  # last time it ended


# --- invoices: what providers billed (ledger/sources/imports/invoice_files.py; migration 0019) -------------------

class Invoice(SQLModel, table=True):
    """One imported invoice file of a provider (``trainledger invoice import``), whole or not at all.

    ``number``: the provider's invoice id (FOCUS ``InvoiceId``, the mapped column or ``--invoice-id``; else
    ``PROVIDER/YYYY-MM``). ``digest``: SHA-256 of its normalized lines: the same content imported again is
    recognised, not doubled. A corrected invoice (same provider and number, other lines) is a new row; the
    one it replaces keeps its lines and gets ``replaced_by`` (only invoices with ``replaced_by`` NULL count).
    """

    __tablename__ = "invoice"
    __table_args__ = (UniqueConstraint("provider", "digest", name="uq_invoice_digest"),
                      Index("ix_invoice_number", "provider", "number"))

    id: Optional[int] = Field(default=None, primary_key=True)
    provider: str = Field(max_length=100)
    number: str = Field(max_length=200)
    month: str = Field(max_length=7, index=True)  # the billing period, YYYY-MM (display time zone)
    currency: str = Field(max_length=3)
    fmt: str = Field(max_length=10)  # focus | csv
    source: str = Field(default="", max_length=500)  # the file's name as given
    digest: str = Field(max_length=64)
    lines: int = 0
    billed_cost: Decimal = Field(default=Decimal(0), sa_type=Rate)
    imported_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    replaced_by: Optional[int] = Field(default=None, foreign_key="invoice.id")


class InvoiceLine(SQLModel, table=True):
    """One line of an invoice as billed: money in the invoice's currency, exact (12 decimals kept).

    ``kind``: ``usage`` | ``commitment`` (a reserved term's recurring purchase) | ``info`` (a commitment's
    usage lines at no charge: kept, never reconciled). ``fx_rate``: the provider's rate, 1 ``pricing_currency``
    = ``fx_rate`` of the invoice's currency, when the line states it (FX differences are found only then).
    """

    __tablename__ = "invoice_line"

    id: Optional[int] = Field(default=None, primary_key=True)
    invoice_id: int = Field(foreign_key="invoice.id", index=True)
    line_no: int  # the file's line (CSV) or row (Parquet, from 2)
    kind: str = Field(default="usage", max_length=12)
    period_start: datetime = Field(sa_type=UTCDateTime)
    period_end: datetime = Field(sa_type=UTCDateTime)
    resource: str = Field(default="", max_length=300)
    sku: str = Field(default="", max_length=200)  # FOCUS SkuId (the ledger's own export: the offer's name)
    description: str = Field(default="", max_length=500)
    quantity: Optional[Decimal] = Field(default=None, sa_type=Rate)
    unit: str = Field(default="", max_length=40)
    unit_price: Optional[Decimal] = Field(default=None, sa_type=Rate)
    amount: Decimal = Field(sa_type=Rate)
    pricing_currency: Optional[str] = Field(default=None, max_length=3)
    fx_rate: Optional[Decimal] = Field(default=None, sa_type=Rate)
    #: how far amount may stand from unit price × quantity through the rounding of the three figures as written
    rounding_bound: Decimal = Field(default=Decimal(0), sa_type=Rate)


class InvoiceMap(SQLModel, table=True):
    """Which offer (and node) an invoice's resource stands for (``trainledger invoice map``).

    ``pattern``: a resource id or a shell glob over them (``gpu-node-*``); ``provider`` "" = any provider.
    Of the rules that match a line, an exact pattern wins over a glob, a provider's over any provider's.
    """

    __tablename__ = "invoice_map"
    __table_args__ = (UniqueConstraint("provider", "pattern", name="uq_invoice_map"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    provider: str = Field(default="", max_length=100)
    pattern: str = Field(max_length=300)
    offer_id: int = Field(foreign_key="offer.id", index=True)
    node: str = Field(default="", max_length=200)  # a host name of `run_node`; "" = the offer as a whole


# Last: every program that has the tables also keeps the monthly rollup in step (the rollup's session events).
_root._load_session_hooks()
