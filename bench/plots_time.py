"""Time ``make plots`` (``python -m analysis plots``) on a synthetic sweep, end to end and by phase.

Usage: ``python bench/plots_time.py [--sweep large|small] [--keep DIR]``.

* ``large`` (default): 480 runs, 4 swept keys, 80 configs x 6 seeds, 200 GRPO steps, evaluation
  every 10, a few configs collapsed or diverged; the target is < 10 s end to end.
* ``small``: a 3x3 sweep of 9 runs.

Prints the wall-clock and CPU seconds of the command as a user runs it (a fresh interpreter,
imports included), then of each phase in one process. ``--keep DIR`` writes the sweep (and its
figures) there and keeps it.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SWEEPS: dict[str, dict[str, Any]] = {
    "large": {
        "grid": {"learning_rate": [1e-6, 3e-6, 1e-5, 3e-5, 1e-4], "off_policy.epochs": [1, 2, 4, 8],
                 "loss": ["grpo_clip", "reinforce_with_baseline"],
                 "train_batch_size": [128, 256]},
        "n_seeds": 6,
        # configs (grid order) whose runs collapse or diverge
        "unstable": {4: "collapsed", 24: "collapsed", 44: "collapsed", 64: "collapsed",
                     7: "diverged", 32: "diverged", 57: "diverged"},
    },
    "small": {"grid": {"off_policy.epochs": [1, 2, 4], "train_batch_size": [64, 128, 256]},
              "n_seeds": 1, "unstable": {}},
}
TARGET_S = 10.0


def timed(timings: dict[str, float], phase: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``, record its wall-clock seconds under ``phase`` and return its result."""
    start = time.perf_counter()
    result = fn()
    timings[phase] = time.perf_counter() - start
    return result


def command(sweep: Path) -> tuple[float, float]:
    """Wall-clock and CPU seconds of ``python -m analysis plots --sweep SWEEP`` (what
    ``make plots SWEEP=...`` runs)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "analysis", "plots", "--sweep", str(sweep)],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def phases(sweep: Path) -> dict[str, float]:
    """Wall-clock seconds of collect, figures, collected frame and report in this process."""
    from analysis.outputs.plots import plot_all
    from analysis.outputs.report import write_report
    from analysis.readers.collect import collect, save_steps

    timings: dict[str, float] = {}
    collection = timed(timings, "collect", lambda: collect([sweep]))
    figures = timed(timings, "figures", lambda: plot_all(collection, sweep / "figures"))
    timed(timings, "collected frame", lambda: save_steps(collection, sweep / "collected"))
    timed(timings, "report", lambda: write_report(
        collection, sweep, {n: f.paths for n, f in figures.items()}))
    return timings


def main() -> None:
    """Write the sweep, time the command and its phases, print the figures."""
    from analysis.readers.synthetic import write_grid_sweep

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", choices=SWEEPS, default="large", help="which synthetic sweep")
    parser.add_argument("--keep", type=Path, help="write the sweep here and keep it")
    args = parser.parse_args()
    spec = SWEEPS[args.sweep]
    with tempfile.TemporaryDirectory() as tmp:
        sweep = args.keep or Path(tmp) / "synthetic" / "2025-06-01_12-00-00"
        start = time.perf_counter()
        jobs = write_grid_sweep(sweep, spec["grid"], n_steps=200, eval_every=10,
                                n_seeds=spec["n_seeds"], unstable=spec["unstable"])
        print(f"wrote {len(jobs)} runs x 200 steps ({len(spec['grid'])} swept keys, "
              f"{spec['n_seeds']} seed(s)) in {time.perf_counter() - start:.1f} s: {sweep}")
        wall, cpu = command(sweep)
        print(f"make plots (python -m analysis plots): {wall:6.2f} s wall-clock, {cpu:6.2f} s CPU"
              f"  (target < {TARGET_S:.0f} s)")
        for phase, seconds in phases(sweep).items():
            print(f"  {phase:18s} {seconds:6.2f} s")
        print(f"figures: {sweep / 'figures'}")


if __name__ == "__main__":
    main()
