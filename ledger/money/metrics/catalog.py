"""Every figure a user sees, defined once (issue 36; SPEC §13). docs/METRICS.md is generated from this list
(``trainledger glossary``) and a test fails when they differ.

One account of spend: **spend = goodput + badput + idle**, per run, project, fleet and month. Badput is the
goodput account's categories other than ``productive`` (:class:`trainledger.money.goodput.goodput_core.Category`:
the one list of categories; failed runs and lost work among them, as ``lost_work``).
"""

from __future__ import annotations

from trainledger.money.metrics.definitions import Metric

ROLLUP = "month facts (`rollup_slice`: node-µs, shares, billed hours, tokens per run and charge period)"
OFFERS = "offer versions in force (`offer_price`), fleets (`fleet`), exchange rates (`fx_rate`)"
PHASES = "the run's time account (`run_phase` rows: phase totals, totals at the last checkpoint)"
CLOSE = "docs/MONEY.md"

SPEND = (
    Metric("spend", "Spend", "money",
           "Σ run costs + idle, each charge period at the prices and exchange rate in force during it; = goodput + "
           "badput + idle",
           f"{ROLLUP}; {OFFERS}", source="OpenCost allocation: allocated + idle = total cost",
           aliases=("actual_cost",)),
    Metric("run_cost", "Run cost", "money",
           "elastic rent: nodes × share × billed hours × hourly rate; a fixed-cost fleet: the fleet's cost of the "
           "charge period × the run's node-hours ÷ the fleet's capacity node-hours (busy energy at the run's own "
           "power); each charge period at its prices",
           f"{ROLLUP}; {OFFERS}", finality="run", aliases=("cost", "total_cost")),
    Metric("project_cost", "Project cost", "money", "Σ its runs' costs in the period (before any share of idle)",
           f"{ROLLUP}; {OFFERS}", aliases=("cost_by_project",)),
    Metric("idle_cost", "Idle cost", "money",
           "a fixed-cost fleet's cost of the period − Σ the costs of the runs that drew on it (never below 0): the "
           "capacity no run used (recovery gaps included); elastic rent has no idle (it is not billed)",
           f"{ROLLUP}; {OFFERS}", source="OpenCost: idle = total − allocated"),
    Metric("account_idle_cost", "Idle less recovery", "money",
           "idle cost − recovery: capacity no run used and no interrupted chain held; the third part of the account "
           "(spend = goodput + badput + this) and the reason `idle` of `waste_by_reason`",
           f"{ROLLUP}; {OFFERS}; runs' `resume_of`", group="goodput"),
    Metric("goodput_cost", "Goodput", "money",
           "the cost of the `productive` category: steps whose progress was kept",
           f"{ROLLUP}; {OFFERS}; {PHASES}", source="ml-goodput-measurement: goodput",
           group="goodput"),
    Metric("badput_cost", "Badput", "money",
           "Σ the costs of every category other than `productive` (start-up, data wait, checkpoints, eval, lost "
           "work, recovery, straggler wait, unattributed); = run costs − goodput",
           f"{ROLLUP}; {OFFERS}; {PHASES}", source="ml-goodput-measurement: BadputType", group="goodput"),
    Metric("lost_work_cost", "Lost work", "money",
           "the badput category `lost_work`: the cost of a failed, crashed or cancelled run after its last "
           "checkpoint (its whole cost when it never checkpointed), each charge period at its prices",
           f"{ROLLUP}; {OFFERS}", group="goodput"),
    Metric("failed_run_cost", "Failed runs", "money",
           "the whole cost of the runs that ended failed, crashed or cancelled (checkpointed work included)",
           f"{ROLLUP}; {OFFERS}"),
    Metric("waste_cost", "Waste", "money",
           "badput + idle (= spend − goodput): by reason (`waste_by_reason`) each badput category's cost, then "
           "idle; a run's or a project's waste is its badput, and \"most wasted\" ranks by it",
           f"{ROLLUP}; {OFFERS}; {PHASES}"),
    Metric("recovery_cost", "Recovery", "money",
           "the badput category `recovery`: the gap between an interrupted run and the run that resumes it × its "
           "nodes, on an owned or reserved fleet at the fleet's idle rate (taken out of idle); elastic: not paid",
           f"{ROLLUP}; {OFFERS}; runs' `resume_of`", group="goodput"),
    Metric("goodput_pct", "Goodput %", "pct", "goodput ÷ the cost it is part of × 100: of a month, its spend "
           "(idle included); of a run or a project, its runs' cost (recovery included)",
           f"{ROLLUP}; {OFFERS}; {PHASES}", group="goodput"),
    Metric("ettr", "ETTR", "ratio",
           "effective training time ratio: productive node-time ÷ the wall node-time of its runs' chains (interrupted "
           "runs and their resumes, recovery gaps included)", PHASES,
           source="ETTR as in Meta's 'Revisiting Reliability in Large-Scale Machine Learning Research Clusters' (2024)",
           group="goodput"),
    Metric("identity_residual", "Identity residual", "exact",
           "(the report's idle − recovery) − the account's idle: what the report's own line rounding leaves (~1e-20)",
           ROLLUP, group="goodput"),
    Metric("fixed_cost", "Fixed-cost fleets (day)", "money",
           "the day's share of the fixed-cost fleets' months: each fleet's cost per node-month ÷ the month's hours × "
           "its capacity node-hours in the day", OFFERS),
    Metric("elastic_rent_cost", "Elastic rent", "money",
           "what the runs on elastic offers were billed in the period: nodes × share × billed hours × the hourly "
           "rate in force (the daily report: spend = fixed-cost fleets + elastic rent)", f"{ROLLUP}; {OFFERS}"),
)

