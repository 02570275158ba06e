"""Main effects of one key whose levels differ in seed spread (issue 59, remaining item 1): a
numpy-vectorised copy of the one-key F test ``analysis.stats.effects.main_effects`` makes on
the sweep's own seeds (balanced, no floor), checked against it p-value for p-value on the first
``--check`` sweeps of every row, so that many sweeps fit on 2 shared cores
(``bench/main_effect_calibration.py`` runs the real code on fewer).

The test, as the analysis makes it: F = the key's mean square over the pooled seed variance, on
Box's numerator df (Mehrotra's form for one key: ``analysis.stats.critical.mehrotra_df`` of the
levels' sample variances, rounded down to a tenth, at most levels - 1) and the denominator df
``analysis.stats.critical.anova_df`` (Satterthwaite's df of the pool shrunk towards one config's).
Before: the same F on (levels - 1, Satterthwaite's df unshrunk), the rule at main before these
items.

Designs: levels of equal mean, level 0 at ``ratio`` times the others' seed sd (ratios 1, 2, 4,
10, 100 and 0.1); the power: equal spread, the levels' means 0, -s, -2s (s 1.5, 1.25, 1 sd at 2,
3, 5 seeds, as ``bench/main_effect_calibration.py``'s power row).

Usage: python bench/main_effect_ratio_scan.py [--sweeps 40000] [--check 30]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.stats.critical import anova_df, mehrotra_df, pooled_df  # noqa: E402
from analysis.stats.effects import VALUE, main_effects  # noqa: E402
from analysis.stats.levels import ALPHA  # noqa: E402
from analysis.stats.variance import ConfigData, SeedVariance  # noqa: E402


def tenth(x: np.ndarray) -> np.ndarray:
    """Rounded down to a tenth, as the analysis rounds its df."""
    return np.floor(np.round(10 * np.asarray(x, dtype=float), 6)) / 10


def p_values(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the analysis's p, the p before) of each sweep of ``y`` (sweeps, levels, seeds)."""
    _, levels, n = y.shape
    means, s2 = y.mean(axis=2), y.var(axis=2, ddof=1)
    f = n * ((means - means.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) / (levels - 1) / s2.mean(axis=1)
    nu = np.full(levels, n - 1.0)
    box = np.minimum(tenth(mehrotra_df(s2)), levels - 1)
    return special.fdtrc(box, anova_df(s2, nu), f), special.fdtrc(levels - 1, pooled_df(s2, nu), f)


def check(y: np.ndarray) -> None:
    """Each sweep's p equal to ``main_effects``' on the same values (or raise)."""
    mine, _ = p_values(y)
    for sweep, p in zip(y, mine, strict=True):
        frame = pd.DataFrame([{"k": str(i), VALUE: v} for i, row in enumerate(sweep) for v in row])
        pooled = SeedVariance.pooled([ConfigData(str(i), row) for i, row in enumerate(sweep)])
        (term,) = main_effects(frame, ["k"], pooled, replicated=True).terms
        if not math.isclose(term.p, float(p), rel_tol=1e-6, abs_tol=1e-12):
            raise SystemExit(f"the copy's p {p} is not the analysis's {term.p}: fix the copy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=40000)
    parser.add_argument("--check", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(59)
    print(f"{args.sweeps} sweeps a cell; p < 5%: the analysis / before (± the Monte Carlo error "
          f"{100 * math.sqrt(0.05 * 0.95 / args.sweeps):.2f} at 5%)\n")
    print("| levels | level 0's seed sd / the others' | 2 seeds | 3 seeds | 5 seeds |")
    print("| --- | --- | --- | --- | --- |")
    rows = [(3, r, 0.0) for r in (1.0, 2.0, 4.0, 10.0, 100.0, 0.1)] + [(9, 10.0, 0.0), (2, 10.0, 0.0)]
    for levels, ratio, _ in rows + [(3, 1.0, math.nan)]:
        cells = []
        for n in (2, 3, 5):
            step = {2: 1.5, 3: 1.25, 5: 1.0}[n] if math.isnan(_) else 0.0
            sds = np.where(np.arange(levels) == 0, ratio, 1.0)
            y = (-step * np.arange(levels)[None, :, None]
                 + sds[None, :, None] * rng.standard_normal((args.sweeps, levels, n)))
            check(y[:args.check])
            now, before = p_values(y)
            cells.append(f"{100 * np.mean(now < ALPHA):.2f}% / {100 * np.mean(before < ALPHA):.2f}%")
        name = f"{ratio:g}" + (" (power: means 0, -s, -2s)" if math.isnan(_) else "")
        print(f"| {levels} | {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
