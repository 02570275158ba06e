"""The set of configs that could still be the best, calibrated (issue 45, item 1): how often it
misses a truly best config in its least favourable case (every config equal: each is a best
one), and its half-width, for Hsu's comparisons with the best (what the analysis uses) against
the Tukey deduction it replaced, through the real code (analysis.stats.comparisons.compare_sweep on
each simulated sweep's values; Tukey's set: the configs whose Tukey-Kramer comparison with the
observed best is not "worse").

Each simulated sweep: k configs, each config's runs drawn N(0, 1) (the seed noise; the scale does
not matter), the seed variance pooled over the configs (df = runs - k). Designs: equal seeds, and
unequal seeds (half the configs with one more), where Hsu's critical values differ per config.

``--printed`` (issue 52, item 12): what the report prints of a config out of the set
(``BestBound.describe``, parsed from its text: its mean minus the largest of the others' is in
[lower, 0]) against the truth, simultaneously: the share of sweeps where any printed statement is
false, beside the former print (the unconstrained upper bound, negative, as "at most"). Designs:
all equal; means 0.5 seed sd apart (0, -0.5, ..., -4); one config 3 sd better; 9 configs x 3
seeds and 2 or 3 seeds.

Usage: python bench/near_tie_calibration.py [--sweeps 4000] [--k 9] [--printed]
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from monte_carlo import rate  # noqa: E402

from analysis.stats.comparisons import compare_sweep  # noqa: E402
from analysis.stats.critical import mcb_critical, tukey_critical  # noqa: E402
from analysis.stats.variance import ConfigData, SeedVariance  # noqa: E402


def one_sweep(rng: np.random.Generator, seeds: list[int]) -> tuple[bool, bool]:
    """(Hsu's set misses config 0, Tukey's set misses config 0) for one all-equal sweep."""
    configs = [ConfigData(f"c{i}", rng.normal(0.0, 1.0, n)) for i, n in enumerate(seeds)]
    variance = SeedVariance.pooled(configs)
    ranked = sorted(configs, key=lambda c: -c.mean)
    u = compare_sweep(ranked, ranked[0].label, {}, 10, variance)
    tukey = [ranked[0].label] + [c.config for c in u.against_best() if c.verdict != "worse"]
    return "c0" not in u.could_be_best, "c0" not in tukey


PRINTED = re.compile(r"is in \[([+-][0-9.]+), 0\]")


def printed_false(rng: np.random.Generator, means: list[float], seeds: list[int]) -> tuple[bool, bool]:
    """(a statement printed of a config out of the set is false, the former print's is false)
    for one sweep of configs N(mean, 1): the truth of config i is mean_i - max_{j != i} mean_j."""
    configs = [ConfigData(f"c{i}", rng.normal(m, 1.0, n))
               for i, (m, n) in enumerate(zip(means, seeds, strict=True))]
    ranked = sorted(configs, key=lambda c: -c.mean)
    u = compare_sweep(ranked, ranked[0].label, {}, 10, SeedVariance.pooled(configs))
    now = former = False
    for i, m in enumerate(means):
        label = f"c{i}"
        if label in u.could_be_best:
            continue
        truth = m - max(means[:i] + means[i + 1:])
        found = PRINTED.search(u.why_out(label))
        lower = float(found.group(1)) if found else -math.inf
        now |= not lower <= truth <= 0
        former |= truth > u.bounds[label].upper
    return now, former


def printed_table(sweeps: int, k: int) -> None:
    """The ``--printed`` table (module docstring)."""
    print(f"{sweeps} sweeps a design; a false print: for some config out of the set, its mean "
          "minus the largest other's is outside what is printed (goal <= 5%)\n")
    print("| design | seeds a config | printed now ([lower, 0]) false | the former print "
          "(upper bound, negative) false |")
    print("| --- | --- | --- | --- |")
    for name, means in (("all equal", [0.0] * k), ("0.5 sd apart", [-0.5 * i for i in range(k)]),
                        ("one 3 sd better", [3.0] + [0.0] * (k - 1))):
        for seeds_name, seeds in (("3", [3] * k), ("2 or 3", [2 + (i % 2) for i in range(k)])):
            start = time.time()
            rng = np.random.default_rng(len(name) * 10 + sum(seeds))
            rows = [printed_false(rng, means, seeds) for _ in range(sweeps)]
            print(f"| {k} configs, {name} | {seeds_name} | {rate([r[0] for r in rows])} | "
                  f"{rate([r[1] for r in rows])} |", flush=True)
            print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=4000)
    parser.add_argument("--k", type=int, default=9)
    parser.add_argument("--printed", action="store_true", help="only the --printed table")
    args = parser.parse_args()
    k = args.k
    if args.printed:
        printed_table(args.sweeps, k)
        return
    designs = {f"{k} configs x 2 seeds": [2] * k, f"{k} configs x 3 seeds": [3] * k,
               f"{k} configs, 2 or 3 seeds": [2 + (i % 2) for i in range(k)]}
    print(f"{args.sweeps} all-equal sweeps a design (the least favourable case: every config is "
          "a best one); a miss: config 0 is not in the set (goal <= 5%)\n")
    print("| design | df | Hsu's critical value (equal seeds) | Tukey's | half-width ratio | "
          "Hsu misses a best config | Tukey's deduction misses it |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, seeds in designs.items():
        start = time.time()
        rng = np.random.default_rng(sum(seeds))
        results = [one_sweep(rng, seeds) for _ in range(args.sweeps)]
        df = float(sum(seeds) - k)
        hsu = mcb_critical((round(math.sqrt(0.5), 6),) * (k - 1), df)
        tukey = tukey_critical(k, df)
        print(f"| {name} | {df:g} | {hsu:.2f} | {tukey:.2f} | {hsu / tukey:.2f} | "
              f"{rate([r[0] for r in results], digits=2)} | "
              f"{rate([r[1] for r in results], digits=2)} |", flush=True)
        print(f"  ({time.time() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
