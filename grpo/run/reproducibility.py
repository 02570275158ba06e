"""The process-wide settings that make a run repeatable: same config and seed, same curve, whatever
the machine's load and however many runs share it.

`make_reproducible` is called once at the start of a run, before the model is built:
- every global generator is seeded (python `random`, numpy, torch on the CPU and every CUDA
  device); the rollout engine, the prompt sampler and the training order draw from their own
  generators, seeded from the config and the step;
- torch's intra-op threads are fixed to `threads` (`cluster.cpus_per_job`): CPU kernels split
  their sums by thread count, so the count is part of the config, never the machine's core count;
  inter-op threads are left alone (eager training does not use them);
- torch is asked for deterministic algorithms; on CUDA with `warn_only` (a few kernels have
  none), after setting the cuBLAS workspace that deterministic cuBLAS needs;
- the CPU kernels are the pinned ones (`grpo.run.cpu_numerics`, set before torch loaded): the
  run logs which kernels torch runs, and warns when they are not the pinned ones (the user
  opted out, or the CPU lacks AVX2), since its numbers then match only CPUs of its vector width.

On CUDA the run says in its log what is not reproducible there: attention backward kernels
(cuDNN, flash) with no deterministic variant run anyway under `warn_only`, and vLLM's sampling
is not bit-reproducible between runs.

What else a run's numbers depend on is pinned elsewhere: package versions by the lock
(requirements/), grading verdicts by a CPU-time rather than a wall-clock bound (grpo.grading.answers),
and the tiny model's build by its settings and the torch/transformers versions (grpo.models.tiny).
"""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import torch

from grpo.run.cpu_numerics import CPU_NUMERICS, PINNED_TORCH_CAPABILITY, pins_apply

log = logging.getLogger(__name__)

# cuBLAS is deterministic only with a fixed workspace (PyTorch's "Reproducibility" notes)
CUBLAS_WORKSPACE = ":4096:8"


def make_reproducible(seed: int, threads: int, device: torch.device) -> None:
    """Seed every global generator with `seed`, run torch's CPU kernels on `threads` threads, and
    use deterministic algorithms (strictly on the CPU; warn-only on CUDA)."""
    if threads < 1:
        raise ValueError(f"cluster.cpus_per_job must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # the CPU and every CUDA device
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.use_deterministic_algorithms(True, warn_only=True)
        log.info("on CUDA, runs of one config and seed are not bit-equal: attention backward "
                 "kernels without a deterministic variant run anyway (warn-only), and vLLM's "
                 "sampling is not reproducible between runs")
    else:
        torch.use_deterministic_algorithms(True)
    log_cpu_numerics()


def log_cpu_numerics() -> None:
    """Log the CPU kernels torch runs; warn where they are not the pinned ones."""
    capability = torch.backends.cpu.get_cpu_capability()
    settings = ", ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in CPU_NUMERICS)
    if pins_apply() and capability != PINNED_TORCH_CAPABILITY:
        log.warning(f"torch runs its {capability} CPU kernels, not the pinned "
                    f"{PINNED_TORCH_CAPABILITY} ones ({settings}): this run's numbers match only "
                    f"CPUs with the same vector width (grpo/run/cpu_numerics.py)")
    else:
        log.info(f"CPU numerics: torch {capability} kernels ({settings})")
