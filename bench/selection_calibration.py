"""Calibration of the sweep's conclusions: simulated sweeps through the real analysis code.

Each simulated sweep has 9 configs, 1-3 seeds each, 1024 validation problems and 20 evaluations
at a plateau (one response per problem, temperature 1). Problem i has a difficulty shared by
every config, q_i ~ U(0.1, 0.9); run (config c, seed s) answers it right with probability
q_i + delta_c + a_cs, where delta_c is the config's true effect and a_cs ~ N(0, SEED_SD) the seed's
(the run as a whole went better or worse). A config's true reward is 0.5 + delta_c. Every
evaluation draws each problem's outcome afresh: one evaluation's standard error is about 1.4
points, as on MATH.

Through the real code: each run's criteria come from analysis.aggregate.run_values_at on the
steps frame the simulated runs make (late_eval_reward, best_eval_reward, final_eval_reward), and
the intervals and verdicts from analysis.uncertainty.compare_sweep on the per-problem outcomes of
the late evaluations, as analysis.aggregate.rank builds them from eval_outcomes/.

Printed, each with its Monte Carlo error (standard error over the simulated sweeps):
* selection: how often each criterion picks the truly best config (one config 3 points better)
  and the winner's curse (reported minus true reward of the picked config), also with all equal;
* false verdicts: the share of sweeps with any "better"/"worse" verdict when all configs are equal
  (goal <= 5%);
* coverage: how often the 95% interval of a fixed pair's difference holds the true difference
  (goal 93-97%), and of the comparisons against the picked best (selected after seeing the data);
* power: the share of sweeps with one config 5 points better in which each other config is
  called worse than it;
* pruning: the same one-seed sweeps replayed through the sweep's successive-halving pruner
  (grpo.run.pruning.replay, Optuna; rungs at steps 10, 30, 90 of 200, the top third go on, 9 runs
  at once, launched in a random order): how often the truly better config is still the pick, with each run judged at a rung
  by its evaluation there (what runs reported before) or by the mean of its evaluations so far
  (at most the last 5: what RunTrial.report reports), against the unpruned sweep's pick.

Usage: python bench/selection_calibration.py [--sweeps 1000] [--seed-sd 0.01] [--seeds 1,2,3]
[--no-pruning]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.aggregate import LATE_EVALS, run_values_at  # noqa: E402
from analysis.collect import EVAL_REWARD, LABEL  # noqa: E402
from analysis.uncertainty import (  # noqa: E402
    ConfigData,
    SeedVariance,  # noqa: E402
    compare_sweep,
    pair_test,
)
from grpo.run.outcomes import late_mean  # noqa: E402
from grpo.run.pruning import PruningSettings, ReplayJob, replay  # noqa: E402

N_CONFIGS = 9
N_PROBLEMS = 1024
N_EVALS = 20
EVAL_EVERY = 10
DIGEST = "0" * 64


def simulate(rng: np.random.Generator, effects: np.ndarray, n_seeds: int, seed_sd: float
             ) -> tuple[pd.DataFrame, list[ConfigData], np.ndarray]:
    """One sweep: its steps frame, each config's ConfigData (late evaluations' per-problem means)
    and the true rewards of the configs."""
    difficulty = rng.uniform(0.1, 0.9, N_PROBLEMS)
    steps = np.arange(1, N_EVALS + 1) * EVAL_EVERY
    rows, configs = [], []
    for c, effect in enumerate(effects):
        seed_values, late_rows = [], []
        for s in range(n_seeds):
            p = difficulty + effect + rng.normal(0.0, seed_sd)
            right = rng.uniform(size=(N_EVALS, N_PROBLEMS)) < p  # (evaluations, problems)
            rewards = right.mean(axis=1)
            run_id = f"c{c}/s{s}"
            rows += [(run_id, f"config {c}", 0, 0.5)]  # step 0: before training, never counted
            rows += [(run_id, f"config {c}", int(step), float(r)) for step, r in zip(steps, rewards, strict=True)]
            late_rows.append(right[-LATE_EVALS:].mean(axis=0))
            seed_values.append(rewards[-LATE_EVALS:].mean())
        configs.append(ConfigData(f"config {c}", np.array(seed_values), np.vstack(late_rows), DIGEST,
                                  1, LATE_EVALS))
    frame = pd.DataFrame(rows, columns=["run_id", LABEL, "step", EVAL_REWARD])
    return frame, configs, 0.5 + effects


def criteria(frame: pd.DataFrame) -> pd.DataFrame:
    """Each config's criteria (mean over seeds) by analysis.aggregate.run_values_at."""
    values = run_values_at(SimpleNamespace(steps=frame), math.inf)
    return values.groupby(LABEL)[["late_eval_reward", "best_eval_reward", "final_eval_reward"]].mean()


