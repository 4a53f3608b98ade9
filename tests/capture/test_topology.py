"""What ``trainledger run`` learns from its flags, its environment and the command it wraps."""

from __future__ import annotations

import pytest
from trainledger.errors import LedgerInputError
from trainledger.sources.capture.wrapper import default_name, local_processes, redact_command
from trainledger.sources.telemetry.sampling import owned_gpus
from trainledger.sources.telemetry.topology import Flags, parse_command, resolve
from trainledger.store.ids import slurm_attempt_id, slurm_run_id

TORCHRUN = ["torchrun", "--nnodes=2", "--nproc_per_node", "4", "--node-rank", "1", "--rdzv-id", "job42",
            "train.py", "--nnodes", "9"]


def test_the_command_line_of_each_launcher():
    t = parse_command(TORCHRUN)  # options after the script are the script's, not torchrun's
    assert (t.launcher, t.nodes, t.processes_per_node, t.node_rank, t.rendezvous_id) == ("torchrun", 2, 4, 1, "job42")
    m = parse_command(["python3", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "x.py"])
    assert (m.launcher, m.nodes, m.processes_per_node) == ("torchrun", 1, 2)
    assert parse_command(["torchrun", "--nnodes", "1:4", "--nproc-per-node", "gpu", "x.py"]).nodes is None
    d = parse_command(["deepspeed", "--num_nodes", "2", "--num_gpus", "8", "x.py"])
    assert (d.launcher, d.nodes, d.processes_per_node) == ("deepspeed", 2, 8)
    a = parse_command(["accelerate", "launch", "--num_machines", "2", "--num_processes", "16", "--machine_rank", "1", "t.py"])
    assert (a.launcher, a.nodes, a.node_rank, a.processes_per_node) == ("accelerate", 2, 1, 8)
    s = parse_command(["srun", "-N", "4", "--ntasks-per-node", "1", "python", "t.py"])
    assert (s.launcher, s.nodes, s.processes_per_node) == ("srun", 4, 1)
    assert parse_command(["python", "train.py"]).launcher == "python"


def test_slurm_gives_the_run_id_that_slurm_sync_gives_and_requeues_chain():
    env = {"SLURM_JOB_ID": "4242", "SLURM_CLUSTER_NAME": "gpu", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1",
           "SLURM_GPUS_ON_NODE": "8", "SLURMD_NODENAME": "n7"}
    t = resolve(Flags(), env, ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "x.py"])
    # $SLURM_CLUSTER_NAME is in every job's environment, but `slurm sync` names the job by its cluster only
    # when given --cluster: so does the wrapper
    assert (t.run_id, t.run_id_from, t.nodes, t.node_rank, t.gpus_per_node, t.node_name) == (
        slurm_run_id("4242"), "slurm", 2, 1, 8, "n7")
    assert not t.owns_run and t.resume_of is None and t.passive is None
    assert resolve(Flags(cluster="other"), env, ["python", "x.py"]).run_id == slurm_run_id("4242", "other")
    first = resolve(Flags(), {**env, "SLURM_RESTART_COUNT": "1"}, ["python", "x.py"])
    second = resolve(Flags(cluster="gpu"), {**env, "SLURM_RESTART_COUNT": "2"}, ["python", "x.py"])
    assert (first.run_id, first.resume_of) == (slurm_attempt_id(slurm_run_id("4242"), 1), slurm_run_id("4242"))
    assert (first.run_id, second.run_id) == ("slurm-4242-r1", "slurm-gpu-4242-r2")
    assert second.resume_of == slurm_attempt_id(slurm_run_id("4242", "gpu"), 1) == "slurm-gpu-4242-r1"
    assert resolve(Flags(), {**env, "SLURM_LOCALID": "1"}, ["python", "x.py"]).passive.startswith("task 1")


