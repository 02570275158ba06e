"""The power "What would decide" states against the power the analysis has (issue 45, item 5).
For each design (configs x seeds, seed sd 1), config 0 is made better than every other config by
the difference a rule says is found at 80% power, and sweeps simulated through ``compare_sweep``
count how often config 1 leaves the set that could be the best (Hsu's bound below 0): the power
the analysis has, ± its Monte Carlo error. Two rules: the former normal approximation, (Hsu's
critical value + z_0.8) standard errors on the pool's df; and what ``resolve`` and the dry run
use now, ``analysis.stats.power.power_against_best`` (noncentral t on the pair's own df,
``own_df``: Welch's df averaged over the sample variances, ``detectable_difference``). Goal: stated within 5 points of simulated.

Usage: python bench/resolve_power.py [--sweeps 400]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import rate  # noqa: E402

from analysis.stats.comparisons import compare_sweep  # noqa: E402
from analysis.stats.critical import mcb_critical  # noqa: E402
from analysis.stats.levels import POWER  # noqa: E402
from analysis.stats.power import detectable_difference, own_df, power_against_best  # noqa: E402
from analysis.stats.variance import ConfigData, SeedVariance  # noqa: E402


def simulated(k: int, n: int, delta: float, sweeps: int, rng: np.random.Generator) -> list[bool]:
    """Whether config 1 left the set that could be the best, one entry a simulated sweep."""
    hits = []
    for _ in range(sweeps):
        configs = [ConfigData(f"c{i}", rng.normal(delta if i == 0 else 0.0, 1.0, n))
                   for i in range(k)]
        ranked = sorted(configs, key=lambda c: -c.mean)
        u = compare_sweep(ranked, ranked[0].label, {}, 10, SeedVariance.pooled(configs))
        hits.append("c1" not in u.could_be_best)
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=400)
    args = parser.parse_args()
    print("| configs | seeds a config | former rule: difference (seed sd), simulated power | "
          "now: difference, stated power, simulated power |")
    print("| --- | --- | --- | --- |")
    for k, n in ((9, 2), (9, 3), (9, 5), (3, 3), (3, 5)):
        rng = np.random.default_rng(10 * k + n)
        se = math.sqrt(2 / n)
        d = mcb_critical((round(math.sqrt(0.5), 6),) * (k - 1), float(k * (n - 1)))
        former = (d + float(special.ndtri(POWER))) * se
        now = detectable_difference(se, k, own_df(n))
        stated = power_against_best(now, se, k, own_df(n))
        print(f"| {k} | {n} | {former:.2f}, {rate(simulated(k, n, former, args.sweeps, rng))} | "
              f"{now:.2f}, {stated:.0%}, {rate(simulated(k, n, now, args.sweeps, rng))} |",
              flush=True)


if __name__ == "__main__":
    main()
