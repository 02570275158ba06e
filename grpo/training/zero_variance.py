"""What a GRPO step does with its zero-variance groups (`zero_variance=keep|filter|dynamic_sampling`):
the groups whose rewards are all equal, so that every advantage in them is exactly 0.

- `keep` (the CS336 loop, the default): they stay in the batch and in the normalization's
  denominators (sequences, response tokens, longest response of each optimizer step); with
  `skip_zero_advantage` they are left out of the backward, which leaves the gradient unchanged
  (their loss is 0).
- `filter` (ScaleRL's zero-variance filtering, Khatri et al. 2025): they are left out of the loss
  and of its denominators: the gradient is that of the batch without them (larger by the share
  they held, for `mean`). An optimizer step left with no rollout takes no step.
- `dynamic_sampling` (DAPO, Yu et al. 2025; verl's `algorithm.filter_groups`): after the step's
  first round of rollout_batch_size / group_size prompts, more rounds of as many prompts are
  drawn and generated, at most `zero_variance.max_rounds` of them, until the step holds that many
  groups with non-zero variance; the first ones found are trained (surplus ones are dropped), and
  where the bound is hit the batch is made up with the zero-variance groups drawn first, which
  are then filtered as with `filter`. Every round is graded while it is generated (its grades
  serve the scoring), and its rollouts count in `train/extra_rollouts`, in `time/rollout_s` and
  in the dry run's price (`expected_extra`).

This module is torch-free (the config checks and the dry run read `ZeroVariance`); `DynamicSampler`
runs the rounds with the engine, the grader and the prompt sampler it is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from grpo.rollout.base import Rollout
    from grpo.training.overlap import RolloutRequest

ZERO_VARIANCE_MODES: dict[str, str] = {
    "keep": "kept in the batch and the normalization; left out of the backward with "
            "skip_zero_advantage (the gradient unchanged)",
    "filter": "left out of the loss and of its denominators (ScaleRL's zero-variance filtering)",
    "dynamic_sampling": "more prompts drawn and generated, up to zero_variance.max_rounds extra "
                        "rounds, until the step holds its groups with non-zero variance (DAPO)",
}
"""`zero_variance.name` -> what a zero-variance group does, in words (`conf/zero_variance/<name>.yaml`)."""
MODE_KEYS: dict[str, tuple[str, ...]] = {"keep": (), "filter": (),
                                         "dynamic_sampling": ("max_rounds", "expected_extra")}
"""The `zero_variance.*` keys each mode reads besides `name`."""


ROUND_STREAM = 0x524F554E44  # "ROUND": the seed stream of dynamic sampling's extra rounds


def round_seed(seed: int, step: int, round_: int) -> int:
    """The sampling seed of extra round `round_` (>= 1) of GRPO step `step` of a run with seed
    `seed`: a 62-bit hash of the three (the first round keeps the step's own seed)."""
    state = np.random.SeedSequence((ROUND_STREAM, seed, step, round_)).generate_state(2, np.uint32)
    return (int(state[0]) << 30) ^ int(state[1])


def is_zero_variance(rewards: Sequence[float]) -> bool:
    """Whether a group's rewards are all equal (the criterion of `train/frac_zero_std_groups`:
    every advantage of such a group is exactly 0)."""
    return max(rewards) == min(rewards)


def pass_rate(rewards: Sequence[float]) -> float:
    """A group's pass rate: its mean reward, the share of its responses graded right (every reward
    of `grpo.grading.rewards` is 0 or 1)."""
    return sum(rewards) / len(rewards)


@dataclass(frozen=True)
class ZeroVariance:
    """The `zero_variance` group of a config: `mode` (a `ZERO_VARIANCE_MODES` name), and for
    dynamic sampling `max_rounds` (extra generation rounds a step may take) and `expected_extra`
    (the dry run's assumption: the extra rollouts generated a step, as a fraction of
    rollout_batch_size; None = the worst case, `max_rounds`)."""

    mode: str = "keep"
    max_rounds: int = 0
    expected_extra: float | None = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> ZeroVariance:
        """The settings of a composed config (`keep` where it has no `zero_variance` group: a run
        trained before the group existed)."""
        group = cfg.get("zero_variance") or {}
        extra = group.get("expected_extra")
        return cls(str(group.get("name", "keep")), int(group.get("max_rounds", 0) or 0),
                   None if extra is None else float(extra))

    @property
    def filters(self) -> bool:
        """Whether zero-variance groups are left out of the loss and its denominators."""
        return self.mode in ("filter", "dynamic_sampling")

    @property
    def samples_more(self) -> bool:
        """Whether a step draws more prompts until its groups have non-zero variance."""
        return self.mode == "dynamic_sampling"

    def extra_generation(self) -> float:
        """The dry run's extra generation a step, as a fraction of rollout_batch_size: 0 without
        dynamic sampling; else `expected_extra`, or the worst case `max_rounds` where it is None."""
        if not self.samples_more:
            return 0.0
        return float(self.max_rounds) if self.expected_extra is None else self.expected_extra

    def describe(self) -> str:
        """The mode in words, for the dry run's job line."""
        if self.mode == "keep":
            return "zero-variance groups kept in the normalization"
        if self.mode == "filter":
            return "zero-variance groups filtered out of the loss and its denominators"
        assumed = ("the worst case" if self.expected_extra is None
                   else f"zero_variance.expected_extra={self.expected_extra:g}")
        return (f"dynamic sampling: up to {self.max_rounds} extra generation rounds a step, priced "
                f"at +{self.extra_generation():g} x the rollouts ({assumed})")


@dataclass(frozen=True)
class Sampled:
    """What dynamic sampling generated for one step: `rounds` of generation (1 = the first only),
    `rollouts` and `tokens` generated over all of them, the scores of the kept groups' rollouts
    (`grades`, group by group, as `grpo.grading.rewards.score_batch` gives them) and the question
    and pass rate of every generated group (`observed`, for retiring solved prompts)."""

    rounds: int
    rollouts: int
    tokens: int
    grades: list[dict[str, float]]
    observed: list[tuple[str, float]]


class DynamicSampler:
    """The rounds of one step's generation with dynamic sampling (see the module docstring).

    quota: the groups a step trains (rollout_batch_size / group_size).
    group_size: responses per prompt.
    max_rounds: the most rounds after the first.
    generate: a request's groups of rollouts (the engine, under the sampling context).
    grade: the scores of (responses, true answers), in order.
    draw_more: the request of round r >= 1 of step s, or None where every prompt is retired.

    Called with a step's first request, it returns the request of the groups kept (quota of them,
    in the order they were kept: the non-zero-variance ones first), their groups and `Sampled`.
    The rounds run where the generation runs: with off_policy.staleness=1 in the producer's
    worker, with the weights of the step before, so every round of a batch has the same
    sampling weights.
    """

    def __init__(self, *, quota: int, group_size: int, max_rounds: int,
                 generate: Callable[[RolloutRequest], list[list[Rollout]]],
                 grade: Callable[[list[str], list[str]], list[dict[str, float]]],
                 draw_more: Callable[[int, int], RolloutRequest | None]) -> None:
        self.quota = quota
        self.group_size = group_size
        self.max_rounds = max_rounds
        self.generate = generate
        self.grade = grade
        self.draw_more = draw_more

    def __call__(self, first: RolloutRequest) -> tuple[RolloutRequest, list[list[Rollout]], Sampled]:
        kept: list[tuple[Any, str, list[Rollout], list[dict[str, float]]]] = []
        spare: list[tuple[Any, str, list[Rollout], list[dict[str, float]]]] = []
        observed: list[tuple[str, float]] = []
        rounds = rollouts = tokens = 0
        request: RolloutRequest | None = first
        while request is not None:
            groups = self.generate(request)
            rounds += 1
            responses = [r.text for group in groups for r in group]
            truths = [q.answer for q in request.questions for _ in range(self.group_size)]
            grades = self.grade(responses, truths)
            rollouts += len(responses)
            tokens += sum(len(r.token_ids) for group in groups for r in group)
            for i, (question, prompt, group) in enumerate(zip(request.questions, request.prompts,
                                                              groups, strict=True)):
                scores = grades[i * self.group_size:(i + 1) * self.group_size]
                rewards = [s["reward"] for s in scores]
                observed.append((question.question, pass_rate(rewards)))
                entry = (question, prompt, group, scores)
                (spare if is_zero_variance(rewards) else kept).append(entry)
            if len(kept) >= self.quota or rounds > self.max_rounds:
                break
            request = self.draw_more(first.step, rounds)
        chosen = (kept + spare)[: self.quota]  # the first round alone holds quota groups
        merged = replace(first, questions=[c[0] for c in chosen], prompts=[c[1] for c in chosen])
        return merged, [c[2] for c in chosen], Sampled(
            rounds, rollouts, tokens, [s for c in chosen for s in c[3]], observed)
