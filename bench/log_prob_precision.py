"""The error of the per-token log-probs and entropies of bf16 logits against fp64, and the cost of
computing them in fp32, before and after issue 59 item 11 (grpo/core/log_probs.py).

    python bench/log_prob_precision.py                  # 256 tokens, Qwen's vocabulary
    python bench/log_prob_precision.py --tokens 512 --train-tokens 1024 --reps 5

Under `bf16-mixed` the LM head runs under bf16 autocast, so the logits reach the log-softmax in
bf16. "before" is the formula the fp32 path keeps (`label_log_probs_as_is`, `entropy_as_is`)
applied to those bf16 logits, as every bf16 run computed them until then; "after" is
`label_log_probs` / `compute_entropy`, which widen bf16 logits to fp32 a chunk at a time.

Precision: synthetic Qwen-sized logits (vocabulary 151,936), each token's logits N(0, sd^2) with
one "top" token raised by U(10, 25) (so the distribution is peaked as a trained LM's is), rounded
to bf16 as the LM head's output is; labels sampled from each token's own distribution (as a
rollout's tokens are). Two references, both in fp64: the same bf16 logits (the log-softmax's own
error, what the code can fix) and the logits before rounding to bf16 (what the bf16 LM head adds;
the log-softmax cannot undo it).

Cost: one micro-batch of the train phase's log-prob head on the CPU: hidden states (train-tokens,
hidden) times a (vocabulary, hidden) fp32 weight under bf16 autocast, the log-probs and the
entropy (no grad) of the logits, a policy-gradient loss and its backward to the weight and the
hidden states. Each variant runs in a fresh process; peak memory is how far the process's resident
set rises over the step (the first one; Linux's VmHWM, reset before it), time the median of `--reps` further steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from grpo.core.log_probs import (
    compute_entropy,
    entropy_as_is,
    label_log_probs,
    label_log_probs_as_is,
)

VOCAB = 151_936
"""Qwen2.5's vocabulary (grpo.models.rehearsal.QWEN25_MATH_15B)."""

VARIANTS = {"before": (label_log_probs_as_is, entropy_as_is), "after": (label_log_probs, compute_entropy)}
"""Name -> (log-prob function, entropy function) of each variant."""


def synthetic_logits(tokens: int, sd: float, generator: torch.Generator) -> torch.Tensor:
    """(tokens, VOCAB) fp64 logits: N(0, sd^2) with one token a row raised by U(10, 25)."""
    logits = torch.randn(tokens, VOCAB, dtype=torch.float64, generator=generator) * sd
    top = torch.randint(0, VOCAB, (tokens, 1), generator=generator)
    lift = 10 + 15 * torch.rand(tokens, 1, dtype=torch.float64, generator=generator)
    return logits.scatter_add_(1, top, lift)


def fp64_reference(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(label log-probs, entropies) of `logits` computed in fp64."""
    log_p = torch.log_softmax(logits.double(), dim=-1)
    return log_p.gather(-1, labels[:, None]).squeeze(-1), -(log_p.exp() * log_p).sum(-1)


def precision(args: argparse.Namespace) -> None:
    generator = torch.Generator().manual_seed(args.seed)
    exact = synthetic_logits(args.tokens, args.sd, generator)
    labels = torch.multinomial(torch.softmax(exact, dim=-1), 1, generator=generator).squeeze(-1)
    logits = exact.to(torch.bfloat16)
    references = {"same bf16 logits": fp64_reference(logits, labels),
                  "logits before bf16 rounding": fp64_reference(exact, labels)}
    print(f"precision: {args.tokens} tokens x {VOCAB:,} logits (sd {args.sd}, a top token +U(10, 25)), "
          "bf16; error against fp64 (nats): mean / max")
    for name, (log_probs, entropy) in VARIANTS.items():
        with torch.autocast("cpu", dtype=torch.bfloat16):  # as the trainer calls them
            values = (log_probs(logits, labels).double(), entropy(logits).double())
        for reference_name, reference in references.items():
            errors = [(value - exact_value).abs() for value, exact_value in zip(values, reference, strict=True)]
            print(f"  {name:<7} vs {reference_name:<28} log-prob {errors[0].mean():.2e} / {errors[0].max():.2e}"
                  f"   entropy {errors[1].mean():.2e} / {errors[1].max():.2e}")


def train_step(variant: str, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
               advantages: torch.Tensor) -> None:
    """One micro-batch of the log-prob head forward and backward, as the train phase runs it."""
    log_probs_of, entropy_of = VARIANTS[variant]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = hidden @ weight.T
        log_probs = log_probs_of(logits, labels)
        with torch.no_grad():
            entropy_of(logits)
    (-(log_probs.float() * advantages).mean()).backward()


def memory_kib() -> dict[str, int]:
    """This process's resident set now (VmRSS) and at its peak (VmHWM), in KiB (Linux)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def cost_worker(args: argparse.Namespace) -> None:
    """Print {"peak_mib", "median_s"} of `args.worker`'s train step as one line of JSON."""
    torch.manual_seed(args.seed)
    hidden = torch.randn(args.train_tokens, args.hidden, requires_grad=True)
    weight = (torch.randn(VOCAB, args.hidden) / args.hidden**0.5).requires_grad_()
    labels = torch.randint(0, VOCAB, (args.train_tokens,))
    advantages = torch.randn(args.train_tokens)
    train_step(args.worker, hidden[:1], weight, labels[:1], advantages[:1])  # kernels and grads allocated
    Path("/proc/self/clear_refs").write_text("5")  # the peak resident set back to the current one
    start_kib = memory_kib()["VmRSS"]
    train_step(args.worker, hidden, weight, labels, advantages)
    peak_mib = (memory_kib()["VmHWM"] - start_kib) / 1024
    seconds = []
    for _ in range(args.reps):
        start = time.perf_counter()
        train_step(args.worker, hidden, weight, labels, advantages)
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"peak_mib": peak_mib, "median_s": statistics.median(seconds)}))


def cost(args: argparse.Namespace) -> None:
    logits_mib = args.train_tokens * VOCAB * 2 / 2**20
    print(f"train step on the CPU: {args.train_tokens} tokens, hidden {args.hidden}, bf16 logits "
          f"{logits_mib:.0f} MiB (fp32: {2 * logits_mib:.0f} MiB); {args.reps} timed steps, "
          f"{torch.get_num_threads()} threads")
    for variant in VARIANTS:
        command = [sys.executable, __file__, "--worker", variant, *sys.argv[1:]]
        result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        print(f"  {variant:<7} peak memory +{result['peak_mib']:.0f} MiB, {result['median_s']:.3f} s a step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--tokens", type=int, default=256, help="tokens of the precision part")
    parser.add_argument("--sd", type=float, default=3.0, help="sd of the synthetic logits")
    parser.add_argument("--train-tokens", type=int, default=512, help="tokens of the timed micro-batch")
    parser.add_argument("--hidden", type=int, default=64, help="hidden size of the timed head "
                        "(qwen-rehearsal's: 64; Qwen2.5-Math-1.5B's: 1536)")
    parser.add_argument("--reps", type=int, default=3, help="timed steps a variant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        cost_worker(args)
        return
    precision(args)
    cost(args)


if __name__ == "__main__":
    main()
