"""The main-effect power the dry run states against the power the analysis has (issue 45, item 5).
For each design (a grid of swept keys x seeds a config, seed sd 1), the first key's first two
levels are set apart by the difference ``analysis.stats.power.detectable_main_effect`` says its F
test finds at 80% power (the others at their mean; the other key without effect), and sweeps
simulated through the analysis's own code (``analysis.stats.sources.seed_variance``: the pooled seed
variance, or a one-seed grid's additive residual; ``analysis.stats.effects.main_effects``: the ANOVA)
count how often the key's F test has p < 0.05: the power the analysis has, ± its Monte Carlo
error. Goal: stated within 5 points of simulated.

Usage: python bench/main_effect_power.py [--sweeps 400]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import rate  # noqa: E402

from analysis.stats.effects import VALUE, main_effects  # noqa: E402
from analysis.stats.levels import POWER  # noqa: E402
from analysis.stats.power import detectable_main_effect, error_df  # noqa: E402
from analysis.stats.sources import seed_variance  # noqa: E402
from analysis.stats.variance import ConfigData  # noqa: E402

DESIGNS = (((3,), 2), ((3,), 3), ((3,), 5), ((3, 3), 1), ((3, 3), 2), ((3, 3), 3), ((2, 2), 3))
"""(levels of each swept key, seeds a config)."""


def stated(levels: tuple[int, ...], seeds: int) -> tuple[float, float]:
    """The dry run's detectable difference for the first key, and its error df."""
    k = int(np.prod(levels))
    df = error_df(k, levels, seeds)
    return detectable_main_effect(1.0, levels[0], k * seeds / levels[0], df,
                                  k if seeds > 1 else 0), df


def simulated(levels: tuple[int, ...], seeds: int, delta: float, sweeps: int,
              rng: np.random.Generator) -> list[bool]:
    """Whether the first key's F test rejected at 5%, one entry a simulated sweep."""
    keys = [f"k{i}" for i in range(len(levels))]
    cells = list(itertools.product(*(range(m) for m in levels)))
    shift = {0: delta / 2, 1: -delta / 2}
    hits = []
    for _ in range(sweeps):
        rows, configs = [], []
        for cell in cells:
            values = rng.normal(shift.get(cell[0], 0.0), 1.0, seeds)
            configs.append(ConfigData(str(cell), values))
            rows += [{**{key: str(level) for key, level in zip(keys, cell, strict=True)}, VALUE: v}
                     for v in values]
        frame = pd.DataFrame(rows)
        error = seed_variance(configs, frame, keys, None)
        effects = main_effects(frame, keys, error, replicated=seeds > 1)
        hits.append(effects is not None and effects.terms[0].p < 0.05)
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=400)
    args = parser.parse_args()
    print("| swept keys (levels) | seeds a config | error df | difference (seed sd) | stated power "
          "| simulated power |")
    print("| --- | --- | --- | --- | --- | --- |")
    for levels, seeds in DESIGNS:
        delta, df = stated(levels, seeds)
        hits = simulated(levels, seeds, delta, args.sweeps, np.random.default_rng(sum(levels) * 10 + seeds))
        print(f"| {' x '.join(map(str, levels))} | {seeds} | {df} | {delta:.2f} | {POWER:.0%} "
              f"| {rate(hits)} |")


if __name__ == "__main__":
    main()
