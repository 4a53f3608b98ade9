"""``trainledger slurm map add|list|remove`` and ``trainledger slurm sync``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Optional

import typer
from trainledger.cli import progress
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, group, session

app = group("Slurm: map partitions, GPU types and node names to node types; sync jobs from sacct.")
map_app = group("The Slurm mapping: which node type (and offer) a job's partition, GPU type or nodes stand for.")
app.add_typer(map_app, name="map")

PartitionOpt = Annotated[str, typer.Option("--partition", help="Slurm partition (as sacct prints it).")]
GpuTypeOpt = Annotated[str, typer.Option("--gpu-type", help="GPU type: the TYPE of gres/gpu:TYPE=N in AllocTRES (e.g. a100).")]
NodesOpt = Annotated[str, typer.Option("--nodes", help="Shell glob every node of the job must match (e.g. 'gpu-a*').")]
ClusterOpt = Annotated[str, typer.Option("--cluster", help="Only jobs of this cluster (default: any).")]
COLUMNS = [("id", "id"), ("cluster", "cluster"), ("partition", "partition"), ("gpu_type", "GPU type"),
           ("node_pattern", "nodes"), ("node_type", "node type"), ("offer", "offer"), ("by_node", "by node"),
           ("share_rule", "share")]


def _table(rules: list[dict[str, Any]]) -> str:
    if not rules:
        return "no Slurm mapping rules; add one with `trainledger slurm map add --partition P --node-type NAME`"
    rows = [[h for _, h in COLUMNS]] + [[("yes" if r[k] else "") if k == "by_node" else str(r[k] or ("*" if k != "offer" else "-"))
                                        for k, _ in COLUMNS] for r in rules]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths)] + lines[1:] +
                     ["(tried top to bottom: the most specific matching rule wins)"])


@map_app.command("add")
@command
def map_add(node_type: Annotated[str, typer.Option("--node-type", help="Node type the matching jobs ran on.")],
            partition: PartitionOpt = "", gpu_type: GpuTypeOpt = "", nodes: NodesOpt = "", cluster: ClusterOpt = "",
            offer: Annotated[Optional[str], typer.Option(help="Offer they are paid under (default: the fleet, else elastic rent).")] = None,
            by_node: Annotated[bool, typer.Option("--by-node", help="Jobs pay for every node they touch (exclusive nodes): uneven GPU spreads and jobs without GPUs are costed too.")] = False,
            replace: Annotated[bool, typer.Option("--replace", help="Change the rule with the same --partition/--gpu-type/--nodes/--cluster.")] = False,
            billing_weights: Annotated[str, typer.Option("--billing-weights", help="The partition's TRESBillingWeights (e.g. CPU=1.0,Mem=0.25G,GRES/gpu=2.0): a job pays its Slurm billing ÷ a whole node's.")] = "",
            max_tres: Annotated[bool, typer.Option("--max-tres", help="With --billing-weights: PriorityFlags=MAX_TRES (the largest weighted TRES, not the sum).")] = False,
            node_tres: Annotated[str, typer.Option("--node-tres", help="With --billing-weights: the TRES of one whole node (e.g. cpu=64,mem=512G,gres/gpu=8; default: its GPUs).")] = "",
            db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Add a mapping rule: jobs matching every given field are costed as --node-type (and --offer).

    A job pays for its share of each node (share column of `slurm map list`): GPUs held ÷ GPUs of the node type
    by default, the whole node with --by-node, Slurm's billing ÷ a whole node's with --billing-weights."""
    from trainledger.store.mappings.slurm_map import add_rule

    with session(db) as s:
        rule, result = add_rule(s, node_type=node_type, offer=offer, partition=partition, gpu_type=gpu_type,
                                node_pattern=nodes, cluster=cluster, by_node=by_node, replace=replace,
                                billing_weights=billing_weights, max_tres=max_tres, node_tres=node_tres)
    out = {**rule.as_dict(), "result": result}
    emit(out, as_json, lambda d: f"rule {d['id']} {d['result']}: {_describe(d)} → {d['node_type']}"
         + (f" ({d['offer']})" if d["offer"] else "") + f", share by {d['share_rule']}")


def _describe(d: dict[str, Any]) -> str:
    parts = [f"{label} {d[k]}" for k, label in (("cluster", "cluster"), ("partition", "partition"),
                                                ("gpu_type", "GPU type"), ("node_pattern", "nodes")) if d[k]]
    return ", ".join(parts)


