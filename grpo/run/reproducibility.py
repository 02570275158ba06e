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
  none), after setting the cuBLAS workspace that deterministic cuBLAS needs.

What else a run's numbers depend on is pinned elsewhere: package versions by the lock
(requirements/), grading verdicts by a CPU-time rather than a wall-clock bound (grpo.grading.answers),
and the tiny model's build by its settings and the torch/transformers versions (grpo.models.tiny).
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

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
    else:
        torch.use_deterministic_algorithms(True)
