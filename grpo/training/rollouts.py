"""A GRPO step's rollouts as the learner reads them: the generated groups flattened (`flatten`),
scored into rewards (DAPO's soft overlong punishment added where `overlong.buffer` > 0) and
group-normalized advantages and tokenized (`score`, phase `scoring`), held as a `RolloutBatch`
that hands out micro-batches of rows (those of zero-variance groups and those cut at
max_new_tokens marked where a filter leaves them out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from grpo.core.advantages import compute_group_normalized_rewards, soft_overlong_punishment
from grpo.core.specs import StdScope
from grpo.core.tokenization import tokenize_prompt_and_output
from grpo.grading.rewards import RewardFn, score_batch, training_scores
from grpo.rollout.base import Rollout
from grpo.training.overlap import GeneratedBatch
from grpo.training.timing import PhaseTimer
from grpo.training.zero_variance import is_zero_variance

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class RolloutBatch:
    """One GRPO step's rollouts, flattened group by group (B = rollout_batch_size).

    input_ids, labels: (B, T) token ids, right-padded; response_mask: (B, T) 1.0 on response
    tokens of labels; advantages, raw_rewards: (B,); old_log_probs: (B, T) or None;
    importance_weights: (B, T) per-token loss weights of a stale batch (grpo.core.importance) or
    None; behaviour_log_probs: (B, T) the engine's log-probs, NaN where it gave none, when the
    weights are taken in the training forward instead; order: (B,) the seeded permutation in
    which rows are trained; filtered: (B,) bool on the CPU, the rows left out of the loss and of
    every denominator of its normalization (a zero-variance group's with `zero_variance=filter` or
    `dynamic_sampling`: grpo.training.zero_variance; a response cut at max_new_tokens with the
    overlong filter), or None (none are); ref_log_probs: (B, T) the reference policy's log-probs
    (the KL term, `kl.beta` > 0), 0 on rows left out of the loss, or None.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    response_mask: torch.Tensor
    advantages: torch.Tensor
    raw_rewards: torch.Tensor
    order: torch.Tensor
    old_log_probs: torch.Tensor | None = None
    importance_weights: torch.Tensor | None = None
    behaviour_log_probs: torch.Tensor | None = None
    filtered: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None

    def lengths(self, index: torch.Tensor) -> list[int]:
        """Tokens of each row of `index` up to and including its last response token (the width
        it takes in a micro-batch, `rows` trims after it)."""
        positions = torch.arange(1, self.response_mask.shape[1] + 1, device=self.response_mask.device)
        return (self.response_mask[index] * positions).amax(dim=1).long().tolist()

    def rows(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """The tensors of rows `index`, trimmed after their last response token."""
        columns = self.response_mask[index].any(dim=0).nonzero()
        length = int(columns[-1]) + 1 if len(columns) else self.response_mask.shape[1]
        picked = {
            "input_ids": self.input_ids[index, :length],
            "labels": self.labels[index, :length],
            "response_mask": self.response_mask[index, :length],
            "advantages": self.advantages[index].unsqueeze(-1),
            "raw_rewards": self.raw_rewards[index].unsqueeze(-1),
        }
        if self.old_log_probs is not None:
            picked["old_log_probs"] = self.old_log_probs[index, :length]
        if self.importance_weights is not None:
            picked["importance_weights"] = self.importance_weights[index, :length]
        if self.behaviour_log_probs is not None:
            picked["behaviour_log_probs"] = self.behaviour_log_probs[index, :length]
        if self.ref_log_probs is not None:
            picked["ref_log_probs"] = self.ref_log_probs[index, :length]
        return picked


@dataclass(frozen=True)
class Overlong:
    """What is done with responses that reach `max_new_tokens` (sampling.max_new_tokens; the
    `overlong` config block): with `filter`, those cut there (finish_reason "length", no EOS)
    are left out of the loss (DAPO's overlong filtering); with `buffer` > 0, DAPO's soft
    overlong punishment over the last `buffer` tokens, times `penalty_factor`, is added to
    every reward before the advantages (`grpo.core.advantages.soft_overlong_punishment`)."""

    max_new_tokens: int
    filter: bool = False
    buffer: int = 0
    penalty_factor: float = 1.0

    @classmethod
    def from_config(cls, cfg: Any) -> Overlong:
        """The settings of a run config (`overlong.*`, `sampling.max_new_tokens`)."""
        block = cfg.get("overlong") or {}
        return cls(int(cfg.sampling.max_new_tokens), bool(block.get("filter", False)),
                   int(block.get("buffer", 0)), float(block.get("penalty_factor", 1.0)))


def flatten(generated: GeneratedBatch, group_size: int) -> tuple[list[str], list[Rollout], list[str]]:
    """(prompt, rollout, true answer) of each rollout of a generated batch, group by group."""
    request = generated.request
    rollouts = [r for group in generated.groups for r in group]
    prompts = [p for p in request.prompts for _ in range(group_size)]
    truths = [q.answer for q in request.questions for _ in range(group_size)]
    return prompts, rollouts, truths


def score(
    prompts: list[str], rollouts: list[Rollout], truths: list[str],
    reward_fn: RewardFn, tokenizer: PreTrainedTokenizerBase, *,
    group_size: int, advantage_eps: float, normalize_by_std: bool, seed: int, step: int,
    device: torch.device, timer: PhaseTimer, reward: Mapping[str, Any], std_scope: StdScope = "group",
    filter_zero_variance: bool = False, grades: Sequence[Mapping[str, float]] | None = None,
    overlong: Overlong | None = None,
) -> tuple[RolloutBatch, dict[str, float]]:
    """GRPO step `step`'s flattened rollouts (B = len(rollouts), groups of `group_size` in a row)
    scored by `reward_fn` against `truths` (phase `scoring`; `grades`: their scores, in order,
    where they were graded already, by dynamic sampling's rounds), the scores trained on chosen by
    `reward` (the run's `cfg.reward`: `grpo.grading.rewards.training_scores`, the placebo drawn
    with the run's `seed`, `step` and each row), plus the soft overlong punishment of their
    sampled lengths where `overlong.buffer` > 0 (added to the placebo's draw too: it is part of
    the recipe, not of the answer), their group-normalized advantages (CS336
    `compute_group_normalized_rewards`: minus the group mean, divided by the std of the group, or
    of the whole batch with `std_scope="batch"`, + `advantage_eps` when `normalize_by_std`: once,
    over all B rollouts, before the learner cuts them into optimizer steps), tokenized with their prompts onto `device` and
    put in the training order drawn with `seed + step - 1`; marked `filtered`: the rows of
    zero-variance groups when `filter_zero_variance`, those cut at max_new_tokens with
    `overlong.filter`; and the metrics `train/*` of the rewards (the punishment included),
    `train/mean_response_length` (sampled tokens), `train/frac_truncated` and, with a buffer,
    `train/overlong_penalty_mean`."""
    responses = [r.text for r in rollouts]
    lengths = torch.tensor([len(r.token_ids) for r in rollouts])
    truncated = torch.tensor([r.finish_reason == "length" for r in rollouts])
    punished = overlong is not None and overlong.buffer > 0
    with timer.phase("scoring"):
        # graded in parallel first (or by dynamic sampling's rounds); the CS336 function then
        # reads each row's scores back
        graded = score_batch(reward_fn, responses, truths) if grades is None else list(grades)
        scores = training_scores(reward, graded, seed, step)
        if punished:
            penalties = soft_overlong_punishment(lengths, overlong.max_new_tokens, overlong.buffer,
                                                 overlong.penalty_factor)
            scores = [{**s, "reward": s["reward"] + p} for s, p in zip(scores, penalties.tolist(),
                                                                        strict=True)]
        advantages, raw_rewards, meta = compute_group_normalized_rewards(
            lambda row, _truth: scores[row], range(len(responses)), truths, group_size,
            advantage_eps, normalize_by_std, std_scope=std_scope,
        )
    tokens = tokenize_prompt_and_output(prompts, responses, tokenizer)
    order = torch.randperm(len(responses),
                           generator=torch.Generator().manual_seed(seed + step - 1))
    batch = RolloutBatch(
        input_ids=tokens["input_ids"].to(device), labels=tokens["labels"].to(device),
        response_mask=tokens["response_mask"].to(device, torch.float32),
        advantages=torch.as_tensor(advantages, dtype=torch.float32, device=device),
        raw_rewards=torch.as_tensor(raw_rewards, dtype=torch.float32, device=device),
        order=order,
        filtered=truncated.clone() if overlong is not None and overlong.filter else None,
    )
    if filter_zero_variance:
        zero = torch.tensor([is_zero_variance(group) for group in raw_rewards.view(-1, group_size).tolist()],
                            dtype=torch.bool).repeat_interleave(group_size)
        batch.filtered = zero if batch.filtered is None else batch.filtered | zero
    metrics = {f"train/{k}": float(v) for k, v in meta.items() if _is_number(v)}
    metrics["train/mean_response_length"] = float(np.mean([len(r.token_ids) for r in rollouts]))
    metrics["train/frac_truncated"] = float(truncated.float().mean())
    if punished:
        metrics["train/overlong_penalty_mean"] = float(penalties.mean())
    return batch, metrics


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) or (torch.is_tensor(value) and value.numel() == 1)
