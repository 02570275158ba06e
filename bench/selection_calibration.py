"""Calibration of the sweep's conclusions: simulated sweeps with a known truth, through the real
analysis code.

The simulated world: problem i has a difficulty shared by every config, q_i ~ U(0.1, 0.9); run
(config c, seed s) answers it right with probability q_i + delta_c + a_cs, where delta_c is the
config's true effect and a_cs ~ N(0, seed sd) the seed's (the run as a whole went better or
worse). A config's true reward is 0.5 + delta_c. 1024 validation problems, one response per
problem, 20 evaluations at a plateau (one evaluation's standard error is about 1.4 points, as on
MATH). In the verdict sweeps runs of the same seed share each evaluation's random numbers (as the
trainer's evaluation seed does, here in its strongest form: the same uniform draw per problem);
with ``shared`` evaluations, every evaluation of a run also reuses one draw (as before each
evaluation got its own seed: the late evaluations of a converged policy repeat one draw). The
selection and pruning sweeps draw every run's outcomes independently.

**Verdicts** (the issue's designs; each sweep is written to disk as run directories -- metrics.jsonl,
eval_outcomes/, .hydra/, multirun.yaml -- and read back by analysis.readers.collect.collect and
analysis.decisions.ranking.rank, the code `make plots`, the summary, promote and the chain use):

* ``1-D, 1 seed``: 9 values of one key, one seed each;
* ``3x3, 1 seed``: two keys, one seed a cell (with ``interaction``: a true interaction of 3
  points on the diagonal, main effects 0);
* ``3x3 x 2 seeds``, ``3 configs x 3 seeds``.

For each, at seed sd 0, 1.5 and 3 points: the share of all-equal sweeps with any better/worse
verdict (goal <= 5%); the coverage of the unadjusted 95% interval of a fixed pair's difference
(goal 93-97%; none where there is no seed variance); the power to call a config 5 points better
than the others better (each other config called worse than it, when it is the pick); and for the
grids the power of the ANOVA to find a 3-point main effect of the first key (p < 0.05).
Every figure carries its Monte Carlo error (the standard error over the simulated sweeps).

**Selection** (in memory, analysis.decisions.ranking.run_values_at): how often each criterion (the late
mean, the final evaluation, the maximum) picks a config 3 points better, and the winner's curse.
**Pruning**: one-seed sweeps replayed through the sweep's successive-halving pruner
(grpo.run.pruning.replay, Optuna), judged at a rung by the evaluation there or by the mean of the
evaluations so far (what RunTrial.report reports).

Usage: python bench/selection_calibration.py [--sweeps 400] [--designs all] [--workers 2]
[--no-selection] [--no-pruning]
"""

from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.decisions.ranking import LATE_EVALS, rank, run_values_at  # noqa: E402
from analysis.readers.collect import LABEL, collect  # noqa: E402
from analysis.readers.run_rows import EVAL_REWARD  # noqa: E402
from analysis.readers.synthetic import write_multirun, write_run  # noqa: E402
from analysis.stats.comparisons import pair_test  # noqa: E402
from analysis.stats.variance import ConfigData  # noqa: E402
from grpo.run.outcomes import EvalOutcomes, late_mean, write_outcomes  # noqa: E402
from grpo.run.pruning import PruningSettings, ReplayJob, replay  # noqa: E402

N_PROBLEMS = 1024
N_EVALS = 20
EVAL_EVERY = 10
DIGEST = "0" * 64


@dataclass(frozen=True)
class Design:
    """A sweep's shape: the swept keys and their levels, seeds per config, and the true effect of
    each config (a function of its levels, in reward points / 100)."""

    name: str
    keys: dict[str, tuple[int, ...]]
    seeds: int
    interaction: bool = False

    def configs(self) -> list[dict[str, int]]:
        return [dict(zip(self.keys, values, strict=True))
                for values in itertools.product(*self.keys.values())]

    @property
    def grid(self) -> bool:
        return len(self.keys) > 1


DESIGNS = {
    "1d": Design("1-D, 1 seed", {"k0": tuple(range(9))}, 1),
    "grid": Design("3x3, 1 seed", {"k0": (0, 1, 2), "k1": (0, 1, 2)}, 1),
    "grid-interaction": Design("3x3, 1 seed, true interaction", {"k0": (0, 1, 2), "k1": (0, 1, 2)},
                               1, interaction=True),
    "grid-2seeds": Design("3x3 x 2 seeds", {"k0": (0, 1, 2), "k1": (0, 1, 2)}, 2),
    "3x3seeds": Design("3 configs x 3 seeds", {"k0": (0, 1, 2)}, 3),
}


