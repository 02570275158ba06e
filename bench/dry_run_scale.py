"""Seconds a sweep's dry run takes at 480 jobs against its 20-job slice: every job of a sweep is
composed and checked before anything is submitted, so the dry run's cost a job is what a large
sweep waits before its first job starts.

    python bench/dry_run_scale.py [--repeats N]

Runs, as a user does (a fresh interpreter each, imports included), on the tiny model and the toy
data (the cost model's rates come from conf/model/tiny.yaml, the data from conf/data/toy.yaml):

* the 480-job sweep `launch.py -m model=tiny data=toy rollout=hf
  learning_rate=1e-4,2e-4,3e-4,5e-4,1e-3 off_policy.epochs=1,2,3,4 seed=0,...,23 dry_run=true`
  (3 of 4 epochs values are off-policy: 360 jobs get the off-policy default loss);
* its 20-job slice, `seed=0` alone;

with `GRPO_LOCAL_CONFIG=none` (no machine-specific config) and a temporary `paths.output_root`.
Prints each run's wall-clock and CPU seconds, the ratio of the 480-job run to the 20-job one
(target: at most 3, `TARGET_RATIO`) and the machine's load average before and after (the
machine may be shared: the CPU seconds are the figure load changes least). `--repeats N` runs
the pair N times and reports the fastest of each.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRID = ["model=tiny", "data=toy", "rollout=hf", "learning_rate=1e-4,2e-4,3e-4,5e-4,1e-3",
        "off_policy.epochs=1,2,3,4"]
SEEDS = {480: ",".join(str(seed) for seed in range(24)), 20: "0"}
TARGET_RATIO = 3.0


def dry_run(jobs: int, output_root: Path) -> tuple[float, float]:
    """Wall-clock and CPU seconds of the `jobs`-job dry run (`SEEDS[jobs]`) in a fresh
    interpreter; raises where it fails or lists another number of jobs."""
    env = {**os.environ, "GRPO_LOCAL_CONFIG": "none", "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "launch.py", "-m", *GRID, f"seed={SEEDS[jobs]}",
                          "dry_run=true", f"paths.output_root={output_root}"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0 or f"dry run: {jobs} jobs, nothing submitted" not in out.stdout:
        raise RuntimeError(f"the {jobs}-job dry run failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def load() -> str:
    """The load average over 1, 5 and 15 minutes, as `uptime` prints it."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    """Time the pair of dry runs, print both, their ratio and the load."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1, help="run the pair this many times")
    args = parser.parse_args()
    print(f"load average before: {load()} ({os.cpu_count()} CPUs)")
    best: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for jobs in SEEDS:
                wall, cpu = dry_run(jobs, Path(tmp))
                print(f"{jobs:3d}-job dry run: {wall:6.2f} s wall-clock, {cpu:6.2f} s CPU")
                best[jobs] = min(best.get(jobs, (wall, cpu)), (wall, cpu))
        if any(Path(tmp).iterdir()):
            raise RuntimeError(f"a dry run wrote into its output root {tmp}")
    (big_wall, big_cpu), (small_wall, small_cpu) = best[480], best[20]
    print(f"ratio 480 / 20 jobs: {big_wall / small_wall:.2f} wall-clock, {big_cpu / small_cpu:.2f} "
          f"CPU (target <= {TARGET_RATIO:g}); per job beyond the 20: "
          f"{1000 * (big_wall - small_wall) / 460:.1f} ms wall-clock")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
