"""Verdicts when seed variances differ (issue 45, item 2; issue 52, item 13), through the real
code: how often ``analysis.stats.comparisons`` calls equal configs different, misses a truly best
config, and detects a real difference, under three rules for a pair's variance
(``pair_variance`` patched here for the other two): the analysis (the larger of the sweep's pool
and the pair's own, Welch's on the Welch-Satterthwaite df); the pair's own pooled over the two on
n_a + n_b - 2 df (the rule before issue 52, ``pooled_pair``); and the sweep's pool alone (the
rule before issue 45).

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
- ``pair``: issue 52's case: 2 equal configs (mean 0), seed sd 0.04 and 0.001 (one of them near a
  floor); ``3 configs``: beside them a third equal one of sd 0.001 (or 0.04). False: any pair
  called different; miss: config 0 (sd 0.04, a best one) out of Hsu's set (the narrow one is
  missed as often, by symmetry of the pair's bound).
- ``pair, one better``: the power the pair rule costs where variances are equal: 2 configs of
  seed sd 1, config 0 better by 2.5 sd with 2 and 3 seeds, 2 sd with 5 (about 80% power for the
  pool). Sharp: the worse one out of Hsu's set.

Each cell ± its Monte Carlo error (binomial). Goal: false verdicts and misses <= 5%.

``--main-effects``: the main-effects ANOVA (``analysis.stats.effects.main_effects``: each F
against the sweep's seed variance, pooled over the configs whose seeds vary where some gave one
value on every seed, a floor, on Satterthwaite's df of that pool since issue 59; its own calibration:
``bench/main_effect_calibration.py``) where seed variances differ and every mean is equal: each term's
share of sweeps with p < 5%, against one variance pooled over every config (the former rule),
the same F on that pool's Satterthwaite df ((sum nu s^2)^2 / sum nu s^4, nu = seeds - 1), and
statsmodels' heteroscedasticity-robust type II ANOVA (``anova_lm(..., robust="hc3")``), with 2
and 3 seeds a config. Designs: a one-key sweep of 9 levels, 3 of them floors (every seed one
value) or at 0.3x the others' seed sd; a 3x3 grid whose first key's level 0 is a floor or at
0.3x; one cell at 0.3x; all equal; and the power: all equal but the first key's levels 0, -s and
-2s seed sd apart (s 1 with 2 seeds, 0.7 with 3; its main effect's share found).

``--two-seeds`` (issue 59, item 5): two equal configs of 2 seeds each, seed sds 1 and r (r = 1,
2, 4, 10, 20, 100), the verdict of ``compare_pair`` on the sweep's pool: the share of sweeps it
calls them different (false), with the pair's df as ``welch_df`` gives it now (shrunk towards 1
where a config has 2 seeds) and as before (Welch-Satterthwaite, floored to a tenth), and the
power where the first is better by 4 and 8 seed sds at r = 1 (the share called better). Goal:
false <= 5% + its Monte Carlo error at every r.

Usage: python bench/unequal_variance_calibration.py [--sweeps 1000] [--only NAME ...] [--main-effects] [--two-seeds]
(``--only pair``: the rows whose design starts with ``pair``.)
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import Cells, grid_sweep, rate  # noqa: E402

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


def anova_rates(cells: Cells, sweeps: int, n: int,
                step: float = 0.0) -> str:
    """Each term's share of sweeps with p < 5% (module docstring): the analysis / one pooled
    variance / its Satterthwaite df / HC3, over ``sweeps`` sweeps of ``n`` seeds a cell, ``cells``
    each config's levels and seed sd, its mean ``step`` times its first key's level below 0."""
    import warnings

    from statsmodels.stats.anova import anova_lm

    from analysis.stats.effects import least_squares_fit, main_effects

    keys = [f"k{i}" for i in range(len(cells[0][0]))]
    rng = np.random.default_rng(len(cells) * 100 + n * 10 + int(10 * min(sd for _, sd in cells)))
    rates: dict[str, tuple[list[bool], ...]] = {}
    for _ in range(sweeps):
        configs, frame = grid_sweep(cells, n, step, rng)
        pooled = SeedVariance.pooled(configs)
        nu = np.array([c.n_seeds - 1 for c in configs])
        s2 = np.array([np.var(c.seed_values, ddof=1) for c in configs])
        satterthwaite = float((nu @ s2) ** 2 / (nu @ s2 ** 2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            robust = anova_lm(least_squares_fit(frame, keys, len(keys) > 1), typ=2,
                              robust="hc3").drop(index="Residual")["PR(>F)"]
        for term, p in zip(main_effects(frame, keys, pooled, True).terms, robust, strict=True):
            f = term.sum_sq / term.df / pooled.variance  # against the pool of every config
            found = (term.p, float(special.fdtrc(term.df, pooled.df, f)),
                     float(special.fdtrc(term.df, satterthwaite, f)), p)
            for rule, p_rule in zip(rates.setdefault(term.name, ([], [], [], [])), found, strict=True):
                rule.append(p_rule < ALPHA)
    return "; ".join(f"{name}: " + " / ".join(rate(r) for r in rules) for name, rules in rates.items())


def main_effect_table(sweeps: int) -> None:
    """The ``--main-effects`` table (module docstring)."""
    grid = [(a, b) for a in range(3) for b in range(3)]
    designs = [
        ("one key, 9 levels, 3 floors", [((i,), 0.0 if i < 3 else 1.0) for i in range(9)], 0.0),
        ("one key, 9 levels, 3 at 0.3 sd", [((i,), 0.3 if i < 3 else 1.0) for i in range(9)], 0.0),
        ("3x3, the first key's level 0 a floor", [(c, 0.0 if c[0] == 0 else 1.0) for c in grid], 0.0),
        ("3x3, the first key's level 0 at 0.3 sd", [(c, 0.3 if c[0] == 0 else 1.0) for c in grid], 0.0),
        ("3x3, one cell at 0.3 sd", [(c, 0.3 if c == (0, 0) else 1.0) for c in grid], 0.0),
        ("3x3, all equal", [(c, 1.0) for c in grid], 0.0),
        ("3x3, power: the first key's levels apart", [(c, 1.0) for c in grid], None)]
    print(f"{sweeps} sweeps a row; each cell: the share of sweeps whose term has p < 5%, the "
          "analysis / one pooled variance / its Satterthwaite df / HC3-robust\n")
    print("| design | seeds a config | each term: p < 5% |")
    print("| --- | --- | --- |")
    for name, cells, step in designs:
        for n in (2, 3):
            start = time.time()
            shift = (1.0 if n == 2 else 0.7) if step is None else step
            print(f"| {name}{f' {shift:g} sd' if step is None else ''} | {n} | "
                  f"{anova_rates(cells, sweeps, n, shift)} |", flush=True)
            print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


def unshrunk_pair(a: ConfigData, b: ConfigData, seeds: SeedVariance) -> tuple[float, float]:
    """The pair rule before issue 59, item 5: the analysis's, on Welch-Satterthwaite's df floored
    to a tenth but not shrunk where a config has 2 seeds."""
    variance, df = analysis_pair(a, b, seeds)
    if df == seeds.df and variance == seeds.variance:
        return variance, df
    var_a, var_b = (float(np.var(c.seed_values, ddof=1)) / c.n_seeds for c in (a, b))
    welch = (var_a + var_b) ** 2 / (var_a ** 2 / (a.n_seeds - 1) + var_b ** 2 / (b.n_seeds - 1))
    return variance, float(np.floor(np.round(10 * welch, 6)) / 10)


analysis_pair = comparisons.pair_variance


def two_seed_table(sweeps: int) -> None:
    """The ``--two-seeds`` table (module docstring)."""
    rules = {"now": analysis_pair, "before": unshrunk_pair}
    print(f"{sweeps} sweeps a cell; each cell: now (df shrunk) / before (Welch floored)\n")
    print("| design | seeds a config | called different (or better) |")
    print("| --- | --- | --- |")
    for r, shift in [(r, 0.0) for r in (1, 2, 4, 10, 20, 100)] + [(1, 4.0), (1, 8.0)]:
        start = time.time()
        cells = []
        for rule in rules.values():
            comparisons.pair_variance = rule
            rng = np.random.default_rng(int(100 * r + shift))
            calls = []
            for _ in range(sweeps):
                a = ConfigData("c0", rng.normal(shift, 1.0, 2))
                b = ConfigData("c1", rng.normal(0.0, r, 2))
                verdict = compare_pair(a, b, "best", 10, SeedVariance.pooled([a, b]), 2,
                                       ALPHA).verdict
                calls.append(verdict == "better" if shift else verdict in ("better", "worse"))
            cells.append(rate(calls, 2))
        comparisons.pair_variance = analysis_pair
        what = f"equal, sds 1 and {r:g}" if not shift else f"first better by {shift:g} sd, sds 1 and 1"
        print(f"| {what} | 2 | {' / '.join(cells)} |", flush=True)
        print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


def pooled_pair(a: ConfigData, b: ConfigData, seeds: SeedVariance) -> tuple[float, float]:
    """The rule before issue 52: the pair's own variance pooled over the two configs, on
    n_a + n_b - 2 df, where it is larger than the sweep's pool."""
    if a.n_seeds > 1 and b.n_seeds > 1:
        own = SeedVariance.pooled([a, b])
        if own.variance > seeds.variance:
            return own.variance, float(own.df)
    return seeds.variance, float(seeds.df)


