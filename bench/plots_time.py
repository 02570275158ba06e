"""Time ``collect`` + ``plots`` + ``report`` on a synthetic 3x3 sweep (200 steps, eval every 10).

Usage: ``python bench/plots_time.py [--keep DIR]``. Prints the wall-clock seconds of each
phase and their total (module imports counted in their first phase); the target is < 15 s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GRID = {"off_policy.epochs": [1, 2, 4], "train_batch_size": [64, 128, 256]}


def timed(timings: dict[str, float], phase: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``, record its wall-clock seconds under ``phase`` and return its result."""
    start = time.perf_counter()
    result = fn()
    timings[phase] = time.perf_counter() - start
    return result


def bench(sweep: Path) -> dict[str, float]:
    """Write the sweep into ``sweep``, then time collect, plots and report on it."""
    from analysis.synthetic import write_grid_sweep

    timings: dict[str, float] = {}
    timed(timings, "write synthetic sweep", lambda: write_grid_sweep(sweep, GRID))

    def load() -> Any:
        from analysis.collect import collect

        return collect([sweep])

    def plots() -> Any:
        from analysis.plots import plot_all

        return plot_all(collection, sweep / "figures")

    def report() -> Any:
        from analysis.report import write_report

        return write_report(collection, sweep, {n: f.paths for n, f in figures.items()})

    collection = timed(timings, "collect", load)
    figures = timed(timings, "plots", plots)
    timed(timings, "report", report)
    assert len(collection.runs) == 9 and len(collection.steps) == 9 * 200
    return timings


def main() -> None:
    """Run the benchmark and print its timings."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", type=Path, help="write the sweep here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        timings = bench(args.keep or Path(tmp) / "sweep")
    for phase, seconds in timings.items():
        print(f"{phase:24s} {seconds:6.2f} s")
    total = sum(v for k, v in timings.items() if k != "write synthetic sweep")
    print(f"{'total':24s} {total:6.2f} s  (collect + plots + report; target < 15 s)")


if __name__ == "__main__":
    main()
