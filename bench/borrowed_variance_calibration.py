"""A borrowed seed variance where the source ran other settings (issue 45, item 3), through the
real code: how often a one-seed stage (the chain's baselines, normalization or prompt study: k
configs, one seed each, nothing in the stage to measure the seed variance with) calls equal
configs different, with the source's variance taken as it is against inflated to its upper 95%
confidence bound (``analysis.uncertainty.upper_bound_factor``: what the analysis does where the
stage's configs ran settings the source did not: another loss, normalization, learning rate or
number of off-policy epochs).

Each simulated stage: k configs, one run each, N(0, 1) (seed sd 1); the source's variance is
``ratio`` x 1 (its true variance: 1x right, 0.5x and 0.25x too small, as a learning-rate study's
variance carried into a stage that varies more) times chi2_df / df (an estimate on the source's
df). The verdicts: ``compare_pair`` on every pair (Tukey-Kramer over the k configs). Power: one
config 3 seed sd better, called better than each other config.

Usage: python bench/borrowed_variance_calibration.py [--stages 4000]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import rate  # noqa: E402

from analysis.uncertainty import (  # noqa: E402
    ALPHA,
    ConfigData,
    SeedVariance,
    compare_pair,
    upper_bound_factor,
)


def called(configs: list[ConfigData], variance: SeedVariance) -> list[tuple[str, str, str]]:
    """Every pair's verdict (a, b, verdict)."""
    return [(a.label, b.label, compare_pair(a, b, "best", 10, variance, len(configs), ALPHA).verdict)
            for a, b in itertools.combinations(configs, 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=4000)
    args = parser.parse_args()
    print(f"{args.stages} simulated stages a row; each cell: as borrowed / inflated to the "
          "source's upper 95% bound (what the analysis does for settings the source did not run)\n")
    print("| configs in the stage | source df | borrowed / true variance | inflation | "
          "false verdicts (all equal) | one 3 sd better called better than each |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, df, ratio in itertools.product((2, 4), (6, 10), (1.0, 0.5, 0.25)):
        start = time.time()
        rng = np.random.default_rng(int(1000 * ratio) + 10 * k + df)
        factor = upper_bound_factor(df)
        false: dict[float, list[bool]] = {1.0: [], factor: []}
        power: dict[float, list[bool]] = {1.0: [], factor: []}
        for _ in range(args.stages):
            estimate = ratio * float(rng.chisquare(df)) / df
            equal = [ConfigData(f"c{i}", rng.normal(0.0, 1.0, 1)) for i in range(k)]
            better = [ConfigData(f"c{i}", rng.normal(3.0 if i == 0 else 0.0, 1.0, 1))
                      for i in range(k)]
            for f in false:
                variance = SeedVariance(estimate * f, df, "borrowed", "simulated")
                false[f].append(any(v != "not distinguishable" for *_, v in called(equal, variance)))
                power[f].append(all(v == "better" for a, _, v in called(better, variance) if a == "c0"))
        cells = [" / ".join(rate(d[f]) for f in d) for d in (false, power)]
        print(f"| {k} | {df} | {ratio:g} | x{factor:.2f} | {cells[0]} | {cells[1]} |", flush=True)
        print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
