"""The winner's curse, measured: simulated sweeps of equal configs whose pick is confirmed on
held-out problems with fresh seeds, through the analysis's own statistics.

The simulated world is ``bench/selection_calibration.py``'s: problem i has a difficulty q_i ~
U(0.1, 0.9) shared by every config, run (config c, seed s) answers it right with probability q_i +
delta_c + a_cs, a_cs ~ N(0, seed sd) the seed's shift of the whole run; a config's true reward is
0.5 + delta_c (the mean over the population of problems and seeds). Here every delta_c is 0 (9
equal configs: whatever the selection picks, its truth is 0.5). 1024 validation problems, one
response each, the last 5 of 20 evaluations at a plateau drawn afresh (a run's value is their
mean, ``grpo.run.outcomes.LATE_EVALS``), one seed or three a config.

Each sweep is ranked as ``analysis.decisions.ranking.rank`` ranks (the highest mean over seeds of
the runs' late values); the selection figure of the winner is its value there, with the interval
of ``analysis.stats.comparisons.estimate`` (seeds pooled over the 9 configs, each config's own
where larger; the problems' variance; none with one seed a config, which has no seed variance).
The top ``--top-k`` configs are then confirmed as ``python -m analysis confirm`` does
(``analysis.decisions.confirm``): each trained again with ``--seeds`` fresh seeds (new seed shifts)
and its final model evaluated once on 1024 held-out problems (new difficulties from the same
population); its confirmed figure is ``estimate`` of those runs (seeds pooled over the finalists,
the held-out problems' variance) and the difference selection - confirmed carries both
(``analysis.stats.comparisons.difference``). ``--no-retrain`` is measured beside it: the winner's
own runs (the same seed shifts) evaluated on the held-out problems alone.

Printed, each with its Monte Carlo error (the standard error over the simulated sweeps): the
selection figure's bias (the curse as the report reads it today), the confirmed figure's and the
no-retrain figure's bias against the truth, how often the confirmed interval holds the truth, and
how often the difference's interval holds the expected curse (the mean of selection - truth over
the sweeps).

Usage: python bench/confirm_calibration.py [--sweeps 1000] [--seeds 3] [--top-k 3] [--rng 0]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.stats.comparisons import difference, estimate, problem_error  # noqa: E402
from analysis.stats.variance import ConfigData, SeedVariance  # noqa: E402
from grpo.run.outcomes import LATE_EVALS  # noqa: E402

N_CONFIGS = 9
N_PROBLEMS = 1024
SEED_SD = 0.01
TRUTH = 0.5


def runs(rng: np.random.Generator, difficulty: np.ndarray, offsets: np.ndarray,
         n_evals: int) -> np.ndarray:
    """Per-problem values (configs, seeds, problems): each run's mean over ``n_evals`` fresh
    evaluations of 0/1 outcomes with probability difficulty + its seed shift."""
    p = np.clip(difficulty[None, None, :] + offsets[:, :, None], 0, 1)
    right = rng.uniform(size=(n_evals, *p.shape)) < p[None]
    return right.mean(axis=0)


def configs(values: np.ndarray) -> list[ConfigData]:
    """One ConfigData per config of per-problem values (configs, seeds, problems)."""
    return [ConfigData(f"c{c}", values[c].mean(axis=1), values[c], "same", 1, 1)
            for c in range(values.shape[0])]


def pooled(data: list[ConfigData], text: str) -> SeedVariance:
    seeds = SeedVariance.pooled(data)
    return seeds if seeds.source == "none" else SeedVariance(seeds.variance, seeds.df, "seeds", text)


def one_sweep(rng: np.random.Generator, n_seeds: int, top_k: int, fresh: int) -> dict[str, float]:
    """One simulated sweep and its confirmation; what the calibration counts of it."""
    difficulty = rng.uniform(0.1, 0.9, N_PROBLEMS)
    offsets = rng.normal(0.0, SEED_SD, (N_CONFIGS, n_seeds))
    selection = configs(runs(rng, difficulty, offsets, LATE_EVALS))
    means = np.array([c.mean for c in selection])
    order = np.argsort(-means, kind="stable")
    finalists = order[:top_k]
    sweep_seeds = pooled(selection, "the sweep's seeds")
    chosen = estimate(selection[finalists[0]], sweep_seeds, problem_error(selection))
    held = rng.uniform(0.1, 0.9, N_PROBLEMS)  # the held-out problems: the same population
    retrained = configs(runs(rng, held, rng.normal(0.0, SEED_SD, (top_k, fresh)), 1))
    confirm_seeds = pooled(retrained, "the confirmed runs' seeds")
    confirmed = estimate(retrained[0], confirm_seeds, problem_error(retrained))
    own = runs(rng, held, offsets[finalists[:1]], 1)[0]  # --no-retrain: the winner's own seeds
    curse = difference(chosen, confirmed)
    return {"selection": chosen.mean - TRUTH, "confirmed": confirmed.mean - TRUTH,
            "no_retrain": float(own.mean()) - TRUTH,
            "covers": float(confirmed.lo <= TRUTH <= confirmed.hi)
            if not math.isnan(confirmed.lo) else math.nan,
            "curse_lo": curse.lo, "curse_hi": curse.hi}


def points(values: list[float]) -> str:
    """Mean and Monte Carlo error in reward points (x 100)."""
    a = np.asarray(values, float)
    return f"{100 * a.mean():+.2f} ± {100 * a.std(ddof=1) / math.sqrt(len(a)):.2f}"


def rate(hits: list[float]) -> str:
    hits = [h for h in hits if not math.isnan(h)]
    if not hits:
        return "no interval"
    p = float(np.mean(hits))
    return f"{p:.1%} ± {math.sqrt(max(p * (1 - p), 1e-12) / len(hits)):.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=1000, help="simulated sweeps per design")
    parser.add_argument("--seeds", type=int, default=3, help="fresh seeds a finalist (confirm --seeds)")
    parser.add_argument("--top-k", type=int, default=3, help="finalists confirmed (confirm --top-k)")
    parser.add_argument("--rng", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(args.rng)
    print(f"{N_CONFIGS} equal configs (truth {TRUTH}), {N_PROBLEMS} problems, 1 response each, a "
          f"run's value the mean of its last {LATE_EVALS} evaluations, seed sd {100 * SEED_SD:g} "
          f"point; confirm --top-k {args.top_k} --seeds {args.seeds} on {N_PROBLEMS} held-out "
          f"problems, one evaluation of each final model; {args.sweeps} sweeps a design; reward "
          "points, ± the Monte Carlo error")
    print(f"{'seeds a config':<16}{'selection - truth':>20}{'confirmed - truth':>20}"
          f"{'no-retrain - truth':>20}{'confirmed covers':>18}{'curse interval':>16}")
    for n_seeds in (1, 3):
        results = [one_sweep(rng, n_seeds, args.top_k, args.seeds) for _ in range(args.sweeps)]
        mean_curse = float(np.mean([r["selection"] for r in results]))
        curse_covers = [float(r["curse_lo"] <= mean_curse <= r["curse_hi"])
                        if not math.isnan(r["curse_lo"]) else math.nan for r in results]
        print(f"{n_seeds:<16}{points([r['selection'] for r in results]):>20}"
              f"{points([r['confirmed'] for r in results]):>20}"
              f"{points([r['no_retrain'] for r in results]):>20}"
              f"{rate([r['covers'] for r in results]):>18}{rate(curse_covers):>16}")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
