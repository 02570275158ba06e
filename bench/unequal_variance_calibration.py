"""Verdicts when seed variances differ (issue 45, item 2), through the real code: how often
``analysis.stats.comparisons`` calls equal configs different, misses a truly best config, and detects a
real difference, with each pair's variance the larger of the sweep's pool and the pair's own
(``pair_variance``, what the analysis does) against the sweep's pool alone (the former rule:
``pair_variance`` patched here to return the pool).

Designs (each config's runs drawn independently; a sweep's seed variance pooled as the analysis
pools it, ``SeedVariance.pooled``):

- ``floor``: two equal learning configs N(0.5, sd) rounded to a 25-problem reward (the 0.04 grid
  of the toy task) beside a config at a floor (every seed 0), as the real runs of
  ``bench/seed_noise.py`` look. False: the two learning configs called different. Miss: config a
  (a best one) out of Hsu's set. Sharp: the floor out of that set.
- ``learning-rate``: the issue's learning-rate sweep: 6 equal learning configs (seed sd 1) and 3
  near the floor (40 sd below, seed sd 0.3). False: any pair of the 6 called different (Tukey, all
  36 pairs). Miss: learning config 0 (a best one) out of Hsu's set.
- ``real-run seed sds``: the seed sds measured on real CPU runs (``real_runs``), the three
  learning configs at one mean. False: any pair of them called different; miss: the one of
  smallest sd (a best one) out of Hsu's set.
- ``equal``: 9 configs, one seed sd (the homoscedastic case of the calibration table). False: any
  pair called different; miss: config 0 out of Hsu's set.
- ``one-better``: 9 configs, one 3 sd better. Sharp: it alone is in Hsu's set (what the chain,
  ``promote`` and a race carry on).

Each cell ± its Monte Carlo error (binomial). Goal: false verdicts and misses <= 5%.

Usage: python bench/unequal_variance_calibration.py [--sweeps 1000]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import rate  # noqa: E402

import analysis.stats.comparisons as comparisons  # noqa: E402
from analysis.stats.comparisons import compare_pair, compare_sweep  # noqa: E402
from analysis.stats.levels import ALPHA  # noqa: E402
from analysis.stats.variance import ConfigData, SeedVariance  # noqa: E402

Draw = Callable[[np.random.Generator, int], list[ConfigData]]


def floor(sd: float) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> list[ConfigData]:
        return [ConfigData(name, np.round(rng.normal(0.5, sd, n) * 25) / 25)
                for name in ("a", "b")] + [ConfigData("floor", np.zeros(n))]
    return draw


def real_runs(rng: np.random.Generator, n: int) -> list[ConfigData]:
    """The seed sds the real CPU runs measured (``bench/seed_noise.py``: 0.040, 0.125 and 0.214
    for learning rates 1e-4, 3e-4 and 1e-3, every seed the same at 1e-5 and 3e-2), the three
    learning ones given one mean (0.4) so that any verdict among them is false, rounded to the
    toy task's 0.04 grid."""
    learning = [ConfigData(f"c{i}", np.round(rng.normal(0.4, sd, n) * 25) / 25)
                for i, sd in enumerate((0.040, 0.125, 0.214))]
    return learning + [ConfigData("c3", np.full(n, 0.2)), ConfigData("c4", np.zeros(n))]


def normal(means: list[float], sds: list[float]) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> list[ConfigData]:
        return [ConfigData(f"c{i}", rng.normal(m, s, n))
                for i, (m, s) in enumerate(zip(means, sds, strict=True))]
    return draw


def outcomes(configs: list[ConfigData], equal: set[str], best: str) -> tuple[bool, bool, bool]:
    """(a false verdict among ``equal``, ``best`` left out of Hsu's set, a sharp answer: with a
    config named ``floor`` the floor out of the set, else ``best`` alone in it)."""
    variance = SeedVariance.pooled(configs)
    ranked = sorted(configs, key=lambda c: -c.mean)
    u = compare_sweep(ranked, ranked[0].label, {}, 10, variance)
    by_label = {c.label: c for c in configs}
    false = any(compare_pair(by_label[a], by_label[b], "best", 10, variance, len(configs),
                             ALPHA).verdict in ("better", "worse")
                for a, b in itertools.combinations(sorted(equal), 2))
    sharp = ("floor" not in u.could_be_best if "floor" in by_label
             else u.could_be_best == [best])
    return false, best not in u.could_be_best, sharp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=1000)
    args = parser.parse_args()
    designs: list[tuple[str, int, Draw, set[str], str]] = []
    for n in (3, 5):
        for sd in (0.06, 0.125):
            designs.append((f"floor, sd {sd:g}", n, floor(sd), {"a", "b"}, "a"))
    designs += [("real-run seed sds", n, real_runs, {"c0", "c1", "c2"}, "c0") for n in (3, 5)]
    lr = normal([0.0] * 6 + [-40.0] * 3, [1.0] * 6 + [0.3] * 3)
    designs += [("learning-rate", n, lr, {f"c{i}" for i in range(6)}, "c0") for n in (2, 3, 5)]
    designs += [("equal", n, normal([0.0] * 9, [1.0] * 9), {f"c{i}" for i in range(9)}, "c0")
                for n in (2, 3)]
    designs += [("one-better", n, normal([3.0] + [0.0] * 8, [1.0] * 9), set(), "c0")
                for n in (2, 3)]
    pair_variance = comparisons.pair_variance
    print(f"{args.sweeps} sweeps a row; each cell: the analysis (pair variance) / the pool alone\n")
    print("| design | seeds a config | false verdicts among equal configs | a best config "
          "missed by Hsu's set | a sharp answer |")
    print("| --- | --- | --- | --- | --- |")
    for name, n, draw, equal, best in designs:
        start = time.time()
        cells = []
        for rule in ("pair", "pooled"):
            comparisons.pair_variance = (pair_variance if rule == "pair" else
                                         lambda a, b, seeds: (seeds.variance, float(seeds.df)))
            rng = np.random.default_rng(n * 1000 + len(name))
            cells.append([outcomes(draw(rng, n), equal, best) for _ in range(args.sweeps)])
        comparisons.pair_variance = pair_variance
        columns = [" / ".join(rate([r[i] for r in rows]) for rows in cells) for i in range(3)]
        if len(equal) < 2:
            columns[0] = "-"
        if len(equal) > 2:  # every equal config is a best one: no sharp answer to give
            columns[2] = "-"
        print(f"| {name} | {n} | {' | '.join(columns)} |", flush=True)
        print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
