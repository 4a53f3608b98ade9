"""Run several trainer configs one after another in one torchrun launch (saves process start-up).

    python -m torch.distributed.run --nproc-per-node N multi_strategy_worker.py OUT.json RUNS.json

RUNS.json: [{"name": ..., "config": {trainer YAML as a mapping}}, ...]. Rank 0
writes {name: TrainResult.to_dict() + {"callbacks": what a recording hook saw}}
to OUT.json. Every run goes through the real Trainer (DeepSpeed engine, gloo
process group shared by the runs).
"""

import json
import os
import sys
import warnings

from trainledger.trainer.config import config_from_dict
from trainledger.trainer.distributed import launch_env
from trainledger.trainer.engine import Trainer
from trainledger.trainer.parallel import resolve_plan
from trainledger.trainer.train import eager_by_default, write_json_atomic


class Recorder:
    """A hook that keeps what the loop hands it (only JSON-friendly parts)."""

    def __init__(self):
        self.seen = {"start": None, "steps": [], "end": None, "errors": []}

    def on_start(self, info):
        self.seen["start"] = {k: info[k] for k in ("rank", "world_size", "nodes", "hostnames", "params", "plan")}

    def on_step(self, step, metrics):
        self.seen["steps"].append({"step": step, **metrics})

    def on_end(self, result):
        self.seen["end"] = {"final_loss": result.final_loss, "steps": result.steps}

    def on_error(self, exc):
        self.seen["errors"].append(repr(exc))


def main() -> None:
    out, runs_path = sys.argv[1], sys.argv[2]
    runs = json.loads(open(runs_path, encoding="utf-8").read())
    env = launch_env()
    warnings.filterwarnings("ignore", category=FutureWarning)
    results = {}
    for run in runs:
        cfg = config_from_dict(run["config"])
        plan = resolve_plan(cfg, world_size=env.world_size, nodes=env.nodes)
        recorder = Recorder()
        result = Trainer(cfg, plan, callbacks=[recorder]).run().to_dict()
        results[run["name"]] = {**result, "callbacks": recorder.seen}
    if env.rank == 0:
        write_json_atomic(out, results)


if __name__ == "__main__":
    eager_by_default(os.environ)  # as the trainer's own entry point runs (trainledger.trainer.train.run_and_exit)
    main()
    sys.stdout.flush()
    os._exit(0)  # skip teardown of torch's leftover gloo threads (see trainledger.trainer.train.run_and_exit)