def mean_se(values: list[float]) -> str:
    a = np.asarray(values, float)
    return f"{a.mean():+.4f} ± {a.std(ddof=1) / math.sqrt(len(a)):.4f}"


def rate_se(hits: list[bool]) -> str:
    p = float(np.mean(hits))
    return f"{p:6.1%} ± {math.sqrt(p * (1 - p) / len(hits)):.1%}"


def scenario(rng: np.random.Generator, n_sweeps: int, n_seeds: int, seed_sd: float,
             gap: float) -> dict[str, list]:
    """``n_sweeps`` sweeps where config 0 is ``gap`` better than the 8 others (0: all equal)."""
    effects = np.zeros(N_CONFIGS)
    effects[0] = gap
    out: dict[str, list] = {k: [] for k in (
        "pick_late", "pick_best", "pick_final", "curse_late", "curse_best", "curse_final",
        "any_verdict", "cover_pair", "cover_best", "called", "method")}
    for _ in range(n_sweeps):
        frame, configs, truth = simulate(rng, effects, n_seeds, seed_sd)
        table = criteria(frame)
        for name in ("late", "best", "final"):
            column = table[f"{name}_eval_reward"]
            picked = int(column.idxmax().split()[-1])
            out[f"pick_{name}"].append(picked == 0)
            out[f"curse_{name}"].append(float(column.max()) - truth[picked])
        order = sorted(configs, key=lambda c: -c.mean)
        result = compare_sweep(order, order[0].label, {}, step=N_EVALS * EVAL_EVERY)
        out["method"].append(result.method)
        out["any_verdict"].append(any(c.verdict in ("better", "worse") for c in result.comparisons))
        best = int(order[0].label.split()[-1])
        for c in result.against_best():
            true_diff = truth[int(c.config.split()[-1])] - truth[best]
            out["cover_best"].append(c.lo <= true_diff <= c.hi)
        fixed = pair_test(configs[1], configs[2], result.method, SeedVariance.pooled(configs))
        out["cover_pair"].append(fixed.lo <= truth[1] - truth[2] <= fixed.hi)
        if best == 0:
            out["called"] += [c.verdict == "worse" for c in result.against_best()]
        else:
            out["called"] += [False] * (N_CONFIGS - 1)
    return out


PRUNER = PruningSettings("successive_halving", "step", min_resource=10, reduction_factor=3)


