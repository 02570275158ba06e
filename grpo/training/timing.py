"""The wall-clock of a run: each GRPO step's named phases (`PhaseTimer`) and the run's totals
across resumes (`RunClock`).

A step's phases are `rollout` (or `rollout_wait` with overlap), `scoring`, `old_log_probs`,
`train`, `weight_sync` and `eval`; each gives `time/<phase>_s` (seconds) and, on CUDA,
`memory/<phase>_peak_gb` (GiB). `time/elapsed_s` is the run's total, continuing across resumes;
`time/elapsed_no_eval_s` the same minus every evaluation's `time/eval_s`: the training
wall-clock that comparisons use.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class PhaseTimer:
    """Wall-clock seconds (and peak CUDA memory, GB) of the named phases of one GRPO step;
    `started` is the step's start (`time.perf_counter()` seconds)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.metrics: dict[str, float] = {}
        self.started = time.perf_counter()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        yield
        if self.cuda:
            torch.cuda.synchronize()
            self.metrics[f"memory/{name}_peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
        self.metrics[f"time/{name}_s"] = time.perf_counter() - start


class RunClock:
    """The run's wall-clock from this process's start (seconds), on top of what the checkpoint
    it resumed from had counted (`elapsed_s`, `elapsed_no_eval_s`; 0 for a fresh run)."""

    def __init__(self, elapsed_s: float, elapsed_no_eval_s: float) -> None:
        self.elapsed_offset = elapsed_s
        self.elapsed_no_eval_offset = elapsed_no_eval_s
        self.started = time.perf_counter()
        self.eval_s = 0.0  # the evaluations' seconds since `started`
        self.now = self.started  # the end of the last row timed

    def elapsed(self, timer: PhaseTimer) -> dict[str, float]:
        """time/elapsed_s and time/elapsed_no_eval_s now, at the end of the row `timer` timed
        (its `time/eval_s`, if any, counted as evaluation)."""
        self.eval_s += timer.metrics.get("time/eval_s", 0.0)
        self.now = time.perf_counter()
        return {
            "time/elapsed_s": self.elapsed_offset + self.now - self.started,
            "time/elapsed_no_eval_s": self.elapsed_no_eval_offset + self.now - self.started - self.eval_s,
        }

    def step_times(self, timer: PhaseTimer, rollout_tokens: int) -> dict[str, float]:
        """At the end of the GRPO step `timer` timed: time/step_s, the elapsed times and
        throughput/rollout_tokens_per_s (the step's `rollout_tokens` per second of generation)."""
        elapsed = self.elapsed(timer)
        return {"time/step_s": self.now - timer.started, **elapsed,
                "throughput/rollout_tokens_per_s": rollout_tokens / max(timer.metrics["time/rollout_s"], 1e-9)}
