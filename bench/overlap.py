"""Step time with one step of overlap (off_policy.staleness=1) against none, in one run of this script.

    python bench/overlap.py                       # tiny model, toy task, 2 cores: 1 trains, 1 generates
    python bench/overlap.py --steps 100 rollout_batch_size=128 train_batch_size=128 micro_batch_size=128
    python bench/overlap.py --model qwen-rehearsal rollout_batch_size=32 train_batch_size=32 \\
        micro_batch_size=8 sampling.max_new_tokens=32 group_size=8   # the Qwen vocabulary

Both runs use the same engine, `rollout=hf_process` (generation in a process of its own with its
own weights, on `rollout.threads` cores pinned apart from the trainer's), so the one difference
is whether the next batch is generated while this step trains. The tiny recipe's sizes (64
rollouts of up to 8 tokens, one optimizer step) give a generation and a train phase of similar
length, where overlap pays most: a step then costs about max(generate, train) + sync instead of
their sum. It prints the median of each phase and of the whole step over the steps after the
first (warm-up), and the ratio of the median step times.
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
PHASES = ("rollout", "rollout_wait", "scoring", "old_log_probs", "train", "weight_sync", "step")


def timed_run(overrides: list[str]) -> list[dict]:
    """The metrics rows of GRPO steps 2.. of a run of `overrides` (step 1 warms up)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with tempfile.TemporaryDirectory() as run_dir:
        train(cfg, run_dir)
        rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["step"] >= 2]


def median(rows: list[dict], phase: str) -> float | None:
    values = [r[f"time/{phase}_s"] for r in rows if f"time/{phase}_s" in r]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "qwen-rehearsal"), default="tiny")
    parser.add_argument("--steps", type=int, default=60, help="GRPO steps per run")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both runs")
    args = parser.parse_intermixed_args()
    base = [f"model={args.model}", "data=toy", "rollout=hf_process", "cluster.cpus_per_job=2",
            "logging.wandb_mode=disabled", f"n_grpo_steps={args.steps}",
            f"eval.eval_every={args.steps * 10}", "eval.n_examples=8",
            "checkpoint.checkpoint_every=100000", "checkpoint.save_final_model=false",
            "logging.progress_every=100000", *args.overrides]
    print(f"model={args.model} steps={args.steps} rollout=hf_process, 1 trainer core + 1 rollout "
          f"core; overrides: {' '.join(args.overrides) or 'none'}")
    runs = {staleness: timed_run([*base, f"off_policy.staleness={staleness}"]) for staleness in (0, 1)}
    print(f"{'median s (steps 2..)':<22}{'staleness 0':>14}{'staleness 1':>14}")
    for phase in PHASES:
        cells = [median(runs[s], phase) for s in (0, 1)]
        print(f"{phase:<22}" + "".join(f"{'-' if c is None else f'{c:.4f}':>14}" for c in cells))
    weights = [r["train/is_weight_mean"] for r in runs[1] if "train/is_weight_mean" in r]
    capped = [r["train/is_capped_fraction"] for r in runs[1] if "train/is_capped_fraction" in r]
    print(f"staleness 1: importance weight mean {statistics.mean(weights):.4f}, capped fraction "
          f"{statistics.mean(capped):.4f} (means over steps)")
    ratio = median(runs[1], "step") / median(runs[0], "step")
    print(f"step time, staleness 1 / staleness 0: {ratio:.2f}x")


if __name__ == "__main__":
    main()
