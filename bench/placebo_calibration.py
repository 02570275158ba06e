"""The placebo's two intervals (issue 60, item 5), through the real code
(``analysis.stats.placebo``): how often each holds its truth.

- ``above_placebo``: a config's margin over its placebo (``reward=random``), the two arms' runs
  drawn independently, normal around means 0.45 and 0.40 with the seed sds of each design; the
  sweep's variance pooled over both arms (``SeedVariance.pooled``, as a confirmation sweep of one
  finalist and its placebo pools it) or over three finalists and their placebos (the other pairs'
  sds 0.04). Truth: 0.05.
- ``gain_over_pre_rl``: a placebo's late value minus its runs' step-0 evaluation, each run's late
  value normal around 0.40 with the placebo's seed sd, its step-0 value around 0.30 with the
  evaluation's sampling sd (0 for a greedy evaluation: every run starts from one policy), the two
  independent (each evaluation samples with its own seed); the sweep's variance pooled over the
  late values of the placebo and its config (seed sd 0.04). Truth: 0.10.

Each cell: the share of sweeps whose interval holds the truth ± its Monte Carlo error, and the
interval's mean half-width. Goal: >= 94% in every cell.

Usage: python bench/placebo_calibration.py [--sweeps 4000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import rate  # noqa: E402

from analysis.stats.placebo import above_placebo, gain_over_pre_rl  # noqa: E402
from analysis.stats.variance import ConfigData, SeedVariance  # noqa: E402

MARGIN = 0.05
GAIN = 0.10


def margin_cell(rng: np.random.Generator, sweeps: int, seeds: int, sd_config: float,
                sd_placebo: float, finalists: int) -> tuple[str, float]:
    held, widths = [], []
    for _ in range(sweeps):
        config = ConfigData("config", rng.normal(0.45, sd_config, seeds))
        placebo = ConfigData("placebo", rng.normal(0.40, sd_placebo, seeds))
        others = [ConfigData(f"o{i}", rng.normal(0.4, 0.04, seeds)) for i in range(2 * (finalists - 1))]
        gap = above_placebo(config, placebo, SeedVariance.pooled([config, placebo, *others]))
        held.append(gap.lo <= MARGIN <= gap.hi)
        widths.append((gap.hi - gap.lo) / 2)
    return rate(held), float(np.mean(widths))


def gain_cell(rng: np.random.Generator, sweeps: int, seeds: int, sd_late: float,
              sd_pre: float) -> tuple[str, float]:
    held, widths = [], []
    for _ in range(sweeps):
        placebo = ConfigData("placebo", rng.normal(0.40, sd_late, seeds))
        pre = rng.normal(0.30, sd_pre, seeds) if sd_pre else np.full(seeds, 0.30)
        config = ConfigData("config", rng.normal(0.45, 0.04, seeds))
        gain = gain_over_pre_rl(placebo, pre, SeedVariance.pooled([config, placebo]))
        held.append(gain.lo <= GAIN <= gain.hi)
        widths.append((gain.hi - gain.lo) / 2)
    return rate(held), float(np.mean(widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=4000, help="simulated sweeps a cell")
    args = parser.parse_args()
    rng = np.random.default_rng(20250)
    start = time.time()
    print(f"above_placebo: 95% interval of the margin {MARGIN} ({args.sweeps} sweeps a cell)")
    print(f"{'seeds':>5} {'sd config':>9} {'sd placebo':>10} {'finalists':>9}  {'held':>13}  half-width")
    for seeds in (2, 3, 5):
        for sd_config, sd_placebo in ((0.04, 0.04), (0.08, 0.02), (0.02, 0.08)):
            for finalists in (1, 3):
                held, half = margin_cell(rng, args.sweeps, seeds, sd_config, sd_placebo, finalists)
                print(f"{seeds:>5} {sd_config:>9} {sd_placebo:>10} {finalists:>9}  {held:>13}  {half:.3f}")
    print(f"\ngain_over_pre_rl: 95% interval of the gain {GAIN}")
    print(f"{'seeds':>5} {'sd late':>7} {'sd step 0':>9}  {'held':>13}  half-width")
    for seeds in (2, 3, 5):
        for sd_late in (0.02, 0.04, 0.08):
            for sd_pre in (0.0, 0.015, 0.04):
                held, half = gain_cell(rng, args.sweeps, seeds, sd_late, sd_pre)
                print(f"{seeds:>5} {sd_late:>7} {sd_pre:>9}  {held:>13}  {half:.3f}")
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
