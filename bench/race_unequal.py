"""A race's calibrated level where tied best configs differ in seed sd (issue 52, item 14),
through the race's own simulated look (``analysis.decisions.race.boundary.look``: the pooled variance of the
configs still in, or a pair's own where at least as large on its Welch-Satterthwaite df, Hsu's
critical value on its df; the rule
``analysis.decisions.race.looks.decide`` applies, checked against ``compare_sweep`` in tests/test_race_boundary.py).

The race's level (``analysis.decisions.race.boundary.boundary``) is calibrated where every config has one seed
sd. Here two configs tie for the best with seed sd 1 and 1/ratio; the others (where there are
more) are 100 sd behind, so they leave at the first look that can tell and the tied pair races
on alone. For each design: the share of the two truly best configs that leave at some look at
the race's level, at Bonferroni's ``alpha / max_seeds``, and the level a look would need for
that share to be ``alpha`` (bisection on common random numbers); ``equal`` is the control (one
sd: the calibration's own case, about 5%). ± is the Monte Carlo error (binomial over the
``2 x races`` truly best configs; the two of a race are not independent, so it is a little
optimistic).

Usage: nice -n 10 python bench/race_unequal.py [--races 2000]   (about 20 s on 2 shared cores)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.decisions.race.boundary import boundary, elimination_rate  # noqa: E402

ALPHA = 0.05
DESIGNS = [  # (configs, max_seeds, a seed variance at wave 1, sd ratio of the tied pair)
    (2, 5, False, 1.0), (2, 5, False, 4.0), (2, 5, False, 100.0), (2, 3, False, 4.0),
    (9, 5, True, 4.0), (9, 5, False, 4.0),
]


def values_of(n_configs: int, max_seeds: int, ratio: float, races: int, seed: int) -> np.ndarray:
    """Each race's seed values, (races, max_seeds, n_configs): configs 0 and 1 at 0 with seed sd 1
    and 1 / ratio, the others at -100 with seed sd 1."""
    rng = np.random.default_rng(seed)
    means = np.array([0.0, 0.0] + [-100.0] * (n_configs - 2))
    sds = np.array([1.0, 1.0 / ratio] + [1.0] * (n_configs - 2))
    return means + sds * rng.standard_normal((races, max_seeds, n_configs))


def needed_level(values: np.ndarray, first_look: bool, high: float, steps: int = 8) -> float:
    """The largest level (to (high - 5e-4) / 2^steps) at which at most ALPHA of the tied pair leave."""
    low = 5e-4
    for _ in range(steps):
        mid = (low + high) / 2
        if elimination_rate(mid, values, first_look, best=(0, 1)) > ALPHA:
            high = mid
        else:
            low = mid
    return low


def error(p: float, n: int) -> float:
    """The binomial standard error of a share p over n."""
    return math.sqrt(p * (1 - p) / n)


def main() -> None:
    """Print one row a design."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", type=int, default=2000)
    args = parser.parse_args()
    n = 2 * args.races
    print(f"| configs | max_seeds | wave 1 variance | seed sd of the tied pair | level | a truly best "
          f"config left | at Bonferroni's alpha / max_seeds | level that would hold {ALPHA:g} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, max_seeds, first_look, ratio in DESIGNS:
        started = time.time()
        level = boundary(k, max_seeds, ALPHA, first_look).level
        values = values_of(k, max_seeds, ratio, args.races, seed=k * 1000 + max_seeds)
        at_level = elimination_rate(level, values, first_look, best=(0, 1))
        bonferroni = elimination_rate(ALPHA / max_seeds, values, first_look, best=(0, 1))
        need = needed_level(values, first_look, level) if at_level > ALPHA else level
        print(f"| {k} | {max_seeds} | {'yes' if first_look else 'no'} | 1 and {1 / ratio:g} | "
              f"{level:.4f} | {100 * at_level:.1f}% ± {100 * error(at_level, n):.1f} | "
              f"{100 * bonferroni:.1f}% ± {100 * error(bonferroni, n):.1f} | {need:.4f} |"
              f"  ({time.time() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
