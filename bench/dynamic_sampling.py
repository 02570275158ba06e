"""Dynamic sampling's extra generation (zero_variance=dynamic_sampling, DAPO) on the toy task: the
rollouts each step generates beyond its batch, and what they cost in wall-clock, against a run that
keeps its zero-variance groups (zero_variance=keep), in one run of this script.

    python bench/dynamic_sampling.py                     # tiny model, toy task, 200 steps each
    python bench/dynamic_sampling.py --steps 600 zero_variance.max_rounds=2

It prints, for windows of the run, the mean extra rollouts a step as a fraction of
rollout_batch_size (the figure `zero_variance.expected_extra` prices: docs/development/benchmarks.md),
the share of steps that hit the bound (1 + max_rounds rounds), the keep run's share of zero-variance
groups over the same steps (what the rounds make up for), and the median step time of each run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir

from grpo.training.trainer import train

ROOT = Path(__file__).resolve().parents[1]


def run(overrides: list[str]) -> tuple[list[dict], int]:
    """The metrics rows of GRPO steps 1.. of a run of `overrides`, and its rollout_batch_size."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with tempfile.TemporaryDirectory() as run_dir:
        train(cfg, run_dir)
        rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["step"] >= 1], int(cfg.rollout_batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="GRPO steps per run")
    parser.add_argument("--window", type=int, default=50, help="steps per line of the table")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both runs")
    args = parser.parse_intermixed_args()
    base = ["model=tiny", "data=toy", "rollout=hf", "logging.wandb_mode=disabled",
            f"n_grpo_steps={args.steps}", f"eval.eval_every={args.steps}",
            "checkpoint.checkpoint_every=100000", "checkpoint.save_final_model=false",
            "logging.progress_every=100000"]
    dynamic, batch = run([*base, "zero_variance=dynamic_sampling", *args.overrides])
    keep, _ = run([*base, "zero_variance=keep",
                   *[o for o in args.overrides if not o.startswith("zero_variance.")]])
    bound = max(r["train/generation_rounds"] for r in dynamic)
    print(f"toy task, {args.steps} steps, overrides: {' '.join(args.overrides) or 'none'}")
    print(f"{'steps':<12}{'extra / batch':>14}{'at the bound':>14}{'keep: zero-var':>16}")
    for start in range(1, args.steps + 1, args.window):
        rows = [r for r in dynamic if start <= r["step"] < start + args.window]
        kept = [r for r in keep if start <= r["step"] < start + args.window]
        extra = statistics.mean(r["train/extra_rollouts"] for r in rows) / batch
        at_bound = statistics.mean(r["train/generation_rounds"] == bound for r in rows)
        zero = statistics.mean(r["train/frac_zero_std_groups"] for r in kept)
        print(f"{start:>4}-{start + len(rows) - 1:<7}{extra:>14.2f}{at_bound:>14.2f}{zero:>16.2f}")
    extra = statistics.mean(r["train/extra_rollouts"] for r in dynamic) / batch
    print(f"whole run: {extra:.2f} x rollout_batch_size extra a step (expected_extra={extra:.2f}), "
          f"{statistics.mean(r['train/generation_rounds'] for r in dynamic):.2f} rounds a step")
    for name, rows in (("dynamic_sampling", dynamic), ("keep", keep)):
        print(f"{name}: median step {statistics.median(r['time/step_s'] for r in rows):.3f} s, "
              f"rollout phase {statistics.median(r['time/rollout_s'] for r in rows):.3f} s, "
              f"eval/reward at step {args.steps} {rows[-1]['eval/reward']:.2f}")


if __name__ == "__main__":
    main()
