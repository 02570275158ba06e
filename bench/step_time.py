"""Seconds per GRPO step by phase, peak memory, tokens per second and the train phase's model
FLOP utilisation (MFU), for a given config.

    python bench/step_time.py                                  # tiny model, toy task, CPU
    python bench/step_time.py --steps 30 loss=grpo_clip off_policy.epochs=2
    python bench/step_time.py --model qwen2.5-1.5b-shaped model.device=cuda:0 rollout=hf  # GPU
    python bench/step_time.py --model qwen2.5-1.5b-shaped --train-only model.device=cuda:0 \\
        --zero-advantage-fraction 0.7                          # train phase alone, 70% zero-std groups
    python bench/step_time.py --model qwen-rehearsal --train-only --variable-lengths \
        rollout_batch_size=64 train_batch_size=64 sampling.max_new_tokens=256   # CPU, Qwen vocabulary
    python bench/step_time.py rollout=vllm rollout.stale_check_every=10   # old_log_probs per step
    .venv-vllm/bin/python bench/step_time.py rollout=vllm       # vLLM on CPU (make test-vllm's venv)

`--model qwen2.5-1.5b-shaped` builds a model with Qwen2.5-Math-1.5B's architecture
(`grpo.models.rehearsal.QWEN25_MATH_15B`: 28 layers, hidden 1536, 12/2 heads, MLP 8960, vocabulary
151,936, tied embeddings) and random weights, with its tokenizer: nothing is downloaded. It runs
with the `qwen2.5-math-1.5b` preset and the root config's sizes (the handout's: rollout 256, group
8, 1024 new tokens, lr 1e-5, the preset's precision and token budget) unless overrides say
otherwise; only evaluation is cut to `eval.n_examples=8` (its step-0 row is not timed). A random
model rarely stops, so responses run to max_new_tokens: the expensive case.

`--train-only` replaces rollouts by a synthetic scored batch of the config's size: random prompts
of `--prompt-tokens` and responses of `--response-tokens` (default sampling.max_new_tokens; with
`--variable-lengths`, uniform in 1..that), random advantages with `--zero-advantage-fraction` of the
groups at exactly 0. It times what `GRPOTrainer.learn` runs (old log-probs where the loss reads
them, the reference policy's with `kl.beta` > 0, then the optimizer steps) `--steps` times on that
batch, and prints the process's peak resident memory (on a CPU the only memory figure).

MFU counts the model FLOPs the train phase runs (6 N per token forward and backward on trained
rollouts, 2 N per token for the inference forward of left-out ones, attention 12 L H S^2 and 4 L H
S^2 per sequence; N without the input embedding) against `--peak-tflops` (default: the card's bf16
dense peak for H100/H200, 989 TFLOP/s; none on a CPU, where only TFLOP/s is printed).
The first step (warm-up, kernel compilation) is reported apart from the rest.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from transformers import AutoModelForCausalLM, Qwen2Config

from grpo.models.rehearsal import QWEN25_MATH_15B, write_qwen_tokenizer
from grpo.sweep.job_loss import compose_single_run, single_run_arguments
from grpo.training.rollouts import RolloutBatch
from grpo.training.timing import PhaseTimer
from grpo.training.trainer import GRPOTrainer, train

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("rollout", "rollout_wait", "scoring", "old_log_probs", "reference_log_probs", "train",
          "weight_sync", "eval")
PEAK_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}
"""Dense bf16 tensor-core peaks (TFLOP/s) by a name in `torch.cuda.get_device_name()`."""


def build_qwen_shaped(directory: Path) -> Path:
    """A randomly initialised Qwen2.5-1.5B-shaped model (bf16) saved in `directory`."""
    if (directory / "config.json").exists():
        return directory
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**QWEN25_MATH_15B), dtype=torch.bfloat16)
    model.save_pretrained(directory)
    write_qwen_tokenizer(directory)
    return directory


def synthetic_batch(cfg: DictConfig, trainer: GRPOTrainer, args: argparse.Namespace) -> RolloutBatch:
    """A scored rollout batch of the config's size with random tokens (see the module docstring)."""
    generator = torch.Generator().manual_seed(0)
    n, group = int(cfg.rollout_batch_size), int(cfg.group_size)
    prompt, most = args.prompt_tokens, args.response_tokens or int(cfg.sampling.max_new_tokens)
    lengths = (torch.randint(1, most + 1, (n,), generator=generator) if args.variable_lengths
               else torch.full((n,), most))
    width = prompt + most
    ids = torch.randint(0, len(trainer.tokenizer), (n, width), generator=generator)
    response_mask = torch.zeros(n, width - 1)
    for row, length in enumerate(lengths.tolist()):
        response_mask[row, prompt - 1 : prompt - 1 + length] = 1.0
    advantages = torch.randn(n, generator=generator)
    zero_groups = torch.randperm(n // group, generator=generator)[: round(args.zero_advantage_fraction * n / group)]
    advantages.view(-1, group)[zero_groups] = 0.0
    device = trainer.device
    return RolloutBatch(
        input_ids=ids[:, :-1].to(device), labels=ids[:, 1:].to(device),
        response_mask=response_mask.to(device), advantages=advantages.to(device),
        raw_rewards=(advantages > 0).float().to(device),
        order=torch.randperm(n, generator=generator),
    )


def model_flops(trainer: GRPOTrainer, batch: RolloutBatch, epochs: int) -> tuple[float, float]:
    """(train-phase model FLOPs, old-log-prob-phase model FLOPs) of one GRPO step on `batch`."""
    config = trainer.policy.config
    n_params = sum(p.numel() for p in trainer.policy.parameters())
    if not config.tie_word_embeddings:  # the input embedding is a lookup, not a matmul
        n_params -= trainer.policy.get_input_embeddings().weight.numel()
    attention = config.num_hidden_layers * config.hidden_size
    lengths = torch.tensor(batch.lengths(batch.order), dtype=torch.float64)
    left_out = trainer.left_out(batch, batch.order).double()
    per_sequence_forward = 2 * n_params * lengths + 4 * attention * lengths**2
    train_phase = epochs * float((per_sequence_forward * (3 - 2 * left_out)).sum())
    return train_phase, float((per_sequence_forward * (1 - left_out)).sum())


def train_only(cfg: DictConfig, args: argparse.Namespace) -> None:
    """Time `GRPOTrainer.learn` on a synthetic batch `args.steps` times."""
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = GRPOTrainer(cfg, Path(run_dir))
        reference_mib = sum(p.numel() * p.element_size() for p in trainer.reference.parameters()
                            ) / 2**20 if trainer.reference is not None else 0.0
        batch = synthetic_batch(cfg, trainer, args)
        records = []
        for step in range(2, args.steps + 2):  # from 2: the stale-weight check is not due
            timer = PhaseTimer(trainer.device)
            batch.old_log_probs = batch.ref_log_probs = None
            metrics = trainer.learn(batch, [], step, timer)
            records.append({**metrics, **timer.metrics})
        epochs = int(cfg.off_policy.epochs)
        flops, old_flops = model_flops(trainer, batch, epochs)
        tokens = sum(batch.lengths(batch.order))  # prompt and response tokens, no padding
        computed = sum(batch.lengths(batch.order[~trainer.left_out(batch, batch.order)]))
        trainer.tracker.finish()
        trainer.engine.close()
    rest = records[1:] or records
    print(f"train-only: {len(batch.order)} sequences, {tokens:,} tokens ({args.prompt_tokens} prompt "
          f"+ {'up to ' if args.variable_lengths else ''}{args.response_tokens or cfg.sampling.max_new_tokens}"
          f" response each), zero-advantage groups {args.zero_advantage_fraction:.0%}, "
          f"left out: {statistics.mean(r['train/frac_skipped'] for r in rest):.0%}")
    print_phases(records, ("old_log_probs", "reference_log_probs", "train"))
    peak = args.peak_tflops or peak_tflops()
    for phase, phase_flops, processed in (("train", flops, epochs * tokens),
                                          ("old_log_probs", old_flops, computed)):
        seconds = [r[f"time/{phase}_s"] for r in rest if f"time/{phase}_s" in r]
        if seconds:
            achieved = phase_flops / statistics.median(seconds) / 1e12
            mfu = f", MFU {achieved / peak:.1%} of {peak:g}" if peak else " (no peak known: --peak-tflops)"
            print(f"{phase}: {processed / statistics.median(seconds):,.0f} tokens/s, "
                  f"{achieved:.3f} TFLOP/s{mfu}")
    print_memory(records)
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB "
          f"(the process's, weights of the reference included: {reference_mib:.1f} MiB)")


