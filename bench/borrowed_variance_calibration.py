"""A borrowed seed variance where the source ran other settings (issue 45, item 3), through the
real code: how often a one-seed stage (the chain's baselines, normalization or prompt study: k
configs, one seed each, nothing in the stage to measure the seed variance with) calls equal
configs different, with the source's variance taken as it is against inflated to its upper 95%
confidence bound (``analysis.stats.variance.upper_bound_factor``: what the analysis does where the
stage's configs ran settings the source did not: another loss, normalization, learning rate or
number of off-policy epochs).

Each simulated stage: k configs, one run each, N(0, 1) (seed sd 1); the source's variance is
``ratio`` x 1 (its true variance: 1x right, 0.5x and 0.25x too small, as a learning-rate study's
variance carried into a stage that varies more) times chi2_df / df (an estimate on the source's
df). The verdicts: ``compare_pair`` on every pair (Tukey-Kramer over the k configs). Power: one
config 3 seed sd better, called better than each other config.

The second table is a one-seed 3x3 grid, whose additive residual (4 df, ``analysis.stats.effects``)
can be set against the borrowed variance (10 df, taken as it is): the seed variance the analysis
uses (``analysis.stats.sources.seed_variance``: pooled only where an F test with the power to see a
2x difference finds them in agreement, the larger where it rejects, else the residual alone)
against the former rule (pooled wherever the F test does not reject), the residual alone and the
larger of the two on its own df (what the explanation page once said for "not shown to agree").

The third table: the same one-seed stages with check seeds, a second seed of the last 1 or 2
configs (``analysis.stats.variance.check``, through ``seed_variance`` as the report calls it): the
borrowed variance, inflated, is tested against the check seeds' own and replaced by it where the
one-sided F test finds the stage's variance larger; against the inflated variance alone on the
same stages (common random numbers). Power: the first config 3 seed sd better (the check seeds
go to others).

Usage: python bench/borrowed_variance_calibration.py [--stages 4000] [--grid-stages 1000]
       [--grid-only] [--checks-only]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import rate  # noqa: E402

from analysis.stats.comparisons import compare_pair  # noqa: E402
from analysis.stats.effects import VALUE, additive_variance  # noqa: E402
from analysis.stats.levels import ALPHA  # noqa: E402
from analysis.stats.sources import seed_variance  # noqa: E402
from analysis.stats.variance import ConfigData, SeedVariance, lent, upper_bound_factor  # noqa: E402

GRID_KEYS = ("k0", "k1")
GRID_STEP = 3.0
"""The power rows' truth: the first key's levels 0, -3 and -6 seed sds (an additive truth: the
grid's residual holds no interaction)."""


def called(configs: list[ConfigData], variance: SeedVariance) -> list[tuple[str, str, str]]:
    """Every pair's verdict (a, b, verdict)."""
    return [(a.label, b.label, compare_pair(a, b, "best", 10, variance, len(configs), ALPHA).verdict)
            for a, b in itertools.combinations(configs, 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=4000)
    parser.add_argument("--grid-stages", type=int, default=1000)
    parser.add_argument("--grid-only", action="store_true", help="only the 3x3 grid's table")
    parser.add_argument("--checks-only", action="store_true", help="only the check seeds' table")
    args = parser.parse_args()
    if args.grid_only:
        grid(args.grid_stages)
        return
    if args.checks_only:
        checked(args.stages)
        return
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
    grid(args.grid_stages)
    checked(args.stages)


def checked(stages: int) -> None:
    """The check seeds' table (module docstring)."""
    print(f"\n{stages} simulated one-seed stages a row, the borrowed variance inflated to its upper "
          "95% bound; each cell: alone / with the check seeds (a second seed of the last configs):\n")
    print("| configs in the stage | check seeds (extra runs) | source df | borrowed / true variance | "
          "false verdicts (all equal) | one 3 sd better called better than each | "
          "check finds the borrowed too small |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for k, m, df, ratio in [(k, m, df, ratio) for k, m in ((2, 1), (4, 1), (4, 2))
                            for df in (6, 10) for ratio in (1.0, 0.5, 0.25)]:
        rng = np.random.default_rng(int(1000 * ratio) + 100 * m + 10 * k + df)
        false: dict[str, list[bool]] = {"alone": [], "checked": []}
        power: dict[str, list[bool]] = {"alone": [], "checked": []}
        switched = []
        for _ in range(stages):
            source = SeedVariance(ratio * float(rng.chisquare(df)) / df, df, "seeds", "simulated")
            borrowed = lent(source, "simulated", ["a setting the source did not run"])
            for shift, out in ((0.0, false), (3.0, power)):
                values = rng.normal(0.0, 1.0, (2, k)) + np.where(np.arange(k) == 0, shift, 0.0)
                alone = [ConfigData(f"c{i}", values[:1, i]) for i in range(k)]
                seeds = [ConfigData(f"c{i}", values[:1 + (i >= k - m), i]) for i in range(k)]
                variance = seed_variance(seeds, pd.DataFrame(), ("k0",), borrowed)
                if shift == 0.0:
                    switched.append(variance.source == "seeds")
                for rule, configs, used in (("alone", alone, borrowed), ("checked", seeds, variance)):
                    verdicts = called(configs, used)
                    out[rule].append(any(v != "not distinguishable" for *_, v in verdicts) if shift == 0
                                     else all(v == "better" for a, _, v in verdicts if a == "c0"))
        cells = [" / ".join(rate(d[r]) for r in d) for d in (false, power)]
        print(f"| {k} | {m} | {df} | {ratio:g} | {cells[0]} | {cells[1]} | {rate(switched)} |",
              flush=True)


def former(additive: SeedVariance, borrowed: SeedVariance) -> SeedVariance:
    """The former rule: pooled by df wherever the two-sided F test does not reject at 5%."""
    below = float(special.fdtr(additive.df, borrowed.df, additive.variance / borrowed.variance))
    if 2 * min(below, 1 - below) < ALPHA:
        return max((additive, borrowed), key=lambda v: v.variance)
    df = additive.df + borrowed.df
    return SeedVariance((additive.df * additive.variance + borrowed.df * borrowed.variance) / df,
                        df, "additive+borrowed", "pooled")


def grid(stages: int) -> None:
    """The 3x3 one-seed grid's table (module docstring)."""
    print(f"\n{stages} simulated 3x3 one-seed grids a row (additive residual on 4 df, a borrowed "
          "variance on 10 df taken as it is); false verdicts with all 9 equal, and the power: the "
          f"share of truly different pairs called (the first key's levels 0, -{GRID_STEP:g}, "
          f"-{2 * GRID_STEP:g} sd):\n")
    print("| borrowed / true variance | now: false | former rule: false | residual alone: false "
          "| larger of the two: false | now: power | former rule: power | residual alone: power "
          "| larger of the two: power |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    cells = [(a, b) for a in range(3) for b in range(3)]
    for ratio in (1.0, 0.5, 0.25):
        rng = np.random.default_rng(int(100 * ratio) + 7)
        false: dict[str, list[bool]] = {"now": [], "former": [], "alone": [], "larger": []}
        power: dict[str, list[float]] = {"now": [], "former": [], "alone": [], "larger": []}
        for _ in range(stages):
            borrowed = SeedVariance(ratio * float(rng.chisquare(10)) / 10, 10, "borrowed", "simulated")
            for step, out in ((0.0, false), (GRID_STEP, power)):
                truth = np.array([-step * a for a, _ in cells])
                values = rng.normal(0.0, 1.0, len(cells)) + truth
                configs = [ConfigData(f"c{i}", values[i:i + 1]) for i in range(len(cells))]
                frame = pd.DataFrame([{"k0": str(a), "k1": str(b), VALUE: v}
                                      for (a, b), v in zip(cells, values, strict=True)])
                additive = additive_variance(frame, GRID_KEYS)
                larger = max((additive, borrowed), key=lambda v: v.variance)
                for rule, variance in (("now", seed_variance(configs, frame, GRID_KEYS, borrowed)),
                                       ("former", former(additive, borrowed)), ("alone", additive),
                                       ("larger", larger)):
                    verdicts = called(configs, variance)
                    if step == 0:
                        out[rule].append(any(v != "not distinguishable" for *_, v in verdicts))
                        continue
                    right = [v == ("better" if truth[int(a[1:])] > truth[int(b[1:])] else "worse")
                             for a, b, v in verdicts if truth[int(a[1:])] != truth[int(b[1:])]]
                    out[rule].append(float(np.mean(right)))
        print(f"| {ratio:g} | " + " | ".join(rate(false[r]) for r in false) + " | "
              + " | ".join(f"{100 * np.mean(power[r]):.1f}%" for r in power) + " |", flush=True)


if __name__ == "__main__":
    main()