ALTERNATIVES = (
    Metric("elastic_cost", "If rented elastic", "money",
           "the period costed as if every run were rented elastic: nodes × share × billed hours × the hourly rate "
           "of the node type's elastic offer (its list price); only used node-hours, no idle",
           f"{ROLLUP}; {OFFERS}", finality="list", group="alternatives"),
    Metric("own_cost", "If owned", "money",
           "the month as if the node types' runs were drawn from owned fleets sized by peak use, each charge period "
           "at its prices (idle included)", f"{ROLLUP}; {OFFERS}", finality="list", group="alternatives"),
    Metric("reserved_cost", "If rented reserved", "money",
           "the month as if reserved: reserved nodes (peak use) × monthly price", f"{ROLLUP}; {OFFERS}",
           finality="list", group="alternatives"),
    Metric("alternative_cost", "Alternative's cost", "money",
           "the cost under the option the month was not mostly paid under (own ↔ rent elastic)", f"{ROLLUP}; {OFFERS}",
           finality="list", group="alternatives"),
    Metric("savings_vs_alternative", "Savings vs the alternative", "money", "alternative − spend",
           f"{ROLLUP}; {OFFERS}", finality="list", aliases=("savings",), group="alternatives"),
    Metric("roi", "ROI", "ratio", "(alternative − spend) ÷ spend", f"{ROLLUP}; {OFFERS}", finality="list",
           group="alternatives"),
    Metric("cost_if_elastic", "Run cost if rented elastic", "money",
           "the run's nodes × share × billed hours × the hourly rate of its node type's elastic offer (list price)",
           f"{ROLLUP}; {OFFERS}", finality="list", group="alternatives"),
    Metric("cost_if_own", "Run cost if owned", "money",
           "the run's node-hours × the owned offer's full-use rate per node-hour (capex + energy + ops, 730 h month)",
           f"{ROLLUP}; {OFFERS}", finality="list", group="alternatives"),
    Metric("cost_per_1m_tokens", "Cost per 1M tokens", "unit_price", "spend ÷ tokens × 1,000,000 (runs with tokens)",
           f"{ROLLUP}; {OFFERS}"),
    Metric("tokens_per_1000", "Tokens per 1,000 spent", "per_money", "tokens ÷ spend × 1,000", ROLLUP),
    Metric("useful_gpu_hours_per_1000", "Useful GPU-hours per 1,000 spent", "per_money",
           "GPU-hours × GPU-Util ÷ spend × 1,000 (runs with a measured GPU-Util)", ROLLUP),
)

