"""Seed noise of real runs (issue 45, item 6): what one config's validation reward does from seed
to seed, on real CPU runs of the tiny model on the toy task, read through the analysis the sweeps
use (analysis.readers.collect.collect, analysis.decisions.ranking.run_values_at: each run's late_eval_reward, the
mean of its last evaluations).

It launches (or, with --sweep, reads) a sweep of learning rates that span learning, no learning
and collapse, with --seeds seeds each, and prints per config: the seeds' mean, sd, skewness,
the largest |z| (an outlier check), a Shapiro-Wilk p-value, and Brown-Forsythe's test of equal
variances across the configs (scipy.stats.levene, center=median); then the correlation of the
seed effects across configs that share a seed (each run's value minus its config's mean; a
positive correlation means a seed that goes well for one config goes well for the others, which
blocking on the seed would remove).

Usage: python bench/seed_noise.py [--seeds 10] [--lrs 1e-5,3e-4,3e-2] [--steps 200]
       [--sweep DIR]  (read a finished sweep instead of launching one)
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.decisions.ranking import run_values_at  # noqa: E402
from analysis.readers.collect import LABEL, collect  # noqa: E402


def launch(sweep: Path, lrs: str, seeds: int, steps: int) -> float:
    """Run the sweep (the local pool, wandb off); its wall-clock seconds."""
    start = time.time()
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy",
                    "rollout=hf", f"learning_rate={lrs}", f"seed={','.join(map(str, range(seeds)))}",
                    f"n_grpo_steps={steps}", f"eval.eval_every={max(1, steps // 10)}",
                    "logging.wandb_mode=disabled", f"hydra.sweep.dir={sweep}"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--lrs", default="1e-5,3e-4,3e-2")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sweep", type=Path, help="a finished sweep to read instead")
    args = parser.parse_args()
    sweep = args.sweep
    if sweep is None:
        sweep = Path(tempfile.mkdtemp(prefix="seed_noise_")) / "sweep"
        seconds = launch(sweep, args.lrs, args.seeds, args.steps)
        print(f"ran {sweep}: {seconds:.0f} s")
    collection = collect([sweep])
    values = run_values_at(collection, math.inf)
    runs = collection.runs.set_index("run_id")
    frame = pd.DataFrame({"label": values[LABEL], "value": values["late_eval_reward"],
                          "seed": runs.loc[values.index, "seed"],
                          "status": runs.loc[values.index, "status"]}).dropna(subset=["value"])
    print(f"\n{len(frame)} runs; value: each run's late_eval_reward (the mean of its last "
          "evaluations, 25 toy problems, greedy)\n")
    print("| config | runs | statuses | mean | seed sd | skewness | largest abs z | Shapiro-Wilk p |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    groups = []
    for label, part in frame.groupby("label", sort=False):
        v = part["value"].to_numpy(float)
        sd = float(np.std(v, ddof=1)) if len(v) > 1 else math.nan
        z = np.abs(v - v.mean()) / sd if sd > 0 else np.zeros_like(v)
        skew = float(stats.skew(v, bias=False)) if len(v) > 2 and sd > 0 else math.nan
        shapiro = float(stats.shapiro(v).pvalue) if len(v) > 2 and sd > 0 else math.nan
        statuses = ", ".join(f"{n} {s}" for s, n in part["status"].value_counts().items())
        print(f"| {label} | {len(v)} | {statuses} | {v.mean():.3f} | {sd:.3f} | {skew:.2f} | "
              f"{z.max():.2f} | {shapiro:.2g} |")
        groups.append(v)
    varying = [g for g in groups if len(g) > 1 and np.std(g) > 0]
    if len(varying) >= 2:
        test = stats.levene(*varying, center="median")
        print(f"\nBrown-Forsythe (Levene, median-centred) over the {len(varying)} configs whose "
              f"seeds vary: W = {test.statistic:.2f}, p = {test.pvalue:.2g}")
    effects = frame.assign(effect=frame["value"] - frame.groupby("label")["value"].transform("mean"))
    table = effects.pivot_table(index="seed", columns="label", values="effect")
    print("\nCorrelation of seed effects across configs that share a seed (Pearson, over seeds):")
    labels = list(table.columns)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            pair = table[[a, b]].dropna()
            if len(pair) > 2 and pair[a].std() > 0 and pair[b].std() > 0:
                test = stats.pearsonr(pair[a], pair[b])
                ci = test.confidence_interval(0.95)  # Fisher's z
                print(f"  {a} ~ {b}: r = {test.statistic:+.2f} over {len(pair)} seeds (95% CI "
                      f"{ci.low:+.2f} to {ci.high:+.2f}; p {test.pvalue:.2g})")
            else:
                print(f"  {a} ~ {b}: no correlation (a config's seeds do not vary)")


if __name__ == "__main__":
    main()