def effects_of(design: Design, scenario: str) -> np.ndarray:
    """Each config's true effect (config order): ``equal`` (0, plus the design's interaction),
    ``cell`` (config 0 is 5 points better), ``main`` (first key's level 1 is 3 points better)."""
    configs = design.configs()
    effect = np.zeros(len(configs))
    if design.interaction:  # +3 on the diagonal, -1.5 elsewhere in its row: main effects 0
        effect += [0.03 if c["k0"] == c.get("k1", -1) else -0.015 for c in configs]
    if scenario == "cell":
        effect[0] += 0.05
    if scenario == "main":
        effect += [0.03 if c["k0"] == 1 else 0.0 for c in configs]
    return effect


def simulate_outcomes(rng: np.random.Generator, effects: np.ndarray, n_seeds: int, seed_sd: float,
                      shared: bool, common: bool = True) -> np.ndarray:
    """0/1 outcomes (configs, seeds, evaluations, problems) of one sweep (module docstring);
    ``common``: runs of the same seed share each evaluation's random numbers (the strongest form
    of the trainer's common random numbers), else every run draws its own."""
    difficulty = rng.uniform(0.1, 0.9, N_PROBLEMS)
    configs = 1 if common else len(effects)
    draws = rng.uniform(size=(configs, n_seeds, 1 if shared else N_EVALS, N_PROBLEMS))
    offsets = rng.normal(0.0, seed_sd, size=(len(effects), n_seeds))
    p = difficulty[None, None, :] + effects[:, None, None] + offsets[:, :, None]
    return draws < p[:, :, None, :]


def write_sweep(root: Path, design: Design, outcomes: np.ndarray) -> Path:
    """The simulated sweep as run directories under ``root`` (the trainer's files: metrics with
    every evaluation, per-problem outcomes of the late ones, the config records)."""
    sweep = root / "sweep"
    task = [f"{k}={','.join(map(str, v))}" for k, v in design.keys.items()]
    write_multirun(sweep, task + ([f"seed={','.join(map(str, range(design.seeds)))}"]
                                  if design.seeds > 1 else []))
    steps = np.arange(1, N_EVALS + 1) * EVAL_EVERY
    late = steps[-LATE_EVALS:]
    job = 0
    for c, config in enumerate(design.configs()):
        for s in range(design.seeds):
            right = outcomes[c, s] if outcomes.shape[2] == N_EVALS else np.repeat(
                outcomes[c, s], N_EVALS, axis=0)
            rewards = right.mean(axis=1)
            rows = [{"step": 0, EVAL_REWARD: 0.5, "time/elapsed_s": 1.0}]
            rows += [{"step": int(step), EVAL_REWARD: float(r), "time/elapsed_s": float(step)}
                     for step, r in zip(steps, rewards, strict=True)]
            run = sweep / str(job)
            write_run(run, {**config, **({"seed": s} if design.seeds > 1 else {})}, rows,
                      {"status": "completed", "last_step": int(steps[-1])},
                      base=BASE)
            for step, problems in zip(late, right[-LATE_EVALS:], strict=True):
                write_outcomes(run, EvalOutcomes(int(step), 1, DIGEST,
                                                 tuple(problems.astype(float).tolist())))
            job += 1
    return sweep


BASE = {"experiment_name": "calibration", "seed": 0, "n_grpo_steps": N_EVALS * EVAL_EVERY,
        "model": {"name": "sim"}, "data": {"name": "sim"}, "cluster": {"gpus_per_job": 2},
        "eval": {"n_examples": N_PROBLEMS}}


def one_sweep(args: tuple[str, str, float, bool, int]) -> dict[str, object]:
    """Simulate, write and analyse one sweep; what the calibration counts of it."""
    design_key, scenario, seed_sd, shared, seed = args
    design = DESIGNS[design_key]
    rng = np.random.default_rng(seed)
    truth = 0.5 + effects_of(design, scenario)
    outcomes = simulate_outcomes(rng, truth - 0.5, design.seeds, seed_sd, shared)
    with tempfile.TemporaryDirectory(dir=TMP) as root:
        ranking = rank(collect([write_sweep(Path(root), design, outcomes)]))
    labels = {", ".join(f"{k}={v}" for k, v in c.items()): i
              for i, c in enumerate(design.configs())}
    u = ranking.uncertainty
    verdicts = [c.verdict for c in u.comparisons]
    values = ranking.compared.assign(label=ranking.compared[list(design.keys)].apply(
        lambda row: ", ".join(f"{k}={row[k]}" for k in design.keys), axis=1))
    a, b = (ConfigData(label, values.loc[values["label"] == label, "value"].to_numpy(float))
            for label in list(labels)[1:3])
    fixed = pair_test(a, b, u.seeds)
    out: dict[str, object] = {
        "source": u.seeds.source,
        "false": scenario == "equal" and not design.interaction
        and any(v in ("better", "worse") for v in verdicts),
        "cover": (None if fixed is None
                  else fixed.lo <= truth[labels[a.label]] - truth[labels[b.label]] <= fixed.hi),
    }
    if scenario == "cell":
        picked_true = labels[ranking.best] == 0
        out["called"] = [picked_true and c.verdict == "worse" for c in u.against_best()]
    if scenario == "main" and ranking.effects is not None:
        first = next(t for t in ranking.effects.terms if t.name == "k0")
        out["main"] = first.p < 0.05
    elif scenario == "main":
        out["main"] = False
    return out