USAGE = (
    Metric("node_hours", "Node-hours", "hours",
           "Σ runs' nodes × share × hours (a share: GPUs held ÷ the node type's GPUs, a MIG slice, Slurm's billing)",
           ROLLUP, group="usage"),
    Metric("gpu_hours", "GPU-hours", "hours", "Σ runs' GPUs held × hours (a MIG run: its slices ÷ 7 × hours; a fractional GPU, time-slicing: its "
           "fraction × hours)", ROLLUP,
           group="usage"),
    Metric("capacity_node_hours", "Capacity (node-hours)", "hours",
           "Σ fixed-cost fleets' nodes × hours of the period they were held", f"{ROLLUP}; fleets",
           aliases=("available_node_hours",), group="usage"),
    Metric("time_utilization", "Time utilization", "ratio",
           "node-hours runs drew from fixed-cost fleets ÷ those fleets' capacity node-hours (not GPU-Util, not MFU)",
           f"{ROLLUP}; fleets", group="usage"),
    Metric("gpu_util_mean", "GPU-Util (NVML/DCGM busy share)", "ratio",
           "mean share of time the GPUs were busy (NVML / DCGM_FI_DEV_GPU_UTIL), weighted by measured GPU-hours "
           "(not MFU, not time utilization)", "runs' measured GPU-Util (`run.gpu_util_mean`, `run_node`)",
           finality="measured", group="usage"),
    Metric("gpu_util_coverage", "GPU-Util coverage (share of GPU-hours)", "ratio", "measured GPU-hours ÷ GPU-hours", ROLLUP,
           finality="measured", group="usage"),
    Metric("mfu_mean", "MFU", "ratio",
           "model FLOPs per second achieved ÷ the GPUs' peak dense FLOPs, weighted by GPU-hours; null on CPU",
           "runs' MFU (the trainer's FLOPs per step and step times)", finality="measured", aliases=("mfu",),
           source="PaLM (Chowdhery et al. 2022), appendix B", group="usage"),
    Metric("used_node_hours", "Used node-hours", "hours",
           "node-hours runs drew from fixed-cost fleets (the numerator of time utilization)", ROLLUP,
           aliases=("fleet_used_node_hours",), group="usage"),
    Metric("elastic_node_hours", "Elastic node-hours", "hours",
           "node-hours of runs on elastic rent: reported apart, never in time utilization", ROLLUP, group="usage"),
    Metric("idle_node_hours", "Idle node-hours", "hours", "capacity node-hours − used node-hours", ROLLUP,
           group="usage"),
    Metric("lost_gpu_hours", "Lost GPU-hours", "hours",
           "GPU-hours of a failed, crashed or cancelled run after its last checkpoint (all of them without one)",
           ROLLUP, group="usage"),
    Metric("peak_nodes", "Peak nodes", "count",
           "the most nodes in use at once (shares added: two 4-GPU runs on one 8-GPU node are one node; a node "
           "partly held counts whole)", "month facts (`rollup_slice.held`, node units of 1/720720)",
           group="usage"),
    Metric("tokens", "Tokens", "count", "Σ runs' tokens (split across months by time share)", ROLLUP, group="usage"),
    Metric("runs", "Runs", "count", "distinct runs (a run cut at a price change still counts once)", ROLLUP,
           group="usage"),
)

ENERGY = (
    Metric("energy_kwh", "Energy", "kwh",
           "measured energy where `trainledger collect` stored it for every node of a run, else the node type's "
           "nominal power at load × node-hours", "`run_node.energy_kwh`; node types' nominal power",
           finality="measured", group="energy"),
    Metric("energy_measured_kwh", "Energy measured", "kwh", "the part of energy measured by `trainledger collect`",
           "`run_node.energy_kwh`", finality="measured", aliases=("measured_energy_kwh",), group="energy"),
    Metric("energy_estimated_kwh", "Energy estimated", "kwh",
           "the part of energy estimated from the node type's nominal power at load × node-hours",
           "node types' nominal power", group="energy"),
    Metric("co2e_kg", "CO2e", "kg", "energy (kWh) × grid intensity (gCO2e/kWh) ÷ 1,000",
           "energy; carbon intensities (`carbon_intensity`)", finality="measured", group="energy"),
)

OUTLOOK = (
    Metric("forecast", "Forecast", "money",
           "spend to date + the rest of the month from the recent daily run rate and the fixed-cost fleets' "
           "remaining hours (docs/FORECAST.md); printed per figure as its facets `to_date` (the monthly report's "
           "figure at now), `expected`, `p10` and `p90`", f"{ROLLUP}; {OFFERS}", finality="forecast",
           group="outlook"),
    Metric("budget", "Budget", "money", "the amount set for the month (team or project), in its own currency, "
           "converted at the rate in force at now when shown in another", "budgets", finality="setting",
           aliases=("budget_amount",), group="outlook"),
)

INVOICE_LINES = "imported invoices (`invoice`, `invoice_line`: the newest of each), the invoice mapping (`invoice_map`)"

