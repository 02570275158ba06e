"""Calibration of racing across seeds: simulated races with a known truth, through the real
sweeper's race (analysis.decisions.race.looks.RaceRunner: its waves, record and looks) and
the real readers (analysis.readers.collect.collect, analysis.decisions.ranking.rank, analysis.decisions.race.looks.decide).

The simulated world is bench/selection_calibration.py's: problem i has a difficulty q_i ~ U(0.1,
0.9) shared by every config; run (config c, seed s) answers it right with probability q_i +
delta_c + a_cs, a_cs ~ N(0, seed sd); 1024 problems, 20 evaluations of which the late ones are
averaged; runs of the same seed share each evaluation's random numbers. Each wave's runs are
written as run directories by a launcher that stands in for the trainer, then the race looks.

Truths (9 configs; seed sd 1.5 and 3 points): ``equal`` (all the same), ``one better`` (config 0
is 3 points better), ``additive`` (a 3x3 grid, effects 0/1/2 points along one key plus 0/0.5/1
along the other: the corner cell is 3 points better than the worst, 0.5 better than the
runner-up); and, beyond the issue's three, ``spread`` (the 9 configs 2 points apart, 0 to -16,
as a learning-rate sweep spans a good region and clearly bad ones) and ``learning rate`` (0, -1,
-2 / -5, -7.5, -10 / three at -40 points, the three near the floor at 0.3x the seed sd: a
learning-rate sweep's unequal variances). Each look compares at the race's calibrated level
(analysis.decisions.race.boundary). Figures, each with its Monte Carlo standard error: the share of truly
best configs that left the race at some look (each config of ``equal``; goal <= 5%); the share of
races whose pick (the best of the configs left) is a truly best config; with ``equal``, the
false-winner rate (the race ends with one config, calling it better than every other: goal <= 5%);
the runs (GPU-hours) as a share of the fixed grid of max_seeds seeds a config (goals: spread <= 50%
at seed sd 1.5; learning rate <= 55% at 1.5, <= 65% at 3); and how often the fixed grid, read by
the same analysis at the plain 5% level, ends with one config.

With ``--record`` each case's share is written to analysis/decisions/race/calibration.json, which the
dry run of a race prints as its expected case.

Usage: python bench/race_calibration.py [--races 200] [--max-seeds 5] [--workers 2] [--record]
       [--truths equal,"one better"] [--seed-sds 1.5,3]   (a subset: 4 CPU-s a race on 2 cores)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monte_carlo import rate  # noqa: E402
from selection_calibration import BASE as SELECTION_BASE  # noqa: E402
from selection_calibration import DIGEST, EVAL_EVERY, N_EVALS, N_PROBLEMS  # noqa: E402

from analysis.decisions.race.boundary import ONE_LEFT, boundary  # noqa: E402
from analysis.decisions.race.looks import RaceRunner  # noqa: E402
from analysis.decisions.race.settings import (
    CALIBRATION_FILE,
    CalibratedCase,
    Calibration,
    RaceSettings,
)
from analysis.decisions.ranking import LATE_EVALS, rank  # noqa: E402
from analysis.readers.collect import collect  # noqa: E402
from analysis.readers.run_rows import EVAL_REWARD  # noqa: E402
from analysis.readers.synthetic import config_with, write_multirun, write_run  # noqa: E402
from grpo.run.outcomes import EvalOutcomes, write_outcomes  # noqa: E402

GRID = [(a, b) for a in range(3) for b in range(3)]
"""The 9 configs: (k0, k1) levels."""
TRUTHS = {"equal": "all configs equal", "one better": "one config 3 points better",
          "additive": "a 3x3 grid 0.5-3 points apart", "spread": "configs 2 points apart",
          "learning rate": "a learning-rate sweep (0 to -10 points, three at -40 near the floor)"}
"""Each truth (`effects`) in the words of the dry run's expected case."""
FLOOR_SD = 0.3
"""The seed sd of the learning-rate truth's three configs near the floor, as a share of the others'."""
ALPHA = 0.05
BASE = {**SELECTION_BASE, "pruning": {"name": "off"}, "checkpoint": {"save_final_model": False}}
"""selection_calibration's run config with what a race's wave reads to tell a run over
(grpo.run.finished.Launch: no pruner, no final model to check)."""


