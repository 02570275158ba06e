"""The pair rule's false verdicts where seed spread and seed counts differ (issue 59, remaining
item 3): ``analysis.stats.comparisons.pair_test`` vectorised over sweeps (the pool and the
two configs' variances computed here; the pair's variance and df read from the one rule,
``analysis.stats.critical.pair_rule``; two-sided t at 5%, which is the verdict of
``compare_pair`` for a family of 2), checked p-value for p-value against ``pair_test`` on the
first ``--check`` sweeps of every row. Then the power of each row at equal and unequal spread:
a better than b by 3 standard errors of their difference (sqrt(sd_a^2 / n_a + sd_b^2 / n_b)).

Designs (all configs of one mean; the pair compared is configs a and b):

- ``pair``: 2 configs alone, n seeds each, seed sd 1 and 1 / ratio.
- ``2 beside``: a (2 seeds, seed sd 1) against b (3 or 5 seeds, seed sd 1 / ratio), with
  ``others`` more configs of b's seeds and spread in the pool (the review's "a 2-seed config
  beside 3/5-seed configs of smaller spread").

Usage: python bench/pair_rule_scan.py [--sweeps 40000] [--check 30]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.stats.comparisons import pair_test  # noqa: E402
from analysis.stats.critical import pair_rule  # noqa: E402
from analysis.stats.variance import ConfigData, SeedVariance  # noqa: E402

RATIOS = (1.0, 2.0, 4.0, 10.0, 100.0)
POWER_RATIOS = (1.0, 4.0)
"""The sd ratios of the power rows: equal spread, and the ratio of the worst false rate."""
SHIFT = 3.0
"""The power rows' difference, in standard errors of the difference of a's and b's means."""
ROWS = [("pair", 2, 2, 0), ("pair", 3, 3, 0), ("pair", 5, 5, 0),
        ("2 beside", 2, 3, 0), ("2 beside", 2, 5, 0), ("2 beside", 2, 3, 3), ("2 beside", 2, 5, 3),
        ("3 beside", 3, 5, 3)]
"""(design, a's seeds, b's seeds, configs beside b of its seeds and spread)."""


def p_values(a: np.ndarray, b: np.ndarray, others: list[np.ndarray]) -> np.ndarray:
    """(sweeps,): the pair rule's p of a against b, each (sweeps, seeds), the pool over a, b and
    ``others``."""
    groups = [a, b, *others]
    squares = sum(((g - g.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) for g in groups)
    pool_df = sum(g.shape[1] - 1 for g in groups)
    pool = squares / pool_df
    va, vb = a.var(axis=1, ddof=1), b.var(axis=1, ddof=1)
    na, nb = a.shape[1], b.shape[1]
    variance, df, _ = pair_rule(va, na, vb, nb, pool, pool_df)
    t = (a.mean(axis=1) - b.mean(axis=1)) / np.sqrt(variance * (1 / na + 1 / nb))
    return 2 * special.stdtr(df, -np.abs(t))


def check(a: np.ndarray, b: np.ndarray, others: list[np.ndarray], count: int) -> None:
    """The copy's p equal to ``pair_test``'s on the first ``count`` sweeps (or raise)."""
    mine = p_values(a[:count], b[:count], [o[:count] for o in others])
    for i in range(count):
        configs = [ConfigData(str(j), g[i]) for j, g in enumerate([a, b, *others])]
        real = pair_test(configs[0], configs[1], SeedVariance.pooled(configs)).p_value
        if not math.isclose(real, float(mine[i]), rel_tol=1e-6, abs_tol=1e-12):
            raise SystemExit(f"the copy's p {mine[i]} is not pair_test's {real}: fix the copy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=40000)
    parser.add_argument("--check", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(593)
    se = 100 * math.sqrt(0.05 * 0.95 / args.sweeps)
    print(f"{args.sweeps} sweeps a cell; the share called better or worse (± {se:.2f} at 5%)\n")
    print("| design | seeds (a; b) | others in the pool | " + " | ".join(f"sd 1 and {1 / r:g}" for r in RATIOS) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in RATIOS) + " |")
    for name, na, nb, others in ROWS:
        cells = []
        for ratio in RATIOS:
            a, b, rest = draw(rng, args.sweeps, na, nb, others, ratio)
            check(a, b, rest, args.check)
            cells.append(f"{100 * np.mean(p_values(a, b, rest) < 0.05):.2f}%")
        print(f"| {name} | {na}; {nb} | {others} | " + " | ".join(cells) + " |", flush=True)
    print(f"\npower: a better than b by {SHIFT:g} standard errors of the difference\n")
    print("| design | seeds (a; b) | others in the pool | "
          + " | ".join(f"sd 1 and {1 / r:g}" for r in POWER_RATIOS) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in POWER_RATIOS) + " |")
    for name, na, nb, others in ROWS:
        cells = []
        for ratio in POWER_RATIOS:
            a, b, rest = draw(rng, args.sweeps, na, nb, others, ratio)
            a += SHIFT * math.sqrt(1 / na + 1 / (nb * ratio ** 2))
            cells.append(f"{100 * np.mean(p_values(a, b, rest) < 0.05):.2f}%")
        print(f"| {name} | {na}; {nb} | {others} | " + " | ".join(cells) + " |", flush=True)


def draw(rng: np.random.Generator, sweeps: int, na: int, nb: int, others: int,
         ratio: float) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """One cell's seed values, all of mean 0: a (sweeps, na) of sd 1, b (sweeps, nb) and
    ``others`` more of b's shape, of sd 1 / ``ratio``."""
    a = rng.standard_normal((sweeps, na))
    b = rng.standard_normal((sweeps, nb)) / ratio
    return a, b, [rng.standard_normal((sweeps, nb)) / ratio for _ in range(others)]


if __name__ == "__main__":
    main()
