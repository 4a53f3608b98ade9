"""The job ``bench.capture`` runs directly and under ``trainledger run``: fixed pure-Python work per step.

    python bench/capture_job.py OUT.json STEPS

Writes ``{"step_s": [...]}``: the wall time of every step after the first three.
"""

import json
import sys
import time


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    times = []
    for _ in range(steps + 3):
        t0 = time.perf_counter()
        s = 0
        for i in range(200_000):
            s += i * i
        times.append(time.perf_counter() - t0)
    with open(out, "w") as fh:
        json.dump({"step_s": times[3:]}, fh)


if __name__ == "__main__":
    main()
