"""What blocking a race's comparisons on the wave's seed would buy (issue 45, item 4): every
config still in a race has run the same seeds (one a wave), so a look could compare two configs
within each seed instead of across seeds. Where runs that share a seed share part of its effect
(correlation rho of two configs' seed effects), a difference within seeds has variance
2 sigma^2 (1 - rho) / n instead of 2 sigma^2 / n, but the variance is then estimated on fewer
degrees of freedom, so the look's critical value grows. This prints, for the race's looks, the
correlation a blocked analysis needs before its intervals are narrower than the unpaired ones the
race uses, and what a common-correlation model costs a pair whose seeds correlate less.

Three analyses of a look at ``n`` seeds with ``a`` configs still in, each Hsu's one-sided
comparisons with the best at the race's calibrated level (``analysis.decisions.race.boundary.boundary``, 9
configs, 5 seeds, alpha 0.05), equal seed counts:
- unpaired (the race's rule): the pooled variance on a (n - 1) df;
- paired, pair by pair: each pair's within-seed differences, on n - 1 df (valid whatever each
  pair's correlation);
- blocked, one model: configs + seeds additive, the residual on (a - 1)(n - 1) df (valid only
  where every pair's seed effects correlate alike).
A blocked analysis's interval is narrower than the unpaired one where
(1 - rho) < (c_unpaired / c_blocked)^2, c each one's critical value: the break-even rho printed.
The half-widths are at the true variance (the critical values carry the estimate's noise).

The second table: a blocked model whose residual reflects a common correlation rho_common, used
for a pair whose own correlation is rho_pair: the one-sided level that pair's comparison really
spends at a look with many df (normal), against the level it was meant to spend.

The real runs' correlations (``bench/seed_noise.py``, 10 seeds, the tiny model on the toy task):
3e-4 ~ 1e-3 r = +0.63 (95% CI +0.00 to +0.90), 1e-4 ~ 3e-4 +0.07 (-0.59 to +0.67),
1e-4 ~ 1e-3 -0.16 (-0.72 to +0.52).

Usage: python bench/blocking_value.py [--max-seeds 5] [--configs 9]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.decisions.race.boundary import EQUAL_SEEDS, boundary  # noqa: E402
from analysis.stats.critical import mcb_critical  # noqa: E402


def critical(alive: int, df: float, level: float) -> float:
    """Hsu's critical value among ``alive`` configs of equal seed counts on ``df`` df."""
    return mcb_critical((EQUAL_SEEDS,) * (alive - 1), df, level)


def spent(level: float, rho_common: float, rho_pair: float) -> float:
    """The one-sided level a pair of correlation ``rho_pair`` spends where the model's variance
    is that of ``rho_common`` (many df: normal)."""
    z = stats.norm.isf(level)
    return float(stats.norm.sf(z * math.sqrt((1 - rho_common) / (1 - rho_pair))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seeds", type=int, default=5)
    parser.add_argument("--configs", type=int, default=9)
    args = parser.parse_args()
    level = boundary(args.configs, args.max_seeds, 0.05, True).level
    print(f"The race's level a look: {level:.4f} ({args.configs} configs, {args.max_seeds} seeds, "
          "alpha 0.05)\n")
    print("| configs still in | seeds | c unpaired (df) | c paired (df) | c blocked (df) | "
          "break-even rho, paired | break-even rho, blocked |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for alive in sorted({2, 3, 5, args.configs}):
        for n in range(2, args.max_seeds + 1):
            unpaired = critical(alive, alive * (n - 1), level)
            paired = critical(alive, n - 1, level)
            blocked = critical(alive, (alive - 1) * (n - 1), level)
            print(f"| {alive} | {n} | {unpaired:.2f} ({alive * (n - 1)}) | {paired:.2f} ({n - 1}) | "
                  f"{blocked:.2f} ({(alive - 1) * (n - 1)}) | {1 - (unpaired / paired) ** 2:+.2f} | "
                  f"{1 - (unpaired / blocked) ** 2:+.2f} |")
    print(f"\nA blocked model with one correlation, used for a pair that correlates less "
          f"(meant: {level:.4f} one-sided a comparison):\n")
    print("| rho_common | rho_pair | level spent | times the level meant |")
    print("| --- | --- | --- | --- |")
    for rho_common, rho_pair in ((0.18, 0.0), (0.3, 0.0), (0.63, 0.0), (0.63, -0.16), (0.63, 0.3)):
        used = spent(level, rho_common, rho_pair)
        print(f"| {rho_common:+.2f} | {rho_pair:+.2f} | {used:.4f} | {used / level:.1f}x |")


if __name__ == "__main__":
    main()