def effects(truth: str) -> np.ndarray:
    """Each config's true effect (reward / 1, config order)."""
    if truth == "equal":
        return np.zeros(len(GRID))
    if truth == "one better":
        return np.array([0.03] + [0.0] * (len(GRID) - 1))
    if truth == "spread":
        return -0.02 * np.arange(len(GRID))
    if truth == "learning rate":
        return np.array([0.0, -0.01, -0.02, -0.05, -0.075, -0.10, -0.40, -0.40, -0.40])
    return np.array([0.01 * a + 0.005 * b for a, b in GRID])  # additive


def seed_sds(truth: str, seed_sd: float) -> np.ndarray:
    """Each config's seed sd (reward / 1): `seed_sd`, the learning-rate truth's floor at FLOOR_SD of it."""
    scale = np.ones(len(GRID))
    if truth == "learning rate":
        scale[-3:] = FLOOR_SD
    return seed_sd * scale


class SimulatedTrainer:
    """Launches a wave's jobs by writing their run directories (the trainer's files: metrics
    with every evaluation, per-problem outcomes of the late ones, the config records); `seed_sd`
    each config's seed sd."""

    def __init__(self, sweep: Path, truth: np.ndarray, seed_sd: np.ndarray, rng: np.random.Generator):
        self.sweep, self.truth, self.seed_sd = sweep, truth, seed_sd
        self.difficulty = rng.uniform(0.1, 0.9, N_PROBLEMS)
        self.rng = rng
        self.runs = 0

    def __call__(self, batch: list[list[str]], start: int) -> None:
        steps = np.arange(1, N_EVALS + 1) * EVAL_EVERY
        for num, overrides in enumerate(batch, start=start):
            values = dict(o.split("=", 1) for o in overrides)
            c = GRID.index((int(values["k0"]), int(values["k1"])))
            seed = int(values["seed"])
            draws = np.random.default_rng([seed, 7]).uniform(size=(N_EVALS, N_PROBLEMS))
            p = self.difficulty + self.truth[c] + self.rng.normal(0.0, self.seed_sd[c])
            right = draws < p[None, :]
            rows = [{"step": 0, EVAL_REWARD: 0.5, "time/elapsed_s": 1.0}]
            rows += [{"step": int(step), EVAL_REWARD: float(r), "time/elapsed_s": float(step)}
                     for step, r in zip(steps, right.mean(axis=1), strict=True)]
            run = self.sweep / str(num)
            write_run(run, {"k0": values["k0"], "k1": values["k1"], "seed": seed}, rows,
                      {"status": "completed", "last_step": int(steps[-1])}, base=BASE)
            for step, problems in zip(steps[-LATE_EVALS:], right[-LATE_EVALS:], strict=True):
                write_outcomes(run, EvalOutcomes(int(step), 1, DIGEST,
                                                 tuple(problems.astype(float).tolist())))
            self.runs += 1


def index_of(label: str) -> int:
    """The config (GRID index) of a race's label ``k0=1, k1=2``."""
    return GRID.index(tuple(int(part.split("=")[1]) for part in label.split(", ")))