INVOICES = (
    Metric("expected_cost", "Expected (ledger)", "money",
           "what the ledger expects a provider to bill: each elastic run's billed node-hours × the hourly rate in force "
           "(after the offer's granularity and minimum), each reserved term's nodes × monthly price, per charge period, "
           "in the invoice's currency at the ledger's rate (docs/INVOICES.md)", f"{ROLLUP}; {OFFERS}",
           group="invoices"),
    Metric("billed_cost", "Billed (invoice)", "money",
           "Σ FOCUS BilledCost: of a month's invoices, the amounts of their lines as the provider billed them, in "
           "the invoice's currency (a corrected invoice replaces the one it corrects); of the ledger's own FOCUS "
           "export (`report focus`), what its rows bill (= spend)", INVOICE_LINES, finality="setting",
           group="invoices"),
    Metric("invoice_difference", "Difference (billed − expected)", "money",
           "billed − expected, per offer, charge period and resource, split into classes that add up to it exactly: "
           "rate, billed hours without runs, runs without billed hours, minimum billing or granularity, FX, rounding, "
           "unmatched lines (docs/INVOICES.md); it counts when above the tolerance (0.01 per invoice line)",
           f"{INVOICE_LINES}; {ROLLUP}; {OFFERS}", aliases=("difference", "differences_total", "difference_by_class"),
           group="invoices"),
    Metric("invoice_unattributed", "Billed, no offer", "money",
           "under --cost-basis billed: what a reconciled month's invoices billed on lines matched to no offer (within "
           "the tolerance), so the node types' billed lines and it add up to the billed spend",
           INVOICE_LINES, finality="setting", group="invoices"),
    Metric("expected_node_hours", "Expected node-hours", "hours",
           "the billed node-hours the ledger expects: each elastic run's node-hours after the offer's granularity "
           "and minimum; a reserved term's capacity node-hours", ROLLUP, group="invoices"),
)

METRICS: tuple[Metric, ...] = SPEND + ALTERNATIVES + USAGE + ENERGY + OUTLOOK + INVOICES

#: the goodput account's categories (the keys under ``cost`` and ``node_hours`` of `trainledger goodput --json`;
#: :class:`trainledger.money.goodput.goodput_core.Category` is the one enum, a test keeps the two lists equal):
#: what each buys, and the reference's ``BadputType`` where it has one (docs/GOODPUT.md)
CATEGORIES: tuple[tuple[str, str, str], ...] = (
    ("productive", "steps whose progress was kept (data and straggler waits inside a step taken out)",
     "GoodputType.TOTAL"),
    ("startup", "process start / allocation → the first step (restore, data and eval phases taken out)",
     "TPU_INITIALIZATION + TRAINING_PREP + PROGRAM_STARTUP"),
    ("data_wait", "a step waiting for its batch", "DATA_LOADING_SYNC"),
    ("checkpoint_save", "blocking checkpoint saves", "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"),
    ("checkpoint_restore", "loading a checkpoint", "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"),
    ("eval", "evaluation", 'CUSTOM_BADPUT_EVENTS["EVAL"]'),
    ("lost_work", "a failed, crashed or cancelled run after its last checkpoint (all of it without one)",
     "WASTED_PROGRESS_FROM_DISRUPTION"),
    ("recovery", "held capacity between an interruption and the resumed run of the same chain",
     "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"),
    ("straggler_wait", "other ranks waiting for the slowest one (per-rank step times)",
     'CUSTOM_BADPUT_EVENTS["STRAGGLER_WAIT"]'),
    ("unattributed", "everything no phase explains (a run seen only by the wrapper or a Slurm import is all "
     "unattributed, never guessed)", "OTHER"),
)

#: facets: keys under a figure (its parts or its forecast), named here once; `X_pct` beside a figure `X` of a
#: period is its change against the period before, in percent to one decimal
FACETS: dict[str, str] = {
    "to_date": "a forecast's facet: the figure of the monthly report at now",
    "expected": "a forecast's facet: the expected figure at the month's end",
    "p10": "a forecast's facet: the low end of its range (10th percentile)",
    "p90": "a forecast's facet: the high end of its range (90th percentile)",
    **{k: f"a goodput category (under `cost` or `node_hours`{'' if k == 'productive' else '; a reason of `waste_by_reason`'}): {what}"
       for k, what, _ in CATEGORIES},
    "idle": "a reason of `waste_by_reason` (after the badput categories, each a reason): the fleets' idle less "
            "recovery (`account_idle_cost`)",
    "rounding": "the rounding line: what lines, each rounded on its own, leave against the total they make up "
                "(`(rounding)` as a table's line)",
}