TMP: str | None = None


def rate(hits: Sequence[bool]) -> str:
    if not hits:
        return "no interval"
    p = float(np.mean(hits))
    return f"{p:6.1%} ± {math.sqrt(max(p * (1 - p), 1e-12) / len(hits)):.1%}"


def verdicts(designs: Sequence[str], n_sweeps: int, sds: Sequence[float], workers: int,
             seed: int) -> None:
    print(f"\nverdicts: {n_sweeps} simulated sweeps per cell, read from run directories on disk "
          "by analysis.readers.collect and analysis.decisions.ranking.rank; ± the Monte Carlo standard error")
    print(f"{'design':<34}{'seed sd':>8}  {'evaluations':<10} {'variance source':<19}"
          f"{'false verdicts':>16}{'pair coverage':>16}{'5-pt cell':>16}{'3-pt main':>16}")
    jobs = []
    cells = []
    for key in designs:
        for sd, shared in itertools.product(sds, (False, True)):
            scenarios = ["equal"] + (["cell", "main"] if not shared else [])
            for scenario in scenarios:
                if scenario == "main" and not DESIGNS[key].grid:
                    continue
                cells.append((key, sd, shared, scenario))
                jobs += [(key, scenario, sd, shared, seed + 1_000_003 * len(cells) + i)
                         for i in range(n_sweeps)]
    with multiprocessing.Pool(workers) as pool:
        results = pool.map(one_sweep, jobs, chunksize=8)
    by_cell: dict[tuple, list[dict]] = {}
    for job, result in zip(jobs, results, strict=True):
        key, scenario, sd, shared, _ = job
        by_cell.setdefault((key, sd, shared, scenario), []).append(result)
    for key in designs:
        for sd, shared in itertools.product(sds, (False, True)):
            equal = by_cell[key, sd, shared, "equal"]
            cell = by_cell.get((key, sd, shared, "cell"), [])
            main = by_cell.get((key, sd, shared, "main"), [])
            sources = ", ".join(sorted({str(r["source"]) for r in equal}))
            covers = [r["cover"] for r in equal + cell if r["cover"] is not None]
            called = [c for r in cell for c in r["called"]]
            false = ([r["false"] for r in equal] if not DESIGNS[key].interaction else [])
            print(f"{DESIGNS[key].name:<34}{sd * 100:>7.1f}  {'shared' if shared else 'fresh':<10} "
                  f"{sources:<19}{rate(false) if false else 'n/a':>16}{rate(covers):>16}"
                  f"{rate(called) if cell else '':>16}"
                  f"{rate([r['main'] for r in main]) if main else '':>16}")


# ------------------------------------------------------------------ selection and pruning


def simulate_frame(rng: np.random.Generator, effects: np.ndarray, n_seeds: int, seed_sd: float
                   ) -> tuple[pd.DataFrame, np.ndarray]:
    """One sweep's steps frame (every evaluation of every run) and the configs' true rewards."""
    outcomes = simulate_outcomes(rng, effects, n_seeds, seed_sd, shared=False, common=False)
    steps = np.arange(1, N_EVALS + 1) * EVAL_EVERY
    rows = []
    for c, s in itertools.product(range(len(effects)), range(n_seeds)):
        rewards = outcomes[c, s].mean(axis=1)
        rows += [(f"c{c}/s{s}", f"config {c}", 0, 0.5)]  # step 0: before training, never counted
        rows += [(f"c{c}/s{s}", f"config {c}", int(step), float(r))
                 for step, r in zip(steps, rewards, strict=True)]
    return pd.DataFrame(rows, columns=["run_id", LABEL, "step", EVAL_REWARD]), 0.5 + effects


