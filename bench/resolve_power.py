"""The power "What would decide" states against the power the analysis has (issue 45, item 5):
``analysis.uncertainty.resolve`` sizes a design by the normal approximation, a difference of (Hsu's
critical value + z_0.8) standard errors found at 80% power. Here, for each design (configs x
seeds), config 0 is made better than every other config by exactly that difference (seed sd 1),
and sweeps simulated through ``compare_sweep`` count how often config 1 leaves the set that
could be the best (Hsu's bound below 0): the power the analysis has, ± its Monte Carlo error.

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

from analysis.uncertainty import (  # noqa: E402
    POWER,
    ConfigData,
    SeedVariance,
    compare_sweep,
    mcb_critical,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=400)
    args = parser.parse_args()
    print("| configs | seeds a config | df | difference (seed sd) | stated power | simulated power |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, n in ((9, 2), (9, 3), (9, 5), (3, 3)):
        df = float(k * (n - 1))
        d = mcb_critical((round(math.sqrt(0.5), 6),) * (k - 1), df)
        delta = (d + float(special.ndtri(POWER))) * math.sqrt(2 / n)
        rng = np.random.default_rng(10 * k + n)
        hits = []
        for _ in range(args.sweeps):
            configs = [ConfigData(f"c{i}", rng.normal(delta if i == 0 else 0.0, 1.0, n))
                       for i in range(k)]
            ranked = sorted(configs, key=lambda c: -c.mean)
            u = compare_sweep(ranked, ranked[0].label, {}, 10, SeedVariance.pooled(configs))
            hits.append("c1" not in u.could_be_best)
        print(f"| {k} | {n} | {df:g} | {delta:.2f} | {POWER:.0%} | {rate(hits)} |", flush=True)


if __name__ == "__main__":
    main()
