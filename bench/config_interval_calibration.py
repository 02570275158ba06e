"""A config's own 95% interval (issue 59, item 1), through the real code
(``analysis.stats.comparisons.estimate``, the interval of the report's "Best:" line and table, the
summary, ``promote`` and the chain): how often it holds the config's true mean, config by config,
where the configs' seed variances differ, under three rules for the seed variance it rests on
(``estimate``'s ``variance_rule``, given here for the others): the analysis (the larger of the sweep's pooled
variance and the config's own, on the config's own n - 1 df); the sweep's pool alone (the rule
before issue 59); the config's own seeds alone on n - 1 df (the sweep's pool where they all gave
one value); the larger of the two each on its own df (the pool's where it is the larger).

Designs (each config's runs drawn independently, the sweep's variance pooled as the analysis pools
it, ``SeedVariance.pooled``; the truth each config's expected value):

- ``real-run seed sds``: the seed sds the real CPU runs measured (``bench/seed_noise.py``: 0.040,
  0.125 and 0.214) beside two configs at a floor of seed sd 0.001, means 0.4 (and 0.2, 0.05 for the
  floors); ``rounded``: the same rounded to the toy task's 0.04 grid with the two floors at one
  value on every seed, as ``bench/unequal_variance_calibration.py`` draws them (the truth: the
  rounded draw's mean, by 4 million draws).
- ``bench/unequal_variance_calibration.py``'s designs: ``floor`` (two learning configs of seed sd
  0.06 or 0.125 on the 0.04 grid beside a floor), ``learning-rate`` (6 configs of sd 1 and 3 of sd
  0.3), ``pair`` (sd 0.04 and 0.001), ``equal`` (9 configs of sd 1).
- ``problems``: per-problem outcomes (the problem variance's terms of the interval): 3 configs x
  200 problems of difficulty U(0.1, 0.9), each run answering problem i right with probability
  q_i + a_s, a_s ~ N(0, sd) (sd 0.01, 0.01 and 0.06), clipped to [0, 1]; the truth a config's
  expected reward over a fresh draw of problems and seeds (by 4 million draws). And
  ``selection_calibration.py``'s ``3 configs x 3 seeds`` at one sd (1.5 and 3 points, 1024
  problems) in the same form.

Each cell: the share of sweeps whose interval holds the truth ± its Monte Carlo error, and the
interval's mean half-width. Goal: >= 94% for every config of every design.

Usage: python bench/config_interval_calibration.py [--sweeps 4000] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import rate  # noqa: E402

from analysis.stats.comparisons import config_variance, estimate, problem_error  # noqa: E402
from analysis.stats.variance import IDENTICAL, ConfigData, SeedVariance  # noqa: E402

Draw = Callable[[np.random.Generator, int], list[ConfigData]]
GRID = 25
"""The toy task's reward grid (25 problems: 0.04)."""


def normal(means: list[float], sds: list[float], rounded: bool = False) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> list[ConfigData]:
        values = [rng.normal(m, s, n) for m, s in zip(means, sds, strict=True)]
        return [ConfigData(f"c{i}", np.round(v * GRID) / GRID if rounded else v)
                for i, (v, s) in enumerate(zip(values, sds, strict=True))]
    return draw


def normal_truth(means: list[float], sds: list[float], rounded: bool = False) -> list[float]:
    """Each config's expected value: its mean, or the mean of its rounded draw."""
    rng = np.random.default_rng(7)
    return [float(np.mean(np.round(rng.normal(m, s, 4_000_000) * GRID) / GRID))
            if rounded else m for m, s in zip(means, sds, strict=True)]


def problems(sds: list[float], n_problems: int) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> list[ConfigData]:
        q = rng.uniform(0.1, 0.9, n_problems)  # one draw of problems, shared by every config
        configs = []
        for i, sd in enumerate(sds):
            p = np.clip(q[None, :] + rng.normal(0, sd, (n, 1)), 0, 1)
            outcomes = (rng.random((n, n_problems)) < p).astype(float)
            configs.append(ConfigData(f"c{i}", outcomes.mean(axis=1), outcomes, "d"))
        return configs
    return draw


def problems_truth(sds: list[float]) -> list[float]:
    rng = np.random.default_rng(7)
    return [float(np.mean(np.clip(rng.uniform(0.1, 0.9, 4_000_000) + rng.normal(0, sd, 4_000_000),
                                  0, 1))) for sd in sds]


