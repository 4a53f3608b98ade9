"""Our CSV carries a run's share of each node (trainledger.sources.imports.csv_import), as the wrapper and Slurm do.

An 8 × A100 node type rented at 20 per node-hour (1 h granularity): rows with ``gpus_per_node`` 1, 2, 8 and none,
a fractional GPU (``gpu_fraction``, time-slicing), MIG slices (``mig_profile``) and ``exclusive`` each pay the
part of the node they held, on SQLite and PostgreSQL; a replayed GPU-sharing trace pays its share of the GPUs,
not a whole node a row; bad values are one-line errors naming the row and column, nothing written. Every
figure is worked out by hand in its comment.
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction

import pytest
from sqlmodel import Session, func, select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.sources.imports.csv_import import gpu_fraction, row_share
from trainledger.sources.imports.importer import NodeTypeInfo
from trainledger.store.models import Run

A100_OFFER = """[[offer]]
name = "a100-rent"
node_type = "a100-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_hour = "20"
billing_granularity_hours = "1"
"""
HEADER = "id,name,node_type,offer,nodes,gpus_per_node,gpu_fraction,mig_profile,exclusive,start,end,status\n"
A100 = NodeTypeInfo(1, "a100-8x", "NVIDIA A100 80GB SXM", 8)
RTX = NodeTypeInfo(2, "rtx4090-8x", "NVIDIA GeForce RTX 4090 24GB", 8)


def _row(rid: str, nodes: int, gpn: str = "", frac: str = "", mig: str = "", excl: str = "", hours: int = 10,
         node_type: str = "a100-8x") -> str:
    return (f"{rid},{rid},{node_type},a100-rent,{nodes},{gpn},{frac},{mig},{excl},2026-11-02T00:00:00,"
            f"2026-11-02T{hours:02d}:00:00,succeeded\n")


def _setup(cli, tmp_path) -> None:
    offer = tmp_path / "a100.toml"
    offer.write_text(A100_OFFER)
    r = cli("pricing", "import", offer)
    assert r.exit_code == 0, r.output + r.stderr


def _import(cli, tmp_path, rows: str):
    f = tmp_path / "runs.csv"
    f.write_text(HEADER + rows)
    return cli("import", f, "--tz", "UTC", "--json")


def _lines(engine) -> dict:
    with Session(engine) as s:
        return {r.run_id: r for r in monthly_report(s, "2026-11").runs}


def test_every_csv_row_pays_the_share_of_the_node_it_held(cli, engine, tmp_path):
    _setup(cli, tmp_path)
    rows = (_row("g1", 1, "1") + _row("g2", 1, "2") + _row("g8", 1, "8") + _row("whole", 1)
            + _row("two-nodes", 2, "4") + _row("quarter", 1, frac="0.25") + _row("thirds", 1, "2", "1/3", hours=12)
            + _row("mig1", 1, mig="1g.10gb", hours=14) + _row("mig3", 1, "2", mig="3g.40gb", hours=14)
            + _row("excl", 1, "2", excl="true"))
    r = _import(cli, tmp_path, rows)
    assert r.exit_code == 0, r.output + r.stderr
    assert json.loads(r.output)["imported"] == 10
    with Session(engine) as s:
        got = {x.id: (x.gpus_per_node, x.share, x.share_basis) for x in s.exec(select(Run)).all()}
    assert got == {
        "g1": (1, "1/8", "gpus"), "g2": (2, "1/4", "gpus"), "g8": (8, None, "gpus"), "whole": (8, None, None),
        "two-nodes": (4, "1/2", "gpus"),
        "quarter": (1, "1/32", "gpu_fraction"),  # 1 GPU × 1/4 ÷ 8
        "thirds": (2, "1/12", "gpu_fraction"),  # 2 GPUs × 1/3 ÷ 8
        "mig1": (1, "1/56", "mig:1g.10gb"),  # 1/7 of a GPU ÷ 8
        "mig3": (2, "3/28", "mig:3g.40gb"),  # 2 × 3/7 = 6/7 of a GPU ÷ 8 = 6/56
        "excl": (2, None, "exclusive"),
    }
    lines = _lines(engine)
    # (cost, node-hours held, GPU-hours) by hand; a whole node for 10 h = 10 × 20 = 200
    want = {
        "g1": ("25", "1.25", "10"),  # 1/8 × 10 h × 20; 1 GPU × 10 h
        "g2": ("50", "2.5", "20"),  # 1/4 × 200
        "g8": ("200", "10", "80"),
        "whole": ("200", "10", "80"),  # no gpus_per_node: the whole node, as before
        "two-nodes": ("200", "10", "80"),  # 2 nodes × 1/2 × 10 h × 20; 2 × 4 GPUs × 10 h
        "quarter": ("6.25", "0.3125", "2.5"),  # 1/32 × 200; a quarter of a GPU × 10 h
        "thirds": ("20", "1", "8"),  # 1/12 × 12 h × 20; 2/3 of a GPU × 12 h
        "mig1": ("5", "0.25", "2"),  # 1/56 × 14 h × 20 = 280/56; 1/7 GPU × 14 h
        "mig3": ("30", "1.5", "12"),  # 3/28 × 280; 6/7 GPU × 14 h
        "excl": ("200", "10", "20"),  # the whole node; its 2 GPUs × 10 h
    }
    assert {k: (v.cost, v.node_hours, v.gpu_hours) for k, v in lines.items()} == {
        k: tuple(Decimal(x) for x in v) for k, v in want.items()}
    report = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json").output)
    # 25 + 50 + 200 + 200 + 200 + 6.25 + 20 + 5 + 30 + 200
    assert report["summary"]["actual_cost"] == "936.25"
    for rid, hours in (("thirds", ("1", "8")), ("mig1", ("0.25", "2")), ("quarter", ("0.313", "2.5"))):  # 3 decimals
        shown = json.loads(cli("runs", "show", rid, "--json").output)
        assert (Decimal(str(shown["node_hours"])), Decimal(str(shown["gpu_hours"]))) == tuple(map(Decimal, hours))


def test_a_replayed_gpu_sharing_trace_pays_its_share_not_a_node_a_row(cli, engine, tmp_path):
    """Six pods of a GPU-sharing trace (1, 1, 0.5, 0.25, 0.25 and 0.1 of a GPU, 10 h each) on the 8-GPU node
    type: 3.1 GPUs = 3.1/8 node for 10 h at 20 = 77.50 in all. Costed a whole node a row, as the CSV import did
    before shares, it was 6 × 200 = 1,200.00 (15.5 ×)."""
    _setup(cli, tmp_path)
    rows = (_row("p1", 1, "1") + _row("p2", 1, "1") + _row("p3", 1, frac="0.5") + _row("p4", 1, frac="0.25")
            + _row("p5", 1, frac="0.25") + _row("p6", 1, frac="0.1"))
    r = _import(cli, tmp_path, rows)
    assert r.exit_code == 0, r.output + r.stderr
    lines = _lines(engine)
    # 25, 25, 12.5, 6.25, 6.25, 2.5 (0.1/8 × 200)
    assert {k: v.cost for k, v in lines.items()} == {
        "p1": Decimal(25), "p2": Decimal(25), "p3": Decimal("12.5"), "p4": Decimal("6.25"), "p5": Decimal("6.25"),
        "p6": Decimal("2.5")}
    assert sum(v.cost for v in lines.values()) == Decimal("77.5")
    assert sum(v.gpu_hours for v in lines.values()) == Decimal(31)  # 3.1 GPUs × 10 h
    with Session(engine) as s:
        nt = next(n for n in monthly_report(s, "2026-11").node_types if n.node_type == "a100-8x")
    assert (nt.node_hours, nt.gpu_hours, nt.peak_nodes) == (Decimal("3.875"), Decimal(31), 1)  # 3.1/8 × 10 h; one node


BAD = [  # (row, the error after "runs.csv:2: ")
    (_row("a", 1, frac="0"), "gpu_fraction: the share of each GPU must be above 0 and at most 1 (e.g. 0.25 or 1/3), "
                             "got '0'; leave it empty for whole GPUs"),
    (_row("a", 1, frac="1.5"), "gpu_fraction: the share of each GPU must be above 0 and at most 1 (e.g. 0.25 or 1/3), "
                               "got '1.5'; leave it empty for whole GPUs"),
    (_row("a", 1, frac="-0.5"), "gpu_fraction: the share of each GPU must be above 0 and at most 1 (e.g. 0.25 or "
                                "1/3), got '-0.5'; leave it empty for whole GPUs"),
    (_row("a", 1, frac="nan"), "gpu_fraction: the share of each GPU must be above 0 and at most 1 (e.g. 0.25 or "
                               "1/3), got 'nan'; leave it empty for whole GPUs"),
    (_row("a", 1, frac="1/0"), "gpu_fraction: the share of each GPU must be above 0 and at most 1 (e.g. 0.25 or "
                               "1/3), got '1/0'; leave it empty for whole GPUs"),
    (_row("a", 1, frac="0.0000001"), "gpu_fraction: '0.0000001' is finer than 6 decimals (or N/D with D up to "
                                     "1,000,000); round it"),
    (_row("a", 1, frac="0.5", mig="1g.10gb"), "gpu_fraction: a row holds a fraction of each GPU or MIG slices "
                                              "(1g.10gb), not both; clear gpu_fraction or mig_profile"),
    (_row("a", 1, frac="0.5", excl="yes"), "gpu_fraction: an exclusive row held the whole node, not a part of a GPU; "
                                           "clear gpu_fraction or exclusive"),
    (_row("a", 1, mig="1g.10gb", excl="1"), "mig_profile: an exclusive row held the whole node, not a part of a GPU; "
                                            "clear mig_profile or exclusive"),
    (_row("a", 1, excl="maybe"), "exclusive: expected true or false (yes/no, 1/0), got 'maybe'"),
    (_row("a", 1, mig="2g.99gb"), "mig_profile: '2g.99gb' is not a MIG profile of NVIDIA A100 80GB SXM; use one of "
                                  "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),
    (_row("a", 1, mig="1g.10gb", node_type="rtx4090-8x"),
     "mig_profile: node type rtx4090-8x (NVIDIA GeForce RTX 4090 24GB) has no MIG profiles in the catalog; MIG is "
     "known for A100 and H100 node types"),
    (_row("a", 1, "9"), "gpus_per_node: 9 exceeds the 8 GPUs of node type a100-8x; fix the row or pass another "
                        "--node-type"),
    (_row("a", 1, "57", mig="1g.10gb"), "gpus_per_node: 57 exceeds the 8 GPUs of node type a100-8x (MIG slices: 7 a "
                                        "GPU at most); fix the row or pass another --node-type"),
    (_row("a", 1, "9", mig="7g.80gb"), "mig_profile: 9 GPUs exceed the 8 of node type a100-8x (a share above 1)"),
    (_row("a", 1, "9", frac="0.5"), "gpus_per_node: 9 exceeds the 8 GPUs of node type a100-8x; fix the row or pass "
                                    "another --node-type"),
]


@pytest.mark.parametrize("row, error", BAD, ids=[e.split(":")[0] + f"-{i}" for i, (_, e) in enumerate(BAD)])
def test_bad_share_columns_are_one_line_errors_and_write_nothing(cli, engine, tmp_path, row, error):
    _setup(cli, tmp_path)
    r = _import(cli, tmp_path, _row("fine", 1, "2") + row.replace("2026-11-02T00", "2026-11-03T00"))
    assert r.exit_code == 2 and r.stderr == f"error: runs.csv:3: {error}\n", r.stderr
    with Session(engine) as s:
        assert s.exec(select(func.count()).select_from(Run)).one() == 0


def test_row_share_by_hand():
    """The share of a row without a ledger: whole GPUs, fractions, MIG slices, exclusive, a CPU node type."""
    assert row_share({}, A100, "x") == (8, None, None)  # nothing said: the whole node
    assert row_share({"gpus_per_node": "8"}, A100, "x") == (8, None, "gpus")
    assert row_share({"gpus_per_node": "3"}, A100, "x") == (3, "3/8", "gpus")
    assert row_share({"gpu_fraction": "1"}, A100, "x") == (1, "1/8", "gpus")  # a whole GPU: GPUs held
    assert row_share({"gpu_fraction": ".5", "gpus_per_node": "8"}, A100, "x") == (8, "1/2", "gpu_fraction")
    assert row_share({"mig_profile": "7g.80gb", "gpus_per_node": "8"}, A100, "x") == (8, None, "mig:7g.80gb")  # 8/8
    assert row_share({"mig_profile": "1g.10gb", "gpus_per_node": "56"}, A100, "x") == (56, None, "mig:1g.10gb")
    assert row_share({"exclusive": "TRUE", "gpus_per_node": "1"}, A100, "x") == (1, None, "exclusive")
    assert row_share({"exclusive": "no", "gpus_per_node": "4"}, A100, "x") == (4, "1/2", "gpus")
    cpu = NodeTypeInfo(3, "cpu-64", "", 0)
    assert row_share({}, cpu, "x") == (0, None, None)
    with pytest.raises(LedgerInputError, match=r"^x: gpu_fraction: node type cpu-64 has no GPUs; clear gpu_fraction"):
        row_share({"gpu_fraction": "0.5"}, cpu, "x")
    with pytest.raises(LedgerInputError, match=r"^x: mig_profile: node type rtx4090-8x .* has no MIG profiles"):
        row_share({"mig_profile": "1g.10gb"}, RTX, "x")
    assert gpu_fraction("1/3", "x") == Fraction(1, 3) and gpu_fraction("0.125", "x") == Fraction(1, 8)
    assert gpu_fraction("", "x") is None and gpu_fraction("1.", "x") == 1
    for bad in ("1e-2", "0x1", "½", "1/00", "0.5_0", "inf", "1/3/4", "9" * 41):
        with pytest.raises(LedgerInputError, match=r"^x: gpu_fraction: "):
            gpu_fraction(bad, "x")
