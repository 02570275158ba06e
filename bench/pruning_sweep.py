"""The headline sweep on CPU with and without pruning: the compute each spends and the config each picks.

Usage: ``python bench/pruning_sweep.py [--steps 300] [--out DIR] [overrides ...]``.

Runs ``launch.py -m off_policy.epochs=1,2,4 train_batch_size=64,128,256`` on the tiny model and
the toy task (``rollout_batch_size=256``, GRPO-Clip, evaluation every 25 steps) through the local
launcher twice: with ``pruning=successive_halving`` (first rung at step 25, reduction factor 3)
and with ``pruning=off``. Prints each sweep's CPU-hours (every run's wall-clock x its CPUs, as
``report.md`` counts them), their ratio, and the best config each picks by the report's ranking
(with its near-ties), then every config's best validation reward in the full sweep and where the
pruned sweep stopped it. Takes about 25 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.decisions.ranking import rank, spend  # noqa: E402
from analysis.readers.collect import LABEL, collect  # noqa: E402

GRID = ("off_policy.epochs=1,2,4", "train_batch_size=64,128,256")
BASE = ("model=tiny", "data=toy", "rollout=hf", "rollout_batch_size=256", "loss=grpo_clip",
        "eval.eval_every=25", "checkpoint.checkpoint_every=25")
PRUNING = ("pruning=successive_halving", "pruning.min_resource=25", "pruning.reduction_factor=3")


def sweep(out: Path, steps: int, extra: list[str]) -> Path:
    """Run the headline sweep into ``out``; its sweep directory."""
    command = [sys.executable, str(ROOT / "launch.py"), "-m", *GRID, *BASE, f"n_grpo_steps={steps}",
               f"paths.output_root={out}", *extra]
    print("$ " + " ".join(command[1:]), flush=True)
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    (multirun,) = out.rglob("multirun.yaml")
    return multirun.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="GRPO steps per run")
    parser.add_argument("--out", type=Path, default=None, help="keep the sweeps here")
    parser.add_argument("overrides", nargs="*", help="more overrides for both sweeps")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="pruning_sweep_"))
    pruned = collect([sweep(out / "pruned", args.steps, [*PRUNING, *args.overrides])])
    full = collect([sweep(out / "full", args.steps, ["pruning=off", *args.overrides])])
    spent = {name: spend(c) for name, c in (("pruned", pruned), ("full", full))}
    rankings = {name: rank(c) for name, c in (("pruned", pruned), ("full", full))}
    print(f"\nsweeps in {out}")
    for name, s in spent.items():
        r = rankings[name]
        print(f"{name:>6}: {s.spent:.4f} {s.unit} spent ({s.describe()}); best config "
              f"{r.best} at step {r.at_step}: best eval reward {r.value(r.best):.3f}")
        for label, why in r.near_ties.items():
            print(f"        {label}: {why}")
    ratio = spent["pruned"].spent / spent["full"].spent
    print(f"pruned / full compute: {ratio:.1%}")
    table = full.runs.set_index(LABEL)
    stops = pruned.runs.set_index(LABEL)
    full_rank = list(rankings["full"].table.index)
    print("\nconfig | full sweep: best eval reward (rank) | pruned sweep: status, last step")
    for label in full.labels:
        place = full_rank.index(label) + 1 if label in full_rank else "-"
        print(f"{label} | {table.at[label, 'best_eval_reward']:.3f} ({place}) | "
              f"{stops.at[label, 'status']}, {stops.at[label, 'steps_done']}")
    winner = rankings["pruned"].best
    where = full_rank.index(winner) + 1 if winner in full_rank else None
    print(f"\nthe pruned sweep's pick ranks {where} of {len(full_rank)} in the full sweep"
          + ("" if where != 1 else " (the same winner)"))


if __name__ == "__main__":
    main()
