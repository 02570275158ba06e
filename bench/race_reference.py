"""What a race of a simple rule spends on bench/race_calibration.py's truths when it is given
every advantage: an optimistic reference for the project's race, not a calibration of its code
and not a lower bound on every valid rule (a sharper sequential rule, such as an alpha-spending
boundary, could spend less).

Each config's value in a wave is its true effect plus N(0, seed sd) (no problem noise), the seed
variance is known exactly (no degrees of freedom lost to estimating it), and after each wave a
config leaves when it is below the best config still in by more than z standard errors of the
difference: comparisons with the best only, Bonferroni over the 8 comparisons at 0.05 / 5 a look.
The project's rule (Hsu's comparisons with the best on an estimated variance, with problem noise)
has none of these advantages. The second column drops all multiplicity control (one-sided 5% a
comparison and a look): not a valid procedure, shown for scale.

Usage: python bench/race_reference.py
"""

from __future__ import annotations

import numpy as np
from scipy import stats

MAX_SEEDS = 5
ALPHA = 0.05
TRUTHS = {"one config 3 points better": np.array([3.0] + [0.0] * 8),
          "a 3x3 grid 0.5-3 points apart": np.array([1.0 * a + 0.5 * b for a in range(3) for b in range(3)]),
          "configs 2 points apart": -2.0 * np.arange(9)}


def share(truth: np.ndarray, sd: float, z: float, rng: np.random.Generator, races: int = 4000) -> str:
    """The mean runs of a race as a share of the fixed grid (every config to MAX_SEEDS), ± its
    Monte Carlo standard error over `races` races."""
    k, shares = len(truth), []
    for _ in range(races):
        alive, sums, n, runs = np.ones(k, bool), np.zeros(k), np.zeros(k), 0
        for wave in range(MAX_SEEDS):
            idx = np.flatnonzero(alive)
            sums[idx] += truth[idx] + rng.normal(0, sd, len(idx))
            n[idx] += 1
            runs += len(idx)
            if wave == MAX_SEEDS - 1:
                break
            means = sums[idx] / n[idx]
            best = idx[np.argmax(means)]
            gap = sums[best] / n[best] - means
            alive[idx[gap > z * sd * np.sqrt(1 / n[idx] + 1 / n[best])]] = False
            if alive.sum() == 1:
                break
        shares.append(runs / (k * MAX_SEEDS))
    return f"{100 * np.mean(shares):.0f}% ± {100 * np.std(shares) / np.sqrt(races):.1f}"


def main() -> None:
    rng = np.random.default_rng(0)
    valid = float(stats.norm.ppf(1 - ALPHA / MAX_SEEDS / 8))
    unadjusted = float(stats.norm.ppf(1 - ALPHA))
    print("| truth | seed sd | known variance, MCB at 0.05/5 a look | no multiplicity control (invalid) |")
    print("| --- | --- | --- | --- |")
    for name, truth in TRUTHS.items():
        for sd in (1.5, 3.0):
            print(f"| {name} | {sd:g} points | {share(truth, sd, valid, rng)} "
                  f"| {share(truth, sd, unadjusted, rng)} |")


if __name__ == "__main__":
    main()