def designs() -> list[tuple[str, int, Draw, list[float], list[float]]]:
    """Each row: (name, seeds a config, the draw, each config's truth, each config's seed sd),
    in reward units (the other bench's normal designs scaled by 0.01 about 0.5: a coverage does
    not depend on the scale)."""
    rows: list[tuple[str, int, Draw, list[float], list[float]]] = []

    def add(name: str, seeds: tuple[int, ...], means: list[float], sds: list[float],
            rounded: bool = False) -> None:
        rows.extend((name, n, normal(means, sds, rounded), normal_truth(means, sds, rounded), sds)
                    for n in seeds)

    real_means = [0.4, 0.4, 0.4, 0.2, 0.05]
    add("real-run seed sds", (2, 3, 5), real_means, [0.04, 0.125, 0.214, 0.001, 0.001])
    add("real-run seed sds, rounded", (3, 5), real_means, [0.04, 0.125, 0.214, 0.0, 0.0], True)
    for sd in (0.06, 0.125):
        add(f"floor, sd {sd:g}", (3, 5), [0.5, 0.5, 0.0], [sd, sd, 0.0], True)
    add("learning-rate", (2, 3, 5), [0.5] * 6 + [0.1] * 3, [0.01] * 6 + [0.003] * 3)
    add("pair, sd 0.04 and 0.001", (2, 3, 5), [0.5, 0.5], [0.04, 0.001])
    add("equal", (2, 3), [0.5] * 9, [0.01] * 9)
    for sds, count in (([0.01, 0.01, 0.06], 200), ([0.015] * 3, 1024), ([0.03] * 3, 1024)):
        name = (f"problems, sds {', '.join(f'{s:g}' for s in sds)}" if count == 200 else
                f"3 configs x 3 seeds, {sds[0] * 100:g} points, {count} problems")
        rows.extend((name, n, problems(sds, count), problems_truth(sds), sds)
                    for n in ((2, 3) if count == 200 else (3,)))
    return rows


def own_alone(config: ConfigData, seeds: SeedVariance) -> tuple[float, float]:
    """The config's own seeds alone on n - 1 df; the sweep's pool where they gave one value."""
    if config.n_seeds > 1:
        own = float(np.var(config.seed_values, ddof=1))
        if own > IDENTICAL:
            return own, float(config.n_seeds - 1)
    return seeds.variance, float(seeds.df)


def larger_on_its_df(config: ConfigData, seeds: SeedVariance) -> tuple[float, float]:
    """The larger of the pool and the config's own, each on its df (the pool's where it is the
    larger): the rule measured first and rejected."""
    if config.n_seeds > 1:
        own = float(np.var(config.seed_values, ddof=1))
        if own > seeds.variance:
            return own, float(config.n_seeds - 1)
    return seeds.variance, float(seeds.df)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=4000)
    parser.add_argument("--only", nargs="*", default=(), help="the rows whose design starts so")
    args = parser.parse_args()
    rules = {"analysis": config_variance,
             "pool": lambda config, seeds: (seeds.variance, float(seeds.df)),
             "own": own_alone, "larger, each on its df": larger_on_its_df}
    print(f"{args.sweeps} sweeps a row; each config: the share of sweeps whose 95% interval holds "
          "its true mean (mean half-width): the analysis (the larger of pool and own, on the "
          "config's n - 1 df) / the pool alone / the config's own seeds alone / the larger, each "
          "on its df (no interval, where no seed varies: not held)\n")
    print("| design | seeds a config | config (true mean, seed sd) | analysis | pool | own | larger, each on its df |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, n, draw, truth, sds in designs():
        if args.only and not name.startswith(tuple(args.only)):
            continue
        start = time.time()
        cells = []
        for rule in rules.values():
            rng = np.random.default_rng(n * 1000 + len(name))
            held: list[list[bool]] = [[] for _ in truth]
            widths: list[list[float]] = [[] for _ in truth]
            for _ in range(args.sweeps):
                configs = draw(rng, n)
                seeds, error = SeedVariance.pooled(configs), problem_error(configs)
                for i, c in enumerate(configs):
                    e = estimate(c, seeds, error, rule)
                    held[i].append(bool(e.lo <= truth[i] <= e.hi))
                    widths[i].append((e.hi - e.lo) / 2)
            cells.append((held, widths))
        for i, (t, sd) in enumerate(zip(truth, sds, strict=True)):
            shown = [f"{rate(held[i])} ({np.nanmean(widths[i]):.3g})" for held, widths in cells]
            print(f"| {name} | {n} | c{i} ({t:.3f}, {sd:g}) | {' | '.join(shown)} |", flush=True)
        print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