@map_app.command("list")
@command
def map_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The mapping rules, in the order they are tried (most specific first)."""
    from trainledger.store.mappings.slurm_map import list_rules

    with session(db) as s:
        rules = list_rules(s)
    emit(rules, as_json, _table)


@map_app.command("remove")
@command
def map_remove(rule_id: Annotated[int, typer.Argument(help="The rule's id (see `trainledger slurm map list`).")],
               db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Remove a mapping rule (runs already imported keep their node type)."""
    from trainledger.store.mappings.slurm_map import remove_rule

    with session(db) as s:
        rule = remove_rule(s, rule_id)
    emit({**rule.as_dict(), "result": "removed"}, as_json, lambda d: f"rule {d['id']} removed: {_describe(d)}")


def _when(text: Optional[str], zone, flag: str) -> Optional[datetime]:
    from trainledger.sources.imports.importer import localize, parse_time

    if not text:
        return None
    return localize(parse_time(text, flag, "time"), zone, "refuse", flag, "time")


@app.command("sync")
@command
def sync(cluster: Annotated[str, typer.Option("--cluster", help="Cluster to read (sacct --clusters); run ids become slurm-CLUSTER-JOBID.")] = "",
         tz: Annotated[Optional[str], typer.Option("--tz", help="Time zone sacct's times are in (passed to sacct as TZ). Default: this process's TZ, else the system zone.")] = None,
         since: Annotated[Optional[str], typer.Option(help="Read from this time (ISO 8601) instead of the last sync's watermark, e.g. to back-fill.")] = None,
         until: Annotated[Optional[str], typer.Option(help="Read up to this time (default: now).")] = None,
         overlap: Annotated[int, typer.Option(help="Minutes re-read before the watermark (slurmdbd may record an end late).", min=0, max=7 * 24 * 60)] = 10,
         dst: Annotated[Optional[str], typer.Option("--dst", help="A local time a DST change skips or repeats: earliest | latest. Default: skip the job and report it.")] = None,
         node_type: Annotated[Optional[str], typer.Option(help="One node type for every job (else the Slurm mapping).")] = None,
         offer: Annotated[Optional[str], typer.Option(help="With --node-type: the offer.")] = None,
         by_node: Annotated[bool, typer.Option("--by-node", help="With --node-type: cost by whole nodes.")] = False,
         strict: Annotated[bool, typer.Option("--strict", help="Write nothing if any job cannot be costed.")] = False,
         sacct: Annotated[Optional[str], typer.Option(help="The sacct program (default: sacct on PATH).")] = None,
         sacct_timeout: Annotated[float, typer.Option("--sacct-timeout", help="Seconds sacct may take; then it and its children are killed and nothing is written.", min=1, max=86400)] = 600.0,
         db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Bring Slurm jobs into the ledger from sacct, from the last sync on (safe to run every few minutes).

    Running jobs appear as running and are finished by a later sync; a second
    sync of the same jobs changes nothing; a job that `trainledger launch` or
    the run wrapper recorded is updated, never counted twice.
    """
    from trainledger.errors import LedgerInputError
    from trainledger.sources.imports.importer import receipt_text, system_timezone
    from trainledger.sources.imports.slurm_sync import sync as run_sync
    from trainledger.store.db import get_engine
    from trainledger.store.settings import parse_timezone

    zone = parse_timezone(tz) if tz else None
    read_zone = zone or system_timezone()
    if dst not in (None, "earliest", "latest"):
        raise LedgerInputError(f"--dst: expected earliest or latest, got {dst!r}")
    with progress.bar("reading sacct", unit="records", min_items=_bar_from(db, cluster, since)) as bar:
        result = run_sync(get_engine(db), cluster=cluster, tz=zone, since=_when(since, read_zone, "--since"),
                          until=_when(until, read_zone, "--until"), overlap=timedelta(minutes=overlap),
                          dst=dst or "report", node_type=node_type, offer=offer, by_node=by_node, strict=strict,
                          sacct=sacct, timeout_s=sacct_timeout,
                          progress=bar.staged({"read": "reading sacct", "write": "writing runs"}, {"write": "runs"}) if bar.drawn else None)

    def text(d: dict[str, Any]) -> str:
        w = d["window"]
        return (f"sacct {w['start']} → {w['end']} (watermark {d['watermark']}; "
                f"{d['rechecked_jobs']} live jobs asked for by id)\n" + receipt_text(d))

    emit(result.as_dict(), as_json, text)


#: records (or runs) from which a routine sync, every few minutes, draws a progress bar
LONG_SYNC = 2000


def _bar_from(db: Optional[str], cluster: str, since: Optional[str]) -> int:
    """``min_items`` of the sync's bar: a first sync or a back-fill (--since) always draws one, a routine one
    only when it reads or writes :data:`LONG_SYNC` or more."""
    if since or not progress.active():
        return 0
    from trainledger.sources.imports.slurm_sync import read_watermark

    with session(db) as s:
        return 0 if read_watermark(s, cluster) is None else LONG_SYNC


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="slurm")
