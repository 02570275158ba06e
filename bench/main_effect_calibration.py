"""Main effects where seed variances differ (issue 59, item 2), through the real code
(``analysis.stats.effects.main_effects``, the report's "Main effects" section and
``main_effects.csv``, on the sweep's pooled seed variance, ``SeedVariance.pooled``): how often a
term's F test has p < 5%, under two rules for the df of its error term: the analysis (the F
against the pool on Satterthwaite's df of the pool, ``analysis.stats.critical.pooled_df``:
Brown and Forsythe's test) and the same F on the pool's summed df (the rule before issue 59).
Where the sweep is a pair of configs, the pair verdict of the comparisons on the same sweeps
(``compare_pair``: better or worse) beside them.

Designs (each config's runs drawn independently, N(mean, sd)):

- ``review``: the review's case: 2 configs of equal mean, seed sd 0.04 and 0.001 (one of them near
  a floor), at 2, 3 and 5 seeds. False: the key called significant.
- ``pair, one better``: 2 configs of one seed sd, one better by 2.5 sd (2 and 3 seeds) or 2 sd
  (5 seeds): the power the rule costs where the spread is equal.
- ``one key of 9``: 9 levels of equal mean, 3 of them at 0.3x the others' seed sd; ``one key of
  3``: 3 levels of equal mean, one at 10x the others' seed sd (the key's numerator is then
  nearly one config's: fewer effective df than its 2, which the analysis does not correct).
- ``3x3``: a grid of two keys of 3 levels, equal means; the first key's level 0 at 0.3x the
  others' seed sd, or all equal; and the power: all equal spread but the first key's levels 0,
  -s and -2s seed sd apart (s 1 at 2 seeds, 0.7 at 3).

Each cell: the share of sweeps whose term has p < 5% ± its Monte Carlo error (binomial), the
analysis / the summed df (/ the pair verdict). Goal: false <= 5% + the Monte Carlo error wherever
the pair verdict holds; the power where spreads are equal: ``bench/main_effect_power.py``.

Usage: python bench/main_effect_calibration.py [--sweeps 2000] [--only NAME ...]
(the review rows run twice ``--sweeps``.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import Cells, grid_sweep, rate  # noqa: E402

from analysis.stats.comparisons import compare_pair  # noqa: E402
from analysis.stats.critical import pooled_df  # noqa: E402
from analysis.stats.effects import main_effects  # noqa: E402
from analysis.stats.levels import ALPHA  # noqa: E402
from analysis.stats.variance import SeedVariance  # noqa: E402


def rates(cells: Cells, n: int, sweeps: int, step: float, seed: int) -> str:
    """Each term's share of sweeps with p < 5% (module docstring) over ``sweeps`` sweeps of ``n``
    seeds a config, a config's mean ``step`` times its first key's level below 0."""
    keys = [f"k{i}" for i in range(len(cells[0][0]))]
    rng = np.random.default_rng(seed)
    found: dict[str, tuple[list[bool], ...]] = {}
    for _ in range(sweeps):
        configs, frame = grid_sweep(cells, n, step, rng)
        pooled = SeedVariance.pooled(configs)
        effects = main_effects(frame, keys, pooled, replicated=True)
        pair = ([compare_pair(*configs, "best", None, pooled, 2, ALPHA).verdict in ("better", "worse")]
                if len(configs) == 2 else [])
        variances = [float(np.var(c.seed_values, ddof=1)) for c in configs]
        before = float(pooled_df(variances, [c.n_seeds - 1 for c in configs]))
        for term in effects.terms:  # the same F; before: on (its df, the pool's Satterthwaite df)
            got = [term.p < ALPHA, float(special.fdtrc(term.df, before, term.f)) < ALPHA,
                   float(special.fdtrc(term.df, pooled.df, term.f)) < ALPHA, *pair]
            for rule, hit in zip(found.setdefault(term.name, tuple([] for _ in got)), got, strict=True):
                rule.append(hit)
    return "; ".join(f"{name}: " + " / ".join(rate(r) for r in rules) for name, rules in found.items())


def designs() -> list[tuple[str, Cells, list[tuple[int, float]], int]]:
    """Each row: (name, cells, (seeds a config, step) for each row, sweeps multiplier)."""
    grid = [(a, b) for a in range(3) for b in range(3)]
    null = [(2, 0.0), (3, 0.0)]
    return [
        ("review: 2 configs, seed sd 0.04 and 0.001", [((0,), 0.04), ((1,), 0.001)],
         [(2, 0.0), (3, 0.0), (5, 0.0)], 2),
        ("pair, one better by 2.5 / 2.5 / 2 sd", [((0,), 1.0), ((1,), 1.0)],
         [(2, 2.5), (3, 2.5), (5, 2.0)], 1),
        ("one key of 9, 3 at 0.3x", [((i,), 0.3 if i < 3 else 1.0) for i in range(9)], null, 1),
        *((f"one key of 3, one at {r:g}x", [((i,), r if i == 0 else 1.0) for i in range(3)],
           [(2, 0.0), (3, 0.0), (5, 0.0)], 2) for r in (10.0, 4.0, 2.0, 100.0)),
        ("one key of 3, one at 0.1x", [((i,), 0.1 if i == 0 else 1.0) for i in range(3)],
         [(2, 0.0), (3, 0.0), (5, 0.0)], 1),
        ("one key of 3, power: one level 3 / 2.5 / 2 sd apart", [((i,), 1.0) for i in range(3)],
         [(2, 3.0 / 2), (3, 2.5 / 2), (5, 2.0 / 2)], 1),
        ("3x3, the first key's level 0 at 0.3x", [(c, 0.3 if c[0] == 0 else 1.0) for c in grid],
         null, 1),
        ("3x3, all equal", [(c, 1.0) for c in grid], null, 1),
        ("3x3, power: the first key's levels 1 / 0.7 sd apart", [(c, 1.0) for c in grid],
         [(2, 1.0), (3, 0.7)], 1),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=2000)
    parser.add_argument("--only", nargs="*", default=(), help="the rows whose design starts so")
    args = parser.parse_args()
    print(f"{args.sweeps} sweeps a row (the review's rows {2 * args.sweeps}); each cell: the share "
          "of sweeps whose term has p < 5%, the analysis (Satterthwaite's df) / the pool's summed "
          "df (before) / the pair verdict (2 configs)\n")
    print("| design | seeds a config | each term: p < 5% |")
    print("| --- | --- | --- |")
    for name, cells, rows, times in designs():
        if args.only and not name.startswith(tuple(args.only)):
            continue
        for n, step in rows:
            start = time.time()
            print(f"| {name} | {n} | {rates(cells, n, times * args.sweeps, step, 100 * n + len(name))} |",
                  flush=True)
            print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
