"""A training command that is not ours, for the wrapper tests: it does what its arguments say.

    python job.py [--out TEXT] [--err-lines N] [--busy SECONDS] [--exit CODE] [--started FILE]
                  [--on-term FILE] [--ignore-term] [--child FILE] [--setsid-child FILE] [--sleep SECONDS]
                  [--wait-bytes FILE N]
                  [--track STEPS] [--checkpoint-at STEP] [--flops N --peak TFLOPS]

``--child``/``--setsid-child`` start a grandchild (in this process group, or in a session of its own
like torchrun's workers) and write its pid to FILE. ``--track`` logs STEPS steps through ``trainledger.track``. ``--wait-bytes`` waits (up to 600 s) until FILE holds
N bytes: the NVML double's read counter (FAKE_NVML_READS_FILE), so the job outlives N sampling reads.
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="")
    p.add_argument("--err-lines", type=int, default=0)
    p.add_argument("--busy", type=float, default=0.0)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--started")
    p.add_argument("--on-term")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--child")
    p.add_argument("--setsid-child")
    p.add_argument("--track", type=int, default=0)
    p.add_argument("--checkpoint-at", type=int, default=-1)
    p.add_argument("--flops", type=float, default=None)
    p.add_argument("--peak", type=float, default=None)
    p.add_argument("--wait-bytes", nargs=2, default=None)
    a = p.parse_args()
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif a.on_term:
        def term(signum, frame):
            with open(a.on_term, "w") as fh:
                fh.write(f"{os.getpid()} {signal.Signals(signum).name}")
            sys.exit(7)
        signal.signal(signal.SIGTERM, term)
    if a.started:  # only once its SIGTERM handling is in place (a test signals the job as soon as it has
        with open(a.started + ".part", "w") as fh:  # started), and whole: it appears with the pid in it
            fh.write(str(os.getpid()))
        os.replace(a.started + ".part", a.started)
    for path, setsid in ((a.child, False), (a.setsid_child, True)):
        if path:
            c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=setsid)
            with open(path, "w") as fh:
                fh.write(str(c.pid))
    if a.out:
        sys.stdout.write(a.out)
        sys.stdout.flush()
    for i in range(a.err_lines):
        print(f"stderr line {i}", file=sys.stderr, flush=True)
    if a.track:
        import trainledger

        with trainledger.track(project="api", flush_s=0.2, flops_per_token=a.flops, peak_tflops=a.peak) as run:
            for step in range(a.track):
                t = time.time()
                while time.time() - t < 0.005:  # a step takes time
                    pass
                run.log(step=step, tokens=256, loss=4.0 - step / 100)
                if step == a.checkpoint_at:
                    run.checkpoint(step=step, path=f"/ckpt/{step}")
    end = time.time() + a.busy
    while time.time() < end:
        pass
    time.sleep(a.sleep)
    if a.wait_bytes:
        path, n = a.wait_bytes[0], int(a.wait_bytes[1])
        deadline = time.monotonic() + 600
        while (not os.path.exists(path) or os.path.getsize(path) < n) and time.monotonic() < deadline:
            time.sleep(0.05)
    return a.exit


if __name__ == "__main__":
    sys.exit(main())
