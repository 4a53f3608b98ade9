"""`trainledger launch --nodes N` with torchrun, one launch per node: rank and master from the hostfile."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.runs.launch import ENV_MEMBER, MASTER_PORT, LaunchRequest, node_of_several, prepare, settle_member
from trainledger.store.models import Run, RunStatus

CONFIG = Path(__file__).resolve().parents[1] / "trainer" / "configs" / "dp.yaml"


def _hostfile(tmp_path: Path, *names: str) -> Path:
    f = tmp_path / "hostfile"
    f.write_text("".join(f"{n} slots=1\n" for n in names), encoding="utf-8")
    return f


def test_rank_and_master_come_from_the_hostfile(tmp_path):
    me = socket.gethostname()
    req = LaunchRequest(CONFIG, nodes=2, hostfile=_hostfile(tmp_path, "head-0", me), run_id="r-1")
    node_of_several(req)
    assert (req.node_rank, req.master_addr, req.master_port) == (1, "head-0", MASTER_PORT)
    given = LaunchRequest(CONFIG, nodes=2, node_rank=0, master_addr="10.0.0.1", master_port=1234, run_id="r-1")
    node_of_several(given)
    assert (given.node_rank, given.master_addr, given.master_port) == (0, "10.0.0.1", 1234)


@pytest.mark.parametrize("kw, message", [
    ({}, "--run-id: a 2-node torchrun launch"),
    ({"run_id": "r-1"}, "--node-rank: pass this node's rank"),
    ({"run_id": "r-1", "node_rank": 2, "master_addr": "h"}, "--node-rank: 2 is not a node of a 2-node run"),
    ({"run_id": "r-1", "node_rank": 1}, "--master-addr: pass the address of node 0"),
    ({"run_id": "bad id!", "node_rank": 1}, "--run-id"),
])
def test_what_a_node_must_be_told(kw, message):
    with pytest.raises(LedgerInputError, match=message.replace("(", r"\(")):
        node_of_several(LaunchRequest(CONFIG, nodes=2, **kw))


def test_a_host_not_in_the_hostfile_is_told_to_say_its_rank(tmp_path):
    req = LaunchRequest(CONFIG, nodes=2, hostfile=_hostfile(tmp_path, "head-0", "head-1"), run_id="r-1")
    with pytest.raises(LedgerInputError, match=r"this host \(.*\) is not in the hostfile"):
        node_of_several(req)


def test_node_0_registers_the_run_and_the_others_only_start_their_torchrun(session, tmp_path):
    hostfile = _hostfile(tmp_path, "head-0", "head-1")
    url = "sqlite:///unused"
    p0 = prepare(session, LaunchRequest(CONFIG, nodes=2, hostfile=hostfile, node_rank=0, run_id="r-2"), url)
    p1 = prepare(session, LaunchRequest(CONFIG, nodes=2, hostfile=hostfile, node_rank=1, run_id="r-2"), url)
    runs = session.exec(select(Run)).all()
    assert [(r.id, r.nodes, r.gpus_per_node, r.world_size) for r in runs] == [("r-2", 2, 1, 2)]  # slots=1
    for rank, p in ((0, p0), (1, p1)):
        i = p.command.index("--nnodes")
        assert p.command[i:i + 8] == ["--nnodes", "2", "--node-rank", str(rank), "--master-addr", "head-0",
                                      "--master-port", str(MASTER_PORT)]
    assert ENV_MEMBER not in p0.env and p1.env[ENV_MEMBER] == "1"
    assert p1.log_path.name == "r-2.node1.log" and p0.log_path.name == "r-2.log"
    with pytest.raises(LedgerInputError, match="--run-id: run r-2 already exists"):
        prepare(session, LaunchRequest(CONFIG, nodes=2, hostfile=hostfile, node_rank=0, run_id="r-2"), url)
    with pytest.raises(LedgerInputError, match="only for --launcher torchrun with --nodes > 1"):
        prepare(session, LaunchRequest(CONFIG, nodes=1, node_rank=1), url)


def test_one_node_lets_torchrun_bind_its_own_port(session):
    """One node: ``--standalone`` on 127.0.0.1, no port picked here, so concurrent launches cannot collide (one of
    tests/faults' eight concurrent launches once lost its port to another between the pick and torchrun's bind)."""
    p = prepare(session, LaunchRequest(CONFIG, gpus_per_node=2), "sqlite:///unused")
    i = p.command.index("--standalone")
    assert p.command[i:i + 7] == ["--standalone", "--nnodes", "1", "--local-addr", "127.0.0.1",
                                  "--nproc-per-node", "2"]
    assert "--master-port" not in p.command and "--master-addr" not in p.command


def _running(url: str, beat_ago: timedelta) -> None:
    from trainledger.store.db import make_engine
    from trainledger.store.models import RunNode

    from tests.helpers import add_run

    engine = make_engine(url)
    with Session(engine) as s:
        now = datetime.now(timezone.utc)
        run = add_run(s, "r-3", now - timedelta(hours=1), 1, status=RunStatus.running)
        run.ended_at, run.heartbeat_at = None, now - beat_ago
        s.add(RunNode(run_id="r-3", hostname="head-0", node_rank=0, status="running"))
        s.add(RunNode(run_id="r-3", hostname=socket.gethostname(), node_rank=1, status="crashed"))
        s.commit()
    engine.dispose()


def _state(url: str):
    from trainledger.store.db import make_engine
    from trainledger.store.models import RunNode

    engine = make_engine(url)
    with Session(engine) as s:
        run = s.get(Run, "r-3")
        nodes = [(n.hostname, n.status, n.exit_code) for n in s.exec(select(RunNode).order_by(RunNode.node_rank)).all()]
        out = (run.status, run.ended_at == run.heartbeat_at, run.error, nodes)
    engine.dispose()
    return out


def test_a_surviving_node_records_its_end_and_leaves_the_run_to_node_0(sqlite_url):
    """Node 1 exits 1 while node 0's heartbeat is fresh: it records its own node (failed, even over the
    crashed node 0's settle gave it) and leaves the run running for node 0 to end."""
    _running(sqlite_url, timedelta(seconds=1))
    settle_member("r-3", sqlite_url, 1, 1, wait_s=0, stale_s=3600)
    status, _, error, nodes = _state(sqlite_url)
    assert (status, error) == (RunStatus.running, None)
    assert nodes == [("head-0", "running", None), (socket.gethostname(), "failed", 1)]


def test_when_node_0_is_gone_too_the_surviving_node_ends_the_run_crashed(sqlite_url):
    _running(sqlite_url, timedelta(hours=1))
    settle_member("r-3", sqlite_url, 1, 1, wait_s=0, stale_s=60)
    status, at_beat, error, nodes = _state(sqlite_url)
    assert status == RunStatus.crashed and at_beat
    assert error.startswith(f"node 1 ({socket.gethostname()}): the launcher exited with 1 and node 0 stopped heartbeating")
    assert nodes == [("head-0", "crashed", None), (socket.gethostname(), "failed", 1)]