def designs() -> list[tuple[str, int, Draw, set[str], str]]:
    """Each row: (name, seeds a config, the draw, the equal configs, the best config)."""
    rows: list[tuple[str, int, Draw, set[str], str]] = []
    for n in (3, 5):
        for sd in (0.06, 0.125):
            rows.append((f"floor, sd {sd:g}", n, floor(sd), {"a", "b"}, "a"))
    rows += [("real-run seed sds", n, real_runs, {"c0", "c1", "c2"}, "c0") for n in (3, 5)]
    lr = normal([0.0] * 6 + [-40.0] * 3, [1.0] * 6 + [0.3] * 3)
    rows += [("learning-rate", n, lr, {f"c{i}" for i in range(6)}, "c0") for n in (2, 3, 5)]
    rows += [("equal", n, normal([0.0] * 9, [1.0] * 9), {f"c{i}" for i in range(9)}, "c0")
             for n in (2, 3)]
    rows += [("one-better", n, normal([3.0] + [0.0] * 8, [1.0] * 9), set(), "c0")
             for n in (2, 3)]
    rows += [("pair, sd 0.04 and 0.001", n, normal([0.0] * 2, [0.04, 0.001]), {"c0", "c1"}, "c0")
             for n in (2, 3, 5)]
    rows += [(f"pair and a third, sds 0.04, 0.001, {third:g}", 3,
              normal([0.0] * 3, [0.04, 0.001, third]), {"c0", "c1", "c2"}, "c0")
             for third in (0.001, 0.04)]
    rows += [(f"pair, one better by {shift:g} sd", n, normal([shift, 0.0], [1.0, 1.0]), set(), "c0")
             for n, shift in ((2, 2.5), (3, 2.5), (5, 2.0))]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=1000)
    parser.add_argument("--only", nargs="*", default=(), help="the rows whose design starts so")
    parser.add_argument("--main-effects", action="store_true", help="only the ANOVA's table")
    parser.add_argument("--two-seeds", action="store_true", help="only the 2-seed pairs' table")
    args = parser.parse_args()
    if args.main_effects:
        main_effect_table(args.sweeps)
        return
    if args.two_seeds:
        two_seed_table(args.sweeps)
        return
    rules = {"analysis": comparisons.pair_variance, "pooled pair": pooled_pair,
             "pool": lambda a, b, seeds: (seeds.variance, float(seeds.df))}
    print(f"{args.sweeps} sweeps a row; each cell: the analysis (Welch) / the pair pooled on "
          "n_a + n_b - 2 df / the pool alone\n")
    print("| design | seeds a config | false verdicts among equal configs | a best config "
          "missed by Hsu's set | a sharp answer |")
    print("| --- | --- | --- | --- | --- |")
    for name, n, draw, equal, best in designs():
        if args.only and not name.startswith(tuple(args.only)):
            continue
        start = time.time()
        cells = []
        for rule in rules.values():
            comparisons.pair_variance = rule
            rng = np.random.default_rng(n * 1000 + len(name))
            cells.append([outcomes(draw(rng, n), equal, best) for _ in range(args.sweeps)])
        comparisons.pair_variance = rules["analysis"]
        columns = [" / ".join(rate([r[i] for r in rows]) for rows in cells) for i in range(3)]
        if len(equal) < 2:
            columns[0] = "-"
        if len(equal) > 2 or equal == {"c0", "c1"}:  # every config is a best one: nothing sharp
            columns[2] = "-"
        print(f"| {name} | {n} | {' | '.join(columns)} |", flush=True)
        print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
