"""The train phase's time and memory for each loss on the CPU: GSPO and CISPO beside GRPO-Clip.

    python bench/loss_cost.py                                   # tiny model, then the loss alone
    python bench/loss_cost.py --losses grpo_clip gspo cispo reinforce_with_baseline --steps 20
    python bench/loss_cost.py --model qwen-rehearsal --rollouts 16 --train-batch 16 --micro-batch 2 \\
        --response-tokens 64 --steps 3                          # the Qwen vocabulary's logits

Two parts, each loss in a fresh process of its own (so that one's allocations do not lower
another's peak):

1. The trainer's train phase: `GRPOTrainer.learn` (the old-log-prob pass every one of these
   losses reads, then `off_policy.epochs` epochs of optimizer steps) on a synthetic scored batch
   (bench/step_time.py's `synthetic_batch`: random prompts of `--prompt-tokens` and responses of
   up to `--response-tokens`, random advantages), `--steps` times after one untimed step; the
   median of time/old_log_probs_s and time/train_s, and how far the process's resident set rises
   over the first step (Linux's VmHWM, reset before it: the activations, gradients and AdamW's
   state; later steps reuse what the allocator kept) as its peak memory. With the defaults, 2
   epochs of 2 optimizer steps: three of the four see a ratio other than 1, so clip and cap act.
   Beside the phases' wall-clock, the CPU time of the whole learn() call (the process's).
2. The loss alone: `grpo_share_train_step` (per-token loss, length normalization, backward) on
   (`--rows`, `--columns`) log-probs with a ratio of exp(N(0, 0.1^2)) per token and responses of
   random length: the fastest of `--reps` calls (the least disturbed by other work on the
   machine; an elementwise loss takes milliseconds), their median, and their median CPU time
   (the process's, both threads: what a loaded machine moves least), the resident set's rise
   over the first call, and the
   bytes autograd saves for the backward (counted by `torch.autograd.graph.saved_tensors_hooks`:
   what the loss holds between forward and backward, exactly, beside the model's activations).

Each loss runs with its yaml's hyperparameters (conf/loss/<name>.yaml). The losses take turns
over `--rounds` rounds (a fresh process each time), so that a change of the machine's load moves
them alike; the figures are the median over rounds, the time's range over rounds beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from step_time import synthetic_batch  # noqa: E402

from grpo.core.losses import POLICY_LOSSES  # noqa: E402
from grpo.core.train_step import OptimizerStepTotals, grpo_share_train_step  # noqa: E402
from grpo.training.timing import PhaseTimer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOSSES = ("grpo_clip", "gspo", "cispo")


def memory_kib() -> dict[str, int]:
    """This process's resident set now (VmRSS) and at its peak (VmHWM), in KiB (Linux)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def reset_peak() -> int:
    """Set the peak resident set back to the current one; the current one in KiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return memory_kib()["VmRSS"]


def hyperparameters(loss: str) -> dict[str, float]:
    cfg = OmegaConf.load(ROOT / "conf" / "loss" / f"{loss}.yaml")
    return {key: cfg[key] for key in POLICY_LOSSES[loss].hyperparameters}


def train_phase_worker(args: argparse.Namespace) -> dict[str, float]:
    """Part 1 for loss `args.worker`."""
    from hydra import compose, initialize_config_dir

    from grpo.training.trainer import GRPOTrainer

    overrides = [f"model={args.model}", "data=toy", "rollout=hf", f"loss={args.worker}",
                 "logging.wandb_mode=disabled", f"rollout_batch_size={args.rollouts}",
                 f"train_batch_size={args.train_batch}", f"micro_batch_size={args.micro_batch}",
                 f"off_policy.epochs={args.epochs}", f"sampling.max_new_tokens={args.response_tokens}",
                 "skip_zero_advantage=false", "eval.n_examples=8"]
    if args.model_path:
        overrides.append(f"model.path={args.model_path}")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    batch_args = argparse.Namespace(prompt_tokens=args.prompt_tokens, response_tokens=None,
                                    variable_lengths=True, zero_advantage_fraction=0.0)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = GRPOTrainer(cfg, Path(run_dir))
        batch = synthetic_batch(cfg, trainer, batch_args)
        records, peaks = [], []
        for step in range(2, args.steps + 3):  # from 2: the stale-weight check is not due
            batch.old_log_probs = None
            start = reset_peak()
            timer = PhaseTimer(trainer.device)
            cpu = time.process_time()
            metrics = trainer.learn(batch, [], step, timer)
            peaks.append((memory_kib()["VmHWM"] - start) / 1024)
            records.append({**metrics, **timer.metrics, "cpu_s": time.process_time() - cpu})
        trainer.tracker.finish()
        trainer.engine.close()
    timed = records[1:]
    return {"old_log_probs_s": statistics.median(r["time/old_log_probs_s"] for r in timed),
            "train_s": statistics.median(r["time/train_s"] for r in timed),
            "cpu_s": statistics.median(r["cpu_s"] for r in timed),
            "peak_mib": peaks[0], "tokens": float(batch.response_mask.sum()),
            "clip_fraction": statistics.mean(r["train/clip_fraction"] for r in timed),
            "cap_fraction": statistics.mean(r.get("train/cap_fraction", 0.0) for r in timed)}


def loss_alone_worker(args: argparse.Namespace) -> dict[str, float]:
    """Part 2 for loss `args.worker`."""
    generator = torch.Generator().manual_seed(0)
    rows, columns = args.rows, args.columns
    old = -3 * torch.rand(rows, columns, generator=generator)
    log_ratio = 0.1 * torch.randn(rows, columns, generator=generator)
    lengths = torch.randint(1, columns + 1, (rows,), generator=generator)
    mask = (torch.arange(columns) < lengths[:, None]).float()
    advantages = torch.randn(rows, 1, generator=generator)
    totals = OptimizerStepTotals(rows, int(lengths.sum()), int(lengths.max()))
    extra = hyperparameters(args.worker)

    def step(saved: list[int] | None = None) -> None:
        leaf = (old + log_ratio).requires_grad_(True)

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            if saved is not None:
                saved.append(tensor.numel() * tensor.element_size())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            grpo_share_train_step(leaf, mask, args.worker, totals, advantages=advantages,
                                  raw_rewards=advantages, old_log_probs=old,
                                  length_normalization="mean", **extra)

    saved: list[int] = []
    start = reset_peak()
    step(saved)  # the first: what it allocates is the rise (later calls reuse the allocator's)
    peak_mib = (memory_kib()["VmHWM"] - start) / 1024
    seconds, cpu = [], []
    for _ in range(args.reps):
        begin, begin_cpu = time.perf_counter(), time.process_time()
        step()
        seconds.append(time.perf_counter() - begin)
        cpu.append(time.process_time() - begin_cpu)
    return {"median_s": statistics.median(seconds), "fastest_s": min(seconds),
            "cpu_s": statistics.median(cpu), "peak_mib": peak_mib,
            "saved_mib": sum(saved) / 2**20}


def run_worker(part: str, loss: str) -> dict[str, float]:
    command = [sys.executable, __file__, "--part", part, "--worker", loss, *sys.argv[1:]]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{part} worker for {loss} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def rounds(part: str, losses: list[str], n: int) -> dict[str, dict[str, list[float]]]:
    """Each loss's worker results over `n` rounds, the losses in turn (rotated each round)."""
    results: dict[str, dict[str, list[float]]] = {loss: {} for loss in losses}
    for i in range(n):
        for loss in losses[i % len(losses):] + losses[: i % len(losses)]:
            for key, value in run_worker(part, loss).items():
                results[loss].setdefault(key, []).append(value)
    return results


def spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    """``median (min-max)``."""
    return (f"{scale * statistics.median(values):.{digits}f} "
            f"({scale * min(values):.{digits}f}-{scale * max(values):.{digits}f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--losses", nargs="+", default=list(LOSSES), choices=tuple(POLICY_LOSSES))
    parser.add_argument("--model", choices=("tiny", "qwen-rehearsal"), default="tiny")
    parser.add_argument("--model-path", default=None, help="a built model's folder (default: the cache)")
    parser.add_argument("--rollouts", type=int, default=256, help="part 1: rollout_batch_size")
    parser.add_argument("--train-batch", type=int, default=128, help="part 1: train_batch_size")
    parser.add_argument("--micro-batch", type=int, default=32, help="part 1: micro_batch_size")
    parser.add_argument("--epochs", type=int, default=2, help="part 1: off_policy.epochs")
    parser.add_argument("--prompt-tokens", type=int, default=16, help="part 1: prompt length")
    parser.add_argument("--response-tokens", type=int, default=48,
                        help="part 1: the longest response (lengths uniform in 1..it)")
    parser.add_argument("--steps", type=int, default=10, help="part 1: timed learn() calls")
    parser.add_argument("--rows", type=int, default=256, help="part 2: sequences")
    parser.add_argument("--columns", type=int, default=1024, help="part 2: positions a sequence")
    parser.add_argument("--reps", type=int, default=20, help="part 2: timed calls")
    parser.add_argument("--rounds", type=int, default=3, help="turns of every loss, each in a fresh process")
    parser.add_argument("--skip", choices=("train", "alone"), default=None, help="leave a part out")
    parser.add_argument("--part", choices=("train", "alone"), help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker = train_phase_worker if args.part == "train" else loss_alone_worker
        print(json.dumps(worker(args)))
        return
    print(f"{torch.get_num_threads()} threads; each loss with its conf/loss yaml: "
          + "; ".join(f"{loss} {hyperparameters(loss)}" for loss in args.losses))
    if args.skip != "train":
        print(f"\n1. train phase: model={args.model}, {args.rollouts} rollouts of {args.prompt_tokens} "
              f"prompt + 1..{args.response_tokens} response tokens, train_batch_size "
              f"{args.train_batch}, micro-batches of {args.micro_batch}, {args.epochs} epochs; "
              f"median of {args.steps} learn() calls a process, {args.rounds} rounds")
        print(f"{'loss':<12}{'old log-probs s':>24}{'train s':>24}{'learn CPU s':>24}{'peak MiB':>10}"
              f"{'clipped':>9}{'capped':>8}")
        for loss, r in rounds("train", args.losses, args.rounds).items():
            print(f"{loss:<12}{spread(r['old_log_probs_s']):>24}{spread(r['train_s']):>24}"
                  f"{spread(r['cpu_s']):>24}{statistics.median(r['peak_mib']):>10.1f}{statistics.median(r['clip_fraction']):>9.3f}"
                  f"{statistics.median(r['cap_fraction']):>8.3f}")
    if args.skip != "alone":
        print(f"\n2. the loss alone: grpo_share_train_step on ({args.rows}, {args.columns}) fp32 "
              f"log-probs, normalization=mean; the fastest and the median of {args.reps} calls a "
              f"process, {args.rounds} rounds")
        print(f"{'loss':<12}{'fastest ms':>24}{'median ms':>24}{'CPU ms':>24}{'peak MiB':>10}"
              f"{'saved for backward MiB':>24}")
        for loss, r in rounds("alone", args.losses, args.rounds).items():
            print(f"{loss:<12}{spread(r['fastest_s'], 1e3, 1):>24}{spread(r['median_s'], 1e3, 1):>24}"
                  f"{spread(r['cpu_s'], 1e3, 1):>24}"
                  f"{statistics.median(r['peak_mib']):>10.1f}{statistics.median(r['saved_mib']):>24.2f}")

if __name__ == "__main__":
    main()
