"""What the prompt-level average (`normalization=prompt`) and the batch std (`std_norm=batch`) cost
beside the defaults (`normalization=mean`, `std_norm=on`), on the CPU (issue 62 items 3 and 4).

    python bench/normalization_cost.py             # tiny model, 256 rollouts, 4 optimizer steps
    python bench/normalization_cost.py --reps 10 rollout_batch_size=512

Train phase: `GRPOTrainer.learn` on a synthetic scored batch (bench/step_time.py's
`synthetic_batch`: random prompts of `--prompt-tokens`, responses uniform in 1..`--response-tokens`,
half the groups at advantage exactly 0 and left out of the backward) for each length normalization,
each in `--rounds` fresh processes, interleaved: the median over them of each process's median of
`--reps` train phases (`time/train_s`, and the process's CPU seconds over the phase) after one
untimed, and the peak memory, how far the process's resident set rises over one train phase
(Linux's VmHWM, reset before it). The rows of the batch are
shuffled one by one and cut into optimizer steps of train_batch_size (64 of 256 by default), so
every step holds parts of groups and the prompt-level divisors are the step's per-prompt token
counts (`grpo.core.train_step.optimizer_step_totals`).

Scoring: the batch std changes only the advantages, computed once a GRPO step before training
(`grpo.core.advantages.compute_group_normalized_rewards`); its cost is timed there, on the
rollout batch's rewards, group std against batch std (the median of 1000 calls of each, interleaved).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from grpo.core.advantages import compute_group_normalized_rewards
from grpo.core.specs import LENGTH_NORMALIZATIONS
from grpo.core.train_step import optimizer_step_totals
from grpo.training.timing import PhaseTimer
from grpo.training.trainer import GRPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import synthetic_batch  # noqa: E402 -- bench/step_time.py, beside this file

ROOT = Path(__file__).resolve().parents[1]
BASE = ["model=tiny", "data=toy", "rollout=hf", "logging.wandb_mode=disabled",
        "rollout_batch_size=256", "train_batch_size=64", "micro_batch_size=16",
        "skip_zero_advantage=true", "loss=grpo_clip"]
"""The tiny model's CPU recipe at 256 rollouts (32 prompts of 8), 4 optimizer steps of 64."""


class CpuPhaseTimer(PhaseTimer):
    """The trainer's phase timer, also counting each phase's CPU seconds (this process's, every
    thread: less moved than the wall-clock by other work on a shared machine)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.cpu: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.process_time()
        with super().phase(name):
            yield
        self.cpu[name] = time.process_time() - start


def memory_kib() -> dict[str, int]:
    """This process's resident set now (VmRSS) and at its peak (VmHWM), in KiB (Linux)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def worker(args: argparse.Namespace) -> None:
    """Print {"median_s", "peak_mib"} of normalization `args.worker`'s train phase as JSON."""
    overrides = [*BASE, f"normalization={args.worker}", *args.overrides]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = GRPOTrainer(cfg, Path(run_dir))
        shape = argparse.Namespace(prompt_tokens=args.prompt_tokens,
                                   response_tokens=args.response_tokens, variable_lengths=True,
                                   zero_advantage_fraction=0.5)
        batch = synthetic_batch(cfg, trainer, shape)

        def learn(step: int) -> tuple[float, float]:
            """(wall-clock, CPU) seconds of the train phase of one `learn`."""
            timer = CpuPhaseTimer(trainer.device)
            batch.old_log_probs = None
            trainer.learn(batch, [], step, timer)
            return timer.metrics["time/train_s"], timer.cpu["train"]

        learn(2)  # from step 2: the stale-weight check is not due; kernels and gradients allocated
        Path("/proc/self/clear_refs").write_text("5")  # the peak resident set back to now
        start_kib = memory_kib()["VmRSS"]
        learn(3)
        peak_mib = (memory_kib()["VmHWM"] - start_kib) / 1024
        seconds = [learn(step) for step in range(4, 4 + args.reps)]
        trainer.tracker.finish()
        trainer.engine.close()
    print(json.dumps({"median_s": statistics.median(s for s, _ in seconds),
                      "median_cpu_s": statistics.median(c for _, c in seconds),
                      "peak_mib": peak_mib}))


def scoring(n: int, group_size: int, calls: int = 1000) -> dict[str, float]:
    """Median seconds of a `compute_group_normalized_rewards` call on `n` 0/1 rewards, by scope."""
    generator = torch.Generator().manual_seed(0)
    rewards = (torch.rand(n, generator=generator) < 0.3).float().tolist()
    scores = [{"reward": r, "format_reward": 1.0, "answer_reward": r} for r in rewards]
    responses = [str(i) for i in range(n)]
    seconds: dict[str, list[float]] = {"group": [], "batch": []}
    for _ in range(calls):
        for scope, times in seconds.items():  # interleaved: the same load on both
            start = time.perf_counter()
            compute_group_normalized_rewards(
                lambda response, _truth: scores[int(response)], responses, [None] * n,
                group_size, 1e-6, True, std_scope=scope)
            times.append(time.perf_counter() - start)
    return {scope: statistics.median(times) for scope, times in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--reps", type=int, default=10, help="timed train phases a process")
    parser.add_argument("--rounds", type=int, default=3, help="processes a normalization")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--response-tokens", type=int, default=32,
                        help="the longest synthetic response")
    parser.add_argument("--worker", choices=LENGTH_NORMALIZATIONS, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides after the bench's own")
    args = parser.parse_intermixed_args()
    if args.worker:
        worker(args)
        return
    print(f"train phase on the CPU ({torch.get_num_threads()} threads), "
          f"{' '.join([*BASE, *args.overrides])}, prompts {args.prompt_tokens} + responses "
          f"1..{args.response_tokens} tokens, half the groups at advantage 0; median of "
          f"{args.reps} phases, each normalization in a fresh process:")
    variants = ("mean", "token", "prompt")
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(args.rounds):  # the variants interleaved, so that a change of load hits each
        for normalization in variants:
            command = [sys.executable, __file__, "--worker", normalization, *sys.argv[1:]]
            out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
            results[normalization].append(json.loads(out.stdout.splitlines()[-1]))
    for normalization, rounds in results.items():
        wall, cpu = ([r[key] for r in rounds] for key in ("median_s", "median_cpu_s"))
        peak = [r["peak_mib"] for r in rounds]
        print(f"  normalization={normalization:<7} {statistics.median(wall):.4f} s a train phase "
              f"({statistics.median(cpu):.4f} CPU s; rounds {' '.join(f'{c:.3f}' for c in cpu)}), "
              f"peak memory +{max(peak):.1f} MiB at most")
    mask = torch.zeros(64, args.prompt_tokens + args.response_tokens)
    mask[:, args.prompt_tokens:] = 1
    prompt_ids = torch.randperm(256)[:64] // 8
    seconds = []
    for _ in range(1000):
        start = time.perf_counter()
        optimizer_step_totals(mask, prompt_ids)
        seconds.append(time.perf_counter() - start)
    print(f"optimizer_step_totals of one optimizer step (64 rows of {mask.shape[1]} tokens, "
          f"median of 1000): {statistics.median(seconds) * 1e6:.0f} us")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[*BASE, *args.overrides])
    medians = scoring(int(cfg.rollout_batch_size), int(cfg.group_size))
    print(f"advantages of {cfg.rollout_batch_size} rewards (compute_group_normalized_rewards, "
          f"median of 1000): std_norm=on {medians['group'] * 1e6:.0f} us, "
          f"std_norm=batch {medians['batch'] * 1e6:.0f} us")


if __name__ == "__main__":
    main()