def pruning(rng: np.random.Generator, n_sweeps: int, seed_sd: float, gap: float
            ) -> dict[str, list[bool]]:
    """One-seed sweeps (config 0 ``gap`` better) with and without the pruner: does the pick stay
    the truly better config?"""
    effects = np.zeros(N_CONFIGS)
    effects[0] = gap
    out: dict[str, list[bool]] = {"full": [], "single": [], "mean": []}
    steps = [int(s) for s in np.arange(1, N_EVALS + 1) * EVAL_EVERY]
    for _ in range(n_sweeps):
        frame, _, _ = simulate(rng, effects, 1, seed_sd)
        series = {label: part.loc[part["step"] > 0, EVAL_REWARD].to_numpy(float)
                  for label, part in frame.groupby(LABEL, sort=True)}
        # launched in a random order: which config reports first at a rung is not the best one
        labels = [f"config {c}" for c in rng.permutation(N_CONFIGS)]
        late = {label: float(series[label][-LATE_EVALS:].mean()) for label in labels}
        out["full"].append(max(labels, key=late.get) == "config 0")
        for rule in ("single", "mean"):
            jobs = []
            for label in labels:
                values = series[label]
                reported = (values if rule == "single" else  # what RunTrial.report reports
                            [late_mean(values[:i + 1]) for i in range(len(values))])
                jobs.append(ReplayJob([(s, float(v), float(s)) for s, v in zip(steps, reported, strict=True)],
                                      float(steps[-1])))
            outcomes = replay(PRUNER, steps[-1], jobs, parallel=N_CONFIGS)
            kept = [label for label, o in zip(labels, outcomes, strict=True) if o.pruned_at is None]
            out[rule].append(max(kept, key=late.get) == "config 0")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=1000, help="simulated sweeps per scenario")
    parser.add_argument("--seed-sd", type=float, default=0.01,
                        help="seed-to-seed standard deviation of a run's reward (0-1 scale)")
    parser.add_argument("--seeds", default="1,2,3", help="seeds per config, comma-separated")
    parser.add_argument("--rng", type=int, default=0)
    parser.add_argument("--pruning", action=argparse.BooleanOptionalAction, default=True,
                        help="also replay one-seed sweeps through the pruner")
    args = parser.parse_args()
    rng = np.random.default_rng(args.rng)
    started = time.perf_counter()
    print(f"{args.sweeps} simulated sweeps per scenario: {N_CONFIGS} configs, {N_PROBLEMS} "
          f"problems, 1 response per problem, {N_EVALS} evaluations at a plateau; seed sd "
          f"{args.seed_sd:g}; late = mean of the last {LATE_EVALS} evaluations; ± is the Monte "
          "Carlo standard error")
    for n_seeds in (int(s) for s in args.seeds.split(",")):
        equal = scenario(rng, args.sweeps, n_seeds, args.seed_sd, 0.0)
        three = scenario(rng, args.sweeps, n_seeds, args.seed_sd, 0.03)
        five = scenario(rng, args.sweeps, n_seeds, args.seed_sd, 0.05)
        methods = ", ".join(sorted(set(equal["method"])))
        print(f"\n{n_seeds} seed(s) per config (intervals: {methods})")
        print("  criterion                 picks the 3-point-better config   winner's curse "
              "(3 points better)   winner's curse (all equal)")
        for name, text in (("best", "max over evaluations (old)"), ("final", "final evaluation"),
                           ("late", f"mean of last {LATE_EVALS} (new)")):
            print(f"  {text:<26}{rate_se(three[f'pick_{name}']):>20}   "
                  f"{mean_se(three[f'curse_{name}']):>28}   {mean_se(equal[f'curse_{name}']):>22}")
        print(f"  false better/worse verdicts, all configs equal (per sweep): "
              f"{rate_se(equal['any_verdict'])}   (goal <= 5%)")
        print(f"  coverage of the 95% interval on a fixed pair's difference: "
              f"{rate_se(equal['cover_pair'] + three['cover_pair'])}   (goal 93-97%)")
        print(f"  coverage against the picked best (selected on the same data): "
              f"{rate_se(equal['cover_best'] + three['cover_best'])}")
        print(f"  power: a 5-point-worse config called worse than the best: "
              f"{rate_se(five['called'])}")
    if args.pruning:
        print(f"\npruning, 1 seed per config ({PRUNER.describe(N_EVALS * EVAL_EVERY)}):")
        for gap in (0.03, 0.05):
            result = pruning(rng, args.sweeps, args.seed_sd, gap)
            print(f"  one config {gap * 100:.0f} points better, it is the pick: unpruned "
                  f"{rate_se(result['full'])}; pruned, judged by the evaluation at the rung "
                  f"(before) {rate_se(result['single'])}; judged by the mean of the evaluations so "
                  f"far {rate_se(result['mean'])}")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