def one_race(args: tuple[str, float, int, int]) -> dict[str, object]:
    """Simulate one race; what the calibration counts of it."""
    truth_name, seed_sd, max_seeds, seed = args
    truth = effects(truth_name)
    with tempfile.TemporaryDirectory() as root:
        sweep = Path(root) / "sweep"
        write_multirun(sweep, ["k0=0,1,2", "k1=0,1,2"])
        trainer = SimulatedTrainer(sweep, truth, seed_sds(truth_name, seed_sd),
                                   np.random.default_rng(seed))
        runner = RaceRunner(sweep, RaceSettings(max_seeds, ALPHA),
                            [[f"k0={a}", f"k1={b}"] for a, b in GRID],
                            [config_with({"k0": str(a), "k1": str(b), "seed": 0}, BASE) for a, b in GRID],
                            trainer, lambda indices: float(len(indices)))
        with contextlib.redirect_stdout(io.StringIO()):  # the sweeper's line per wave
            race = runner.run()
        last = race.last_decision()
        picked = index_of(last.alive[0])
        left = {index_of(label) for wave in race.waves for label in wave.decision.left}
        best = np.flatnonzero(truth == truth.max())
        # the fixed grid: every config to max_seeds seeds, read at the plain 5% level
        fixed_dir = Path(root) / "fixed"
        write_multirun(fixed_dir, ["k0=0,1,2", "k1=0,1,2", f"seed={','.join(map(str, range(max_seeds)))}"])
        fixed = SimulatedTrainer(fixed_dir, truth, seed_sds(truth_name, seed_sd),
                                 np.random.default_rng(seed + 10**6))
        fixed([[f"k0={a}", f"k1={b}", f"seed={s}"] for a, b in GRID for s in range(max_seeds)], 0)
        fixed_u = rank(collect([fixed_dir])).uncertainty
    return {"truth": truth_name, "sd": seed_sd, "correct": bool(truth[picked] == truth.max()),
            "best_left": float(np.mean([i in left for i in best])),
            "one_left": last.end == ONE_LEFT, "share": trainer.runs / (len(GRID) * max_seeds),
            "waves": len(race.waves),
            "fixed_one_left": fixed_u is not None and len(fixed_u.could_be_best) == 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=200, help="simulated races per cell")
    parser.add_argument("--max-seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--truths", default=",".join(TRUTHS),
                        help="the truths to race, comma-separated (a subset: a bounded rerun)")
    parser.add_argument("--seed-sds", default="1.5,3",
                        help="the seed sds to race, in points, comma-separated")
    parser.add_argument("--record", action="store_true",
                        help=f"write each case's share to {CALIBRATION_FILE.name} (the dry run's expected case)")
    args = parser.parse_args()
    truths = [t.strip() for t in args.truths.split(",")]
    sds = [float(sd) / 100 for sd in args.seed_sds.split(",")]
    if unknown := [t for t in truths if t not in TRUTHS]:
        parser.error(f"--truths: {', '.join(unknown)} not among {', '.join(TRUTHS)}")
    if args.record and (truths != list(TRUTHS) or sds != [0.015, 0.03]):
        parser.error("--record writes every case: drop --truths and --seed-sds")
    cells = [(t, sd) for t in truths for sd in sds]
    jobs = [(t, sd, args.max_seeds, 1000 * i + r) for i, (t, sd) in enumerate(cells)
            for r in range(args.races)]
    start = time.time()
    with multiprocessing.Pool(args.workers) as pool:
        results = pool.map(one_race, jobs, chunksize=4)
    level = boundary(len(GRID), args.max_seeds, ALPHA, True)  # a 3x3 grid: wave 1 has a variance
    print(f"{args.races} races a cell, 9 configs, max_seeds={args.max_seeds}, alpha {ALPHA}: "
          f"{level.describe()}; {time.time() - start:.0f} s\n")
    print("| truth | seed sd | a truly best config left | picks a truly best config "
          "| ends with one config | runs / fixed grid | waves | fixed grid ends with one config |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for truth, sd in cells:
        rs = [r for r in results if r["truth"] == truth and r["sd"] == sd]
        shares = [float(r["share"]) for r in rs]
        best_left = [float(r["best_left"]) for r in rs]
        print(f"| {truth} | {100 * sd:g} points "
              f"| {100 * np.mean(best_left):5.1f}% ± {100 * np.std(best_left) / math.sqrt(len(rs)):.1f} "
              f"| {rate([r['correct'] for r in rs], width=5)} "
              f"| {rate([r['one_left'] for r in rs], width=5)} "
              f"| {100 * np.mean(shares):.0f}% ± {100 * np.std(shares) / math.sqrt(len(rs)):.1f} "
              f"| {np.mean([r['waves'] for r in rs]):.1f} "
              f"| {rate([r['fixed_one_left'] for r in rs], width=5)} |")
    print("\n'ends with one config' under the equal truth is the false-winner rate (goal <= 5%).")
    if args.record:
        cases = []
        for truth, sd in cells:
            shares = [float(r["share"]) for r in results if r["truth"] == truth and r["sd"] == sd]
            cases.append(CalibratedCase(TRUTHS[truth], round(100 * sd, 3), float(np.mean(shares)),
                                        float(np.std(shares) / math.sqrt(len(shares)))))
        Calibration(len(GRID), args.max_seeds, ALPHA, args.races, tuple(cases)).write()
        print(f"recorded in {CALIBRATION_FILE}")


if __name__ == "__main__":
    main()
