"""A training loop recorded through ``trainledger.track`` with phases (tests/capture/test_goodput_capture.py).

    python phase_job.py RUN_ID CKPT_DIR STEPS [--resume-of ID] [--hang-after-checkpoint]

Each step: a ``data`` phase, a little compute, ``run.log``; after step 3 a ``checkpoint_save`` phase writes
CKPT_DIR/step3 and ``run.checkpoint``. A resumed run first reads it back in a ``checkpoint_restore`` phase.
``--hang-after-checkpoint`` keeps stepping after the checkpoint until the test kills it.
"""

import argparse
import os
import time

import trainledger


def compute(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("run_id")
    p.add_argument("ckpt")
    p.add_argument("steps", type=int)
    p.add_argument("--resume-of")
    p.add_argument("--hang-after-checkpoint", action="store_true")
    a = p.parse_args()
    with trainledger.track(project="gp", run_id=a.run_id, resume_of=a.resume_of, name="phase-job") as run:
        first = 0
        if a.resume_of:
            with run.phase("checkpoint_restore"):
                with open(os.path.join(a.ckpt, "step3")) as fh:
                    first = int(fh.read()) + 1
                compute(0.05)
        step = first
        while step < a.steps or a.hang_after_checkpoint:
            run.step_begin()
            with run.phase("data"):
                compute(0.01)
            compute(0.03)
            run.log(step=step, tokens=128)
            if step == 3 and not a.resume_of:
                with run.phase("checkpoint_save"):
                    with open(os.path.join(a.ckpt, "step3"), "w") as fh:
                        fh.write("3")
                        fh.flush()
                        os.fsync(fh.fileno())
                    compute(0.05)
                run.checkpoint(step=3, path=os.path.join(a.ckpt, "step3"))
            step += 1


if __name__ == "__main__":
    main()
