"""A race where every config ties for the best, alternately of seed sd 1 and 1 / ratio (issue 59,
remaining item 2), through the race's own simulated look
(``analysis.decisions.race.boundary.elimination_rate`` on ``all_tied_values``): the share of the
truly best configs (all 9) that leave at some look, at the race's calibrated level and at the
level before the calibration simulated this case (0.0178 with a wave-1 variance, 0.0215
without), on other random numbers than the calibration's. ± the binomial error over the truly
best configs (those of a race are not independent: they leave together, 4-8 of a race at once in
about 4% of races, and the Monte Carlo error over races is about 0.43 point a 1000 races, not
the 0.23 printed; ``bench/race_unequal.py``'s ``all`` rows measure the same on other numbers).

Usage: python bench/race_all_tied.py [--races 1000]   (about 1 min on 2 shared cores, plus the
calibration of the two levels, 2-5 min)
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.decisions.race.boundary import (  # noqa: E402
    SD_RATIOS,
    all_tied_values,
    boundary,
    elimination_rate,
)

FORMER = {True: 0.0178, False: 0.0215}
"""The 9-config, 5-seed levels before the all-tied case was calibrated."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=1000)
    parser.add_argument("--levels", type=float, nargs=2, default=None,
                        help="the levels with and without a wave-1 variance (default: calibrate)")
    args = parser.parse_args()
    se = 100 * math.sqrt(0.05 * 0.95 / (9 * args.races))
    print(f"{args.races} races a cell, 9 configs, 5 seeds; a truly best config left: now (before) ± {se:.1f}\n")
    print("| wave 1 variance | " + " | ".join(f"seed sds 1 and {1 / r:g}" for r in SD_RATIOS) + " |")
    print("| --- | " + " | ".join("---" for _ in SD_RATIOS) + " |")
    for i, first in enumerate((True, False)):
        level = args.levels[i] if args.levels else boundary(9, 5, 0.05, first).level
        cells = []
        for ratio in SD_RATIOS:
            values = all_tied_values(9, 5, ratio, args.races,
                                     np.random.default_rng(9000 + int(ratio) + 7 * first))
            now = elimination_rate(level, values, first)
            before = elimination_rate(FORMER[first], values, first)
            cells.append(f"{100 * now:.1f}% ({100 * before:.1f}%)")
        print(f"| {'yes' if first else 'none'}, at {level:.4f} (before {FORMER[first]}) | "
              + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