def test_flags_that_contradict_the_environment_or_the_command_are_refused():
    with pytest.raises(LedgerInputError, match="--nodes 2 conflicts with torchrun nodes in the command = 1"):
        resolve(Flags(nodes=2, run_id="r"), {}, ["torchrun", "--nnodes", "1", "x.py"])
    with pytest.raises(LedgerInputError, match="--nodes 4 conflicts with SLURM_JOB_NUM_NODES = 2"):
        resolve(Flags(nodes=4), {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2"}, ["python", "x.py"])
    with pytest.raises(LedgerInputError, match="--node-rank 0 conflicts with SLURM_NODEID = 1"):
        resolve(Flags(node_rank=0), {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1"}, ["x"])
    with pytest.raises(LedgerInputError, match="a 2-node run needs one run id"):
        resolve(Flags(nodes=2), {}, ["python", "x.py"])
    with pytest.raises(LedgerInputError, match="--node-rank: 2 is not a node of a 2-node run"):
        resolve(Flags(nodes=2, node_rank=2, run_id="r"), {}, ["python", "x.py"])
    with pytest.raises(LedgerInputError, match="--run-id: 'a b' is not a run id"):
        resolve(Flags(run_id="a b"), {}, ["python", "x.py"])
    assert resolve(Flags(nodes=2, node_rank=1, run_id="r"), {}, ["python", "x.py"]).node_rank == 1


def test_a_multi_node_torchrun_shares_its_rendezvous_id():
    t = resolve(Flags(), {}, TORCHRUN)
    assert (t.run_id, t.run_id_from, t.nodes, t.node_rank, t.processes_per_node) == ("torchrun-job42", "torchrun", 2, 1, 4)
    one = resolve(Flags(), {}, ["torchrun", "--standalone", "--nproc-per-node", "2", "--rdzv-id", "x", "t.py"])
    assert one.run_id_from == "new" and len(one.run_id) == 16  # one node: a fresh id, a rendezvous id may repeat


def test_inside_another_wrapper_or_a_worker_nothing_is_recorded_twice():
    assert resolve(Flags(), {"TRAINLEDGER_WRAPPED": "abc"}, ["python", "x.py"]).passive == \
        "already inside the wrapper of run abc"
    t = resolve(Flags(), {"LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                          "TORCHELASTIC_RUN_ID": "el"}, ["python", "x.py"])
    assert (t.passive, t.nodes, t.node_rank, t.run_id) == ("local rank 1; local rank 0 records the node", 2, 1,
                                                          "torchrun-el")


def test_the_gpus_a_job_owns():
    assert owned_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert owned_gpus({"CUDA_VISIBLE_DEVICES": "GPU-aa,1"}) == ["GPU-aa", "1"]
    assert owned_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}) == ["0"]  # CUDA stops at the first invalid entry
    assert owned_gpus({"CUDA_VISIBLE_DEVICES": ""}) == [] and owned_gpus({}) is None
    assert owned_gpus({"SLURM_JOB_GPUS": "4,5"}) == ["4", "5"]
    assert resolve(Flags(), {"CUDA_VISIBLE_DEVICES": "4,5,6"}, ["python", "x.py"]).gpus_per_node == 3
    assert resolve(Flags(gpus_per_node=8), {"CUDA_VISIBLE_DEVICES": "4"}, ["python", "x.py"]).gpus_per_node == 8


def test_what_is_recorded_of_the_command():
    assert redact_command(["python", "t.py", "--hf-token", "hf_x", "--api_key=abc", "--lr", "3"]) == \
        ["python", "t.py", "--hf-token", "***", "--api_key=***", "--lr", "3"]
    assert default_name(["torchrun", "--nproc-per-node", "2", "/src/train.py", "--x"]) == "train.py"
    assert default_name(["python", "-m", "pkg.train"]) == "pkg.train"
    assert default_name(["/opt/bin/megatron"]) == "megatron"


def test_a_nodes_processes_are_the_ranks_seen_or_the_count_the_launcher_announced():
    """A short job's second rank may end between two looks of the wrapper's discovery (it polls the command's
    processes): the node records the ``LOCAL_WORLD_SIZE`` its ranks were given when it says more than were seen."""
    two = resolve(Flags(), {}, ["torchrun", "--standalone", "--nproc-per-node", "2", "t.py"])
    assert local_processes({"local_ranks": ["0"], "world_size": "2", "local_world_size": 2}, two) == 2
    assert local_processes({"local_ranks": ["0", "1", "2"], "local_world_size": 2}, two) == 3  # more seen: all count
    assert local_processes({"local_ranks": ["1"], "local_world_size": None}, two) == 1
    assert local_processes({}, two) == 2  # none seen: the launcher's --nproc-per-node
    assert local_processes({}, resolve(Flags(), {}, ["python", "x.py"])) == 1
    assert local_processes({}, resolve(Flags(), {}, ["bash", "x.sh"])) is None