def selection(rng: np.random.Generator, n_sweeps: int, n_seeds: int, seed_sd: float) -> None:
    """How often each criterion picks the config 3 points better, and the winner's curse."""
    picks: dict[str, list[bool]] = {k: [] for k in ("late", "best", "final")}
    curse: dict[str, list[float]] = {f"{k}/{g}": [] for k in picks for g in ("3", "0")}
    for gap in (0.03, 0.0):
        effects = np.zeros(9)
        effects[0] = gap
        for _ in range(n_sweeps):
            frame, truth = simulate_frame(rng, effects, n_seeds, seed_sd)
            values = run_values_at(SimpleNamespace(steps=frame), math.inf)
            table = values.groupby(LABEL)[["late_eval_reward", "best_eval_reward",
                                           "final_eval_reward"]].mean()
            for name in picks:
                column = table[f"{name}_eval_reward"]
                picked = int(column.idxmax().split()[-1])
                if gap:
                    picks[name].append(picked == 0)
                curse[f"{name}/{'3' if gap else '0'}"].append(float(column.max()) - truth[picked])
    print(f"\nselection, {n_seeds} seed(s) per config, seed sd {seed_sd * 100:g} points "
          f"({n_sweeps} sweeps): picks the 3-point-better config; winner's curse (reported minus "
          "true, points) with it / all equal")
    for name, text in (("best", "max over evaluations"), ("final", "final evaluation"),
                       ("late", f"mean of the last {LATE_EVALS}")):
        print(f"  {text:<26}{rate(picks[name]):>16}   {100 * np.mean(curse[f'{name}/3']):+.1f} / "
              f"{100 * np.mean(curse[f'{name}/0']):+.1f}")


PRUNER = PruningSettings("successive_halving", "step", min_resource=10, reduction_factor=3)


def pruning(rng: np.random.Generator, n_sweeps: int, seed_sd: float, gap: float
            ) -> dict[str, list[bool]]:
    """One-seed sweeps (config 0 ``gap`` better) with and without the pruner: does the pick stay
    the truly better config?"""
    effects = np.zeros(9)
    effects[0] = gap
    out: dict[str, list[bool]] = {"full": [], "single": [], "mean": []}
    steps = [int(s) for s in np.arange(1, N_EVALS + 1) * EVAL_EVERY]
    for _ in range(n_sweeps):
        frame, _ = simulate_frame(rng, effects, 1, seed_sd)
        series = {label: part.loc[part["step"] > 0, EVAL_REWARD].to_numpy(float)
                  for label, part in frame.groupby(LABEL, sort=True)}
        # launched in a random order: which config reports first at a rung is not the best one
        labels = [f"config {c}" for c in rng.permutation(9)]
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
            outcomes = replay(PRUNER, steps[-1], jobs, parallel=9)
            kept = [label for label, o in zip(labels, outcomes, strict=True) if o.pruned_at is None]
            out[rule].append(max(kept, key=late.get) == "config 0")
    return out


def main() -> None:
    global TMP
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=400, help="simulated sweeps per cell")
    parser.add_argument("--designs", default=",".join(DESIGNS),
                        help=f"comma-separated, of {', '.join(DESIGNS)}")
    parser.add_argument("--seed-sds", default="0,0.015,0.03",
                        help="seed-to-seed sd of a run's reward (0-1 scale), comma-separated")
    parser.add_argument("--workers", type=int, default=2, help="processes for the verdict sweeps")
    parser.add_argument("--rng", type=int, default=0)
    parser.add_argument("--selection", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--pruning", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    TMP = "/dev/shm" if Path("/dev/shm").is_dir() else None
    started = time.perf_counter()
    print(f"{N_PROBLEMS} problems, 1 response per problem, {N_EVALS} evaluations at a plateau; a "
          f"run's value is the mean of its last {LATE_EVALS}")
    designs = [d for d in args.designs.split(",") if d]
    unknown = [d for d in designs if d not in DESIGNS]
    if unknown:
        parser.error(f"unknown design(s) {unknown}; choose of {list(DESIGNS)}")
    if designs:
        verdicts(designs, args.sweeps, [float(s) for s in args.seed_sds.split(",")],
                 args.workers, args.rng)
    rng = np.random.default_rng(args.rng)
    if args.selection:
        for n_seeds in (1, 3):
            selection(rng, args.sweeps, n_seeds, 0.01)
    if args.pruning:
        print(f"\npruning, 1 seed per config ({PRUNER.describe(N_EVALS * EVAL_EVERY)}):")
        for gap in (0.03, 0.05):
            result = pruning(rng, args.sweeps, 0.01, gap)
            print(f"  one config {gap * 100:.0f} points better, it is the pick: unpruned "
                  f"{rate(result['full'])}; pruned, judged by the evaluation at the rung "
                  f"(before) {rate(result['single'])}; judged by the mean of the evaluations so "
                  f"far {rate(result['mean'])}")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
