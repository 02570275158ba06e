"""A race's calibrated level where tied best configs differ in seed sd (issue 52, item 14; issue 59,
item 4), through the race's own simulated look (``analysis.decisions.race.boundary.look``: the
pooled variance of the configs still in, or a pair's own where at least as large on its
Welch-Satterthwaite df, Hsu's critical value on its df; the rule
``analysis.decisions.race.looks.decide`` applies, checked against ``compare_sweep`` in
tests/test_race_boundary.py).

The race's level (``analysis.decisions.race.boundary.boundary``) is the least of the levels that
hold ``alpha`` with every config equal and with a tied best pair at each seed-sd ratio of
``SD_RATIOS``. Here, on other random numbers than the calibration's, two configs tie for the
best with seed sd 1 and 1/ratio, the others (where there are more) far behind, so they leave at
the first look that can tell and the tied pair races on alone; and, a case the calibration does
simulates at 1/100 only (``ALL_TIED_RATIO``), every one of 9 configs tied, alternately of seed sd
1 and 1/ratio (``all tied``).
For each design and ratio: the share of the truly best configs that leave at some look at the
race's level, at Bonferroni's ``alpha / max_seeds``, and the level a look would need for that
share to be ``alpha`` (bisection on common random numbers; the race's level where it holds
there). ± is the binomial error over the truly best configs; those of a race are not
independent, so it is optimistic: where all 9 tie, configs leave together (a race loses 4-8 of
them at once in about 4% of races) and the Monte Carlo error over races is about 0.43 point a
1000 races, not the 0.25 printed. The ``all`` rows measure what ``bench/race_all_tied.py``
measures (the same draws' recipe, ``all_tied_values``, and look) on other random numbers: at 1
and 0.01 this bench's 1000 races give 6.0% and 5.7%, that one's 4.9% and 5.0%, 20 other seeds
4.4-5.5%, 20000 races 5.2% +- 0.1 (issue 59, item 4; docs/how-to/racing.md).

Usage: nice -n 10 python bench/race_unequal.py [--races 2000] [--configs 9]   (about 5 min on 2 shared cores)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.decisions.race.boundary import (  # noqa: E402
    SD_RATIOS,
    all_tied_values,
    boundary,
    elimination_rate,
    tied_pair_values,
)

ALPHA = 0.05
DESIGNS = [  # (configs, max_seeds, a seed variance at wave 1, every config tied)
    (2, 5, False, False), (2, 3, False, False), (9, 5, True, False), (9, 5, False, False),
    (9, 5, True, True), (9, 5, False, True),
]


def values_of(n_configs: int, max_seeds: int, ratio: float, all_tied: bool, races: int,
              seed: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """Each race's seed values, (races, max_seeds, n_configs), and the truly best configs: the
    calibration's tied pair (``tied_pair_values``), or every config at 0, alternately of seed sd
    1 and 1 / ratio (``all_tied``)."""
    rng = np.random.default_rng(seed)
    if not all_tied:
        return tied_pair_values(n_configs, max_seeds, ratio, races, rng), (0, 1)
    return all_tied_values(n_configs, max_seeds, ratio, races, rng), tuple(range(n_configs))


def needed_level(values: np.ndarray, first_look: bool, best: tuple[int, ...], high: float,
                 steps: int = 8) -> float:
    """The largest level (to (high - 5e-4) / 2^steps) at which at most ALPHA of `best` leave."""
    low = 5e-4
    for _ in range(steps):
        mid = (low + high) / 2
        if elimination_rate(mid, values, first_look, best=best) > ALPHA:
            high = mid
        else:
            low = mid
    return low


def error(p: float, n: int) -> float:
    """The binomial standard error of a share p over n."""
    return math.sqrt(p * (1 - p) / n)


def main() -> None:
    """Print one row a design and ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--races", type=int, default=2000)
    parser.add_argument("--configs", type=int, nargs="*", default=(),
                        help="only the designs of these many configs")
    args = parser.parse_args()
    print(f"| configs | max_seeds | wave 1 variance | truly best | seed sds | level | a truly best "
          f"config left | at Bonferroni's alpha / max_seeds | level that would hold {ALPHA:g} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, max_seeds, first_look, all_tied in DESIGNS:
        if args.configs and k not in args.configs:
            continue
        level = boundary(k, max_seeds, ALPHA, first_look).level
        for ratio in SD_RATIOS:
            started = time.time()
            values, best = values_of(k, max_seeds, ratio, all_tied, args.races,
                                     seed=k * 1000 + max_seeds + int(10 * ratio))
            n = len(best) * args.races
            at_level = elimination_rate(level, values, first_look, best=best)
            bonferroni = elimination_rate(ALPHA / max_seeds, values, first_look, best=best)
            need = needed_level(values, first_look, best, level) if at_level > ALPHA else level
            print(f"| {k} | {max_seeds} | {'yes' if first_look else 'no'} | "
                  f"{'all' if all_tied else 'a pair'} | 1 and {1 / ratio:g} | {level:.4f} | "
                  f"{100 * at_level:.1f}% ± {100 * error(at_level, n):.1f} | "
                  f"{100 * bonferroni:.1f}% ± {100 * error(bonferroni, n):.1f} | {need:.4f} |"
                  f"  ({time.time() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
