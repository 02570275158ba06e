"""The cost of the KL term to the initial policy (`kl.beta` > 0) beside none: the train phase's
time, the reference's forward over the batch and the peak memory, each configuration in a process
of its own (`bench/step_time.py --train-only`, synthetic responses), in one run of this script.

    python bench/kl_reference.py                                     # qwen-rehearsal on the CPU
    python bench/kl_reference.py --model tiny --steps 30
    python bench/kl_reference.py --beta 0.04 --repeats 3 rollout_batch_size=32 train_batch_size=32

Defaults: the Qwen-shaped rehearsal model (Qwen2.5-Math-1.5B's vocabulary, 2 layers, 9.8M
parameters: the vocabulary's embedding is most of it, and the logits over it most of the time
and memory), 16 rollouts of a 32-token prompt and 32-token responses, one optimizer step of
8-sequence micro-batches, fp32 (32-true), GRPO-Clip.
With beta > 0 a frozen copy of the weights is loaded (no gradients, no optimizer state) and its
log-probs computed once per rollout batch; the zero-advantage skip is off then (the KL term is not
0 at zero advantage), so the comparison has no zero-advantage groups. It prints, for each
configuration, the median train and reference phases over the steps after the first and the
process's peak RSS, the medians of `--repeats` processes each, the two configurations' processes
taking turns (so that a machine's load weighs on both alike; the load averages are printed).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = ("rollout_batch_size=16", "train_batch_size=16", "micro_batch_size=8", "group_size=8",
         "sampling.max_new_tokens=32", "loss=grpo_clip")
PROMPT_TOKENS = 32


def measure(model: str, beta: float, steps: int, overrides: list[str]) -> dict[str, float]:
    """One `step_time.py --train-only` process: median phase seconds and its peak RSS (MiB)."""
    command = [sys.executable, str(ROOT / "bench" / "step_time.py"), "--model", model, "--train-only",
               "--steps", str(steps), "--prompt-tokens", str(PROMPT_TOKENS), *SIZES, f"kl.beta={beta}", *overrides]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    figures = {}
    for phase in ("old_log_probs", "reference_log_probs", "train"):
        found = re.search(rf"^{phase}\s+\S+\s+(\S+)", out, re.MULTILINE)
        figures[phase] = float(found[1]) if found else 0.0
    rss = re.search(r"^peak RSS: (\S+) MiB .*: (\S+) MiB\)", out, re.MULTILINE)
    figures["peak_rss_mib"], figures["reference_mib"] = float(rss[1]), float(rss[2])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "qwen-rehearsal"), default="qwen-rehearsal")
    parser.add_argument("--beta", type=float, default=0.04, help="kl.beta of the run with the term")
    parser.add_argument("--steps", type=int, default=6, help="train phases timed per process")
    parser.add_argument("--repeats", type=int, default=3, help="processes per configuration")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both configurations")
    args = parser.parse_intermixed_args()
    print(f"model={args.model} {' '.join(SIZES)} {' '.join(args.overrides)}; "
          f"{args.repeats} processes x {args.steps} train phases each, medians")
    print(f"load averages before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    runs: dict[float, list[dict[str, float]]] = {0.0: [], args.beta: []}
    for _ in range(args.repeats):
        for beta in runs:
            runs[beta].append(measure(args.model, beta, args.steps, args.overrides))
    print(f"load averages after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rows = {beta: {key: statistics.median(r[key] for r in done) for key in done[0]}
            for beta, done in runs.items()}
    print(f"{'kl.beta':<9}{'old_log_probs s':>17}{'reference s':>13}{'train s':>10}"
          f"{'old+ref+train s':>17}{'peak RSS MiB':>14}{'reference MiB':>15}")
    for beta, row in rows.items():
        total = row["old_log_probs"] + row["reference_log_probs"] + row["train"]
        print(f"{beta:<9g}{row['old_log_probs']:>17.4f}{row['reference_log_probs']:>13.4f}"
              f"{row['train']:>10.4f}{total:>17.4f}{row['peak_rss_mib']:>14.1f}{row['reference_mib']:>15.1f}")
    base, kl = rows[0.0], rows[args.beta]
    base_total = base["old_log_probs"] + base["train"]
    kl_total = kl["old_log_probs"] + kl["reference_log_probs"] + kl["train"]
    print(f"with the KL term: {kl_total / base_total:.2f}x the learner's time (train phase alone "
          f"{kl['train'] / base['train']:.2f}x), peak RSS +{kl['peak_rss_mib'] - base['peak_rss_mib']:.1f} "
          f"MiB (the reference's weights: {kl['reference_mib']:.1f} MiB)")


if __name__ == "__main__":
    main()
