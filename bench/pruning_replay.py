"""The synthetic 480-run sweep replayed through the sweep's pruner: the compute it would spend and
the rank of the config it keeps, over several seeds of the synthetic data.

Usage: ``python bench/pruning_replay.py [--seeds 5] [--parallel 16]``.

For each data seed, ``analysis.readers.synthetic.write_grid_sweep`` writes the ``large`` sweep of
``bench/plots_time.py`` (80 configs x 6 seeds, 200 GRPO steps, evaluation every 10, a few
collapsed or diverged configs) with curves that cross (each config learns at its own pace). Its
runs are replayed through the pruner exactly as a sweep would run them (``grpo.run.pruning.replay``:
launch order, ``--parallel`` at a time as a SLURM array, each evaluation reported when its
wall-clock time comes). The pruned sweep is then ranked by the report's ranking
(``analysis.decisions.ranking.rank``: configs with a pruned run left out) and its pick is placed in the
full sweep's ranking. Prints, per pruner and seed, the fraction of the full sweep's compute spent,
that rank, and how far the kept config's mean best validation reward is below the best one's
(configs' rewards are 0.008 apart, and the noise of a mean over 6 seeds is of that order).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from plots_time import SWEEPS  # noqa: E402

from analysis.decisions.ranking import rank  # noqa: E402
from analysis.readers.collect import Collection, collect  # noqa: E402
from analysis.readers.run_rows import ELAPSED, EVAL_REWARD  # noqa: E402
from analysis.readers.synthetic import write_grid_sweep  # noqa: E402
from grpo.run.pruning import PruningSettings, ReplayJob, ReplayOutcome, replay  # noqa: E402

N_STEPS = 200
PRUNERS = {
    "successive_halving (first rung 10, factor 3)": PruningSettings("successive_halving", "step", 10, 3),
    "successive_halving (first rung 20, factor 3)": PruningSettings("successive_halving", "step", 20, 3),
    "hyperband (first rung 10, factor 3)": PruningSettings("hyperband", "step", 10, 3),
}


def replay_jobs(collection: Collection) -> list[ReplayJob]:
    """Each run (in job order) as the pruner sees it: its evaluations before its last step."""
    jobs = []
    for run_id in collection.runs.sort_values("job")["run_id"]:
        rows = collection.steps[collection.steps["run_id"] == run_id]
        evals = rows[rows[EVAL_REWARD].notna() & (rows["step"] < N_STEPS)]
        jobs.append(ReplayJob(list(zip(evals["step"].astype(int), evals[EVAL_REWARD],
                                       evals[ELAPSED], strict=True)),
                              float(rows[ELAPSED].max())))
    return jobs


def pruned_view(collection: Collection, outcomes: list[ReplayOutcome]) -> Collection:
    """The sweep as the pruned one would have ended: stopped runs `pruned` at their stop."""
    runs = collection.runs.sort_values("job").copy()
    stop = pd.Series([o.pruned_at for o in outcomes], index=runs.index)
    runs.loc[stop.notna(), "status"] = "pruned"
    runs.loc[stop.notna(), "steps_done"] = stop[stop.notna()].astype(int)
    limit = dict(zip(runs["run_id"], stop.fillna(N_STEPS), strict=True))
    steps = collection.steps[collection.steps["step"] <= collection.steps["run_id"].map(limit)]
    return dataclasses.replace(collection, runs=runs, steps=steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds of the synthetic data")
    parser.add_argument("--parallel", type=int, default=16, help="jobs running at once")
    args = parser.parse_args()
    large = SWEEPS["large"]
    results: dict[str, list[tuple[float, int, float]]] = {name: [] for name in PRUNERS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            sweep = Path(tmp) / f"seed{seed}"
            write_grid_sweep(sweep, large["grid"], n_steps=N_STEPS, eval_every=10,
                             n_seeds=large["n_seeds"], unstable=large["unstable"], data_seed=seed)
            full = collect([sweep])
            ranking = rank(full)
            full_rank = list(ranking.table.index)
            jobs = replay_jobs(full)
            total = sum(job.total_seconds for job in jobs)
            for name, settings in PRUNERS.items():
                start = time.perf_counter()
                outcomes = replay(settings, N_STEPS, jobs, args.parallel)
                spent = sum(o.seconds for o in outcomes) / total
                pick = rank(pruned_view(full, outcomes)).best
                place = full_rank.index(pick) + 1
                gap = ranking.value(ranking.best) - ranking.value(pick)
                results[name].append((spent, place, gap))
                print(f"seed {seed} {name}: {spent:.1%} of the compute, keeps {pick} (rank {place} "
                      f"of {len(full_rank)} in the full sweep, {gap:.4f} below its best config's "
                      f"{ranking.value(ranking.best):.4f}; replay {time.perf_counter() - start:.1f} s)",
                      flush=True)
    print(f"\n{len(jobs)} runs, {args.parallel} at a time, {args.seeds} seeds of the synthetic data")
    for name, rows in results.items():
        spent = [r[0] for r in rows]
        print(f"{name}: compute {min(spent):.1%}-{max(spent):.1%} (mean {sum(spent) / len(spent):.1%}); "
              f"rank of the kept config {[r[1] for r in rows]}, best eval reward below the full "
              f"sweep's best {[round(r[2], 4) for r in rows]}")


if __name__ == "__main__":
    main()
