"""Pooling the seed variance beside a floor (issue 45, item 2, the case measured on real runs):
two equal learning configs and one that sits at a floor (every seed the same value, as a
learning rate that collapses to reward 0 or does not learn), a few seeds each. Pooled with the
floor's zero squares (what `SeedVariance.pooled` does), the learning configs' variance is
understated and their comparison calls differences that are not there. The second column is a
candidate rule, the floor left out of the pool: it keeps the false verdicts under 5% but, with
few configs that vary, leaves too few degrees of freedom to tell the floor itself from the best
(a race then keeps a collapsed config to max_seeds); per-pair variances (Games-Howell/Welch) are
the fix that keeps both, not built yet.

Each simulated sweep: the two learning configs' runs ~ N(0.5, sd), rounded to a 25-problem
reward (a multiple of 0.04, as the toy task's evaluation), the floor config's all 0. Through the
real code: `compare_sweep` on the pool as the analysis makes it, and on the pool with the floor
kept (the former rule), counting sweeps where the two equal configs are called better/worse
(Tukey-Kramer, 95%; goal <= 5%).

Usage: python bench/floor_pool_calibration.py [--sweeps 4000]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.uncertainty import ConfigData, SeedVariance, compare_sweep  # noqa: E402


def false_verdict(configs: list[ConfigData], variance: SeedVariance) -> bool:
    """Whether the two learning configs (a, b) are called different."""
    ranked = sorted(configs, key=lambda c: -c.mean)
    u = compare_sweep(ranked, ranked[0].label, {}, 10, variance)
    best = ranked[0].label
    if best in ("a", "b"):
        other = "b" if best == "a" else "a"
        return any(c.config == other and c.verdict in ("better", "worse") for c in u.against_best())
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=4000)
    args = parser.parse_args()
    print("| seeds a config | seed sd | false verdicts, floor left out (a candidate) | "
          "false verdicts, floor pooled (the analysis) |")
    print("| --- | --- | --- | --- |")
    for seeds in (3, 5):
        for sd in (0.06, 0.125):
            rng = np.random.default_rng(seeds * 1000 + int(sd * 1000))
            now, before = [], []
            for _ in range(args.sweeps):
                configs = [ConfigData(name, np.round(rng.normal(0.5, sd, seeds) * 25) / 25)
                           for name in ("a", "b")] + [ConfigData("floor", np.zeros(seeds))]
                now.append(false_verdict(configs, SeedVariance.pooled(configs[:2])))  # floor left out
                before.append(false_verdict(configs, SeedVariance.pooled(configs)))
            cells = []
            for values in (now, before):
                p = float(np.mean(values))
                cells.append(f"{100 * p:.1f}% ± {100 * math.sqrt(p * (1 - p) / len(values)):.1f}")
            print(f"| {seeds} | {sd:g} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
