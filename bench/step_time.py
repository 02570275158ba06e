"""Seconds per GRPO step, split by phase, for a given config.

    python bench/step_time.py                                  # tiny model, toy task, CPU
    python bench/step_time.py --steps 30 loss=grpo_clip off_policy.epochs=2
    python bench/step_time.py --model qwen2.5-1.5b-shaped sampling.max_new_tokens=512  # on a GPU
    python bench/step_time.py rollout=vllm rollout.stale_check_every=10   # old_log_probs per step
    .venv-vllm/bin/python bench/step_time.py rollout=vllm       # vLLM on CPU (make test-vllm's venv)

`--model qwen2.5-1.5b-shaped` builds a model with Qwen2.5-Math-1.5B's architecture
(`grpo.models.rehearsal.QWEN25_MATH_15B`: 28 layers, hidden 1536, 12/2 heads, MLP 8960, vocabulary
151,936, tied embeddings) and random weights, with its tokenizer (`grpo.models.rehearsal`): nothing is
downloaded, and responses run to max_new_tokens as a random model rarely stops, which is the
expensive case. The first step (warm-up, kernel compilation) is reported apart from the rest. The
old_log_probs phase is also listed step by step: it runs only where the loss reads the probability
ratio or the stale-weight check is due (rollout.stale_check_every).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from transformers import AutoModelForCausalLM, Qwen2Config

from grpo.models.rehearsal import QWEN25_MATH_15B, write_qwen_tokenizer
from grpo.training.trainer import train

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("rollout", "scoring", "old_log_probs", "train", "weight_sync", "eval")


def build_qwen_shaped(directory: Path) -> Path:
    """A randomly initialised Qwen2.5-1.5B-shaped model (bf16) saved in `directory`."""
    if (directory / "config.json").exists():
        return directory
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**QWEN25_MATH_15B), dtype=torch.bfloat16)
    model.save_pretrained(directory)
    write_qwen_tokenizer(directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "qwen2.5-1.5b-shaped"), default="tiny")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps to time")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for launch.py")
    args = parser.parse_args()

    engine = [] if any(o.startswith("rollout=") for o in args.overrides) else ["rollout=hf"]
    base = ["data=toy", *engine, "logging.wandb_mode=disabled", f"n_grpo_steps={args.steps}",
            "checkpoint.checkpoint_every=100000", "checkpoint.save_final_model=false"]
    if args.model == "tiny":
        base.append("model=tiny")  # with data=toy: the CPU recipe (conf/recipe/tiny_toy.yaml)
    else:
        path = build_qwen_shaped(ROOT / ".cache" / "bench-qwen2.5-math-1.5b-shaped")
        base += ["recipe=tiny_toy", "prompt=toy", f"model.path={path}", "sampling.min_new_tokens=1",
                 "eval.n_examples=25"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=base + args.overrides)

    with tempfile.TemporaryDirectory() as run_dir:
        train(cfg, run_dir)
        rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in rows if r["step"] > 0]  # step 0 is the evaluation before the first step

    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    print(f"model={args.model} device={device} steps={len(records)} "
          f"rollout_batch_size={cfg.rollout_batch_size} group_size={cfg.group_size} "
          f"train_batch_size={cfg.train_batch_size} micro_batch_size={cfg.micro_batch_size} "
          f"epochs={cfg.off_policy.epochs} loss={cfg.loss.name} rollout={cfg.rollout.engine}")
    if args.overrides:
        print("overrides: " + " ".join(args.overrides))
    rest = records[1:] or records
    print(f"{'phase':<16}{'first step s':>14}{'median s':>12}{'mean s':>10}{'share':>8}  (steps)")
    total = sum(r["time/step_s"] for r in rest)
    for phase in PHASES + ("step",):
        key = f"time/{phase}_s"
        values = [r[key] for r in rest if key in r]
        if not values:
            continue
        print(f"{phase:<16}{records[0].get(key, 0.0):>14.4f}{statistics.median(values):>12.4f}"
              f"{statistics.mean(values):>10.4f}{sum(values) / total:>8.1%}  ({len(values)})")
    old = [r.get("time/old_log_probs_s") for r in records]
    print("old_log_probs s by step ('-': not computed; '*': stale-weight check ran): " + " ".join(
        f"{r['step']}:{'-' if v is None else f'{v:.4f}'}"
        f"{'*' if 'rollout/engine_logprob_abs_diff' in r else ''}" for r, v in zip(records, old, strict=True)))
    computed = [v for v in old if v is not None]
    print(f"old_log_probs computed on {len(computed)} of {len(records)} steps: "
          f"{sum(computed) / len(records):.4f} s per GRPO step on average (0 where skipped)")
    tokens = statistics.median(r["throughput/rollout_tokens_per_s"] for r in rest)
    print(f"rollout throughput (median): {tokens:,.0f} tokens/s; "
          f"mean response length {statistics.mean(r['train/mean_response_length'] for r in rest):.1f}")
    peaks = {k: max(r.get(k, 0.0) for r in records) for k in records[-1] if k.startswith("memory/")}
    for key, value in peaks.items():
        print(f"{key}: {value:.2f} GB")


if __name__ == "__main__":
    main()