def peak_tflops() -> float | None:
    """The bf16 dense peak of this machine's GPU, if known."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), None)


def print_phases(records: list[dict], phases: tuple[str, ...]) -> None:
    rest = records[1:] or records
    total = sum(sum(r.get(f"time/{p}_s", 0.0) for p in phases) for r in rest)
    print(f"{'phase':<16}{'first step s':>14}{'median s':>12}{'mean s':>10}{'share':>8}  (steps)")
    for phase in phases:
        key = f"time/{phase}_s"
        values = [r[key] for r in rest if key in r]
        if values:
            print(f"{phase:<16}{records[0].get(key, 0.0):>14.4f}{statistics.median(values):>12.4f}"
                  f"{statistics.mean(values):>10.4f}{sum(values) / total:>8.1%}  ({len(values)})")


def print_memory(records: list[dict]) -> None:
    peaks = {k: max(r.get(k, 0.0) for r in records) for k in records[-1] if k.startswith("memory/")}
    for key, value in peaks.items():
        print(f"{key}: {value:.2f} GiB")


def whole_steps(cfg: DictConfig) -> None:
    """Run `cfg` for n_grpo_steps and print each phase's time, old log-probs step by step, the
    rollout throughput and peak memory."""
    with tempfile.TemporaryDirectory() as run_dir:
        train(cfg, run_dir)
        rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in rows if r["step"] > 0]  # step 0 is the evaluation before the first step
    rest = records[1:] or records
    print_phases(records, (*PHASES, "step"))
    old = [r.get("time/old_log_probs_s") for r in records]
    print("old_log_probs s by step ('-': not computed; '*': stale-weight check ran): " + " ".join(
        f"{r['step']}:{'-' if v is None else f'{v:.4f}'}"
        f"{'*' if 'rollout/engine_logprob_abs_diff' in r else ''}" for r, v in zip(records, old, strict=True)))
    computed = [v for v in old if v is not None]
    print(f"old_log_probs computed on {len(computed)} of {len(records)} steps: "
          f"{sum(computed) / len(records):.4f} s per GRPO step on average (0 where skipped)")
    tokens = statistics.median(r["throughput/rollout_tokens_per_s"] for r in rest)
    print(f"rollout throughput (median): {tokens:,.0f} tokens/s; "
          f"mean response length {statistics.mean(r['train/mean_response_length'] for r in rest):.1f}; "
          f"left out of the backward: {statistics.mean(r['train/frac_skipped'] for r in rest):.0%}")
    print_memory(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "qwen-rehearsal", "qwen2.5-1.5b-shaped"),
                        default="tiny")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps (or train phases) to time")
    parser.add_argument("--train-only", action="store_true",
                        help="time the train phase on a synthetic batch instead of whole steps")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="--train-only prompt length")
    parser.add_argument("--response-tokens", type=int, default=None,
                        help="--train-only response length (default: sampling.max_new_tokens)")
    parser.add_argument("--variable-lengths", action="store_true",
                        help="--train-only responses uniform in 1..--response-tokens")
    parser.add_argument("--zero-advantage-fraction", type=float, default=0.0,
                        help="--train-only: fraction of groups whose advantages are all 0")
    parser.add_argument("--peak-tflops", type=float, default=None, help="peak for the MFU (TFLOP/s)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for launch.py")
    args = parser.parse_intermixed_args()

    engine = [] if any(o.startswith("rollout=") for o in args.overrides) else ["rollout=hf"]
    base = ["data=toy", *engine, "logging.wandb_mode=disabled", f"n_grpo_steps={args.steps}",
            "checkpoint.checkpoint_every=100000", "checkpoint.save_final_model=false"]
    if args.model != "qwen2.5-1.5b-shaped":
        # tiny with data=toy: the CPU recipe (conf/recipe/tiny_toy.yaml); qwen-rehearsal: the
        # Qwen vocabulary on a 2-layer model, the root config's sizes (pass CPU-sized ones)
        base.append(f"model={args.model}")
    else:
        path = build_qwen_shaped(ROOT / ".cache" / "bench-qwen2.5-math-1.5b-shaped")
        base += ["model=qwen2.5-math-1.5b", f"model.path={path}", "eval.n_examples=8"]
    # the loss launch.py would run (an off-policy plan that names no loss: GRPO-Clip)
    argv = base + args.overrides
    overrides = single_run_arguments(argv, compose_single_run(argv, ROOT / "conf", "config"))
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)

    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    print(f"model={args.model} device={device} precision={cfg.model.precision} "
          f"rollout_batch_size={cfg.rollout_batch_size} group_size={cfg.group_size} "
          f"train_batch_size={cfg.train_batch_size} micro_batch_size={cfg.micro_batch_size} "
          f"micro_batch_tokens={cfg.model.micro_batch_tokens} epochs={cfg.off_policy.epochs} "
          f"loss={cfg.loss.name} skip_zero_advantage={cfg.skip_zero_advantage} "
          f"gradient_checkpointing={cfg.model.gradient_checkpointing} rollout={cfg.rollout.engine}")
    if args.overrides:
        print("overrides: " + " ".join(args.overrides))
    (train_only if args.train_only else whole_steps)(cfg, *([args] if args.train_only else []))


if __name__ == "__main__":
    main()
