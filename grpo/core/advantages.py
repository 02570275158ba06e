"""Group-normalized rewards (GRPO advantages, DeepSeekMath eq. 28 / Dr. GRPO eq. 31), and DAPO's
soft overlong punishment, a length penalty added to the rewards before they are normalized.

Each response's advantage is its reward minus its group's mean; with the std normalization on
(`normalize_by_std`, `std_norm.enabled`) it is then divided by a standard deviation + eps, whose
scope is `std_scope` (`std_norm.scope`, `grpo.core.specs.STD_SCOPES`):

- "group" (GRPO, CS336's reference): the unbiased std of the response's own group's rewards;
- "batch" (TRL's `scale_rewards="batch"`, ScaleRL's batch-level normalization): the unbiased std
  of the raw rewards of the whole rollout batch, one number for every response. TRL's
  `GRPOTrainer._generate_and_score_completions` computes `rewards.std()` on the raw rewards
  gathered over the batch, and this follows it (rather than the std of the group-centred rewards,
  as REINFORCE++'s global normalization takes it, after re-centring on the batch mean): it is the
  reward's own scale in the batch, for 0/1 rewards sqrt(p (1 - p) n / (n - 1)) at the batch's
  accuracy p, whatever the groups, while the group-centred std leaves out the spread between
  questions and shrinks as questions differ in difficulty. The trainer normalizes the rollout
  batch once, before it is cut into optimizer steps, so that every step of every epoch divides by
  the same batch std.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from grpo.core.specs import STD_SCOPES, StdScope

RewardFn = Callable[[str, Any], dict[str, float]]


def compute_group_normalized_rewards(
    reward_fn: RewardFn,
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[Any],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
    *,
    std_scope: StdScope = "group",
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Score every rollout and normalize the rewards within each group of `group_size`.

    Responses i*G .. i*G+G-1 (G = group_size) answer the same question. The advantage is
    r - mean(group), divided by (std(group) + advantage_eps) when `normalize_by_std` (std is the
    unbiased sample std, as `torch.std`). A group whose rewards are all equal (including any group
    of size 1) gets advantage exactly 0, never NaN or a rounding residue.

    The CS336 function, its arguments and results as the assignment's; one keyword beside them:
    `std_scope="batch"` divides by (std(every reward of the batch) + advantage_eps) instead, the
    unbiased std of the raw rewards over all rollout_batch_size responses (module docstring);
    ignored without `normalize_by_std`.

    Args:
        reward_fn: (response, ground_truth) -> dict with float "reward", "format_reward" and
            "answer_reward".
        rollout_responses: rollout_batch_size = n_prompts * group_size response strings.
        repeated_ground_truths: rollout_batch_size ground truths (each repeated group_size times).
        group_size: responses per question.
        advantage_eps: added to the group std before dividing.
        normalize_by_std: divide by the group std (GRPO) or only subtract the mean (Dr. GRPO).
        std_scope: "group" (the default: the assignment's function) or "batch".

    Returns:
        advantages: (rollout_batch_size,) float32 group-normalized rewards.
        raw_rewards: (rollout_batch_size,) float32 rewards.
        metadata: floats "reward_mean", "reward_std" (population std over the batch),
            "reward_max", "reward_min", "format_reward_mean", "answer_reward_mean", and
            "frac_zero_std_groups" (fraction of groups whose rewards are all equal).
    """
    n = len(rollout_responses)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if std_scope not in STD_SCOPES:
        raise ValueError(f"unknown std_scope {std_scope!r}; expected one of {STD_SCOPES}")
    if n == 0 or n % group_size != 0:
        raise ValueError(
            f"the number of rollout responses ({n}) must be a positive multiple of "
            f"group_size ({group_size}): each question needs exactly group_size responses"
        )
    if len(repeated_ground_truths) != n:
        raise ValueError(
            f"got {n} rollout responses but {len(repeated_ground_truths)} ground truths; "
            "repeat each ground truth group_size times"
        )

    scores = [
        reward_fn(r, gt) for r, gt in zip(rollout_responses, repeated_ground_truths, strict=True)
    ]
    raw_rewards = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)
    format_rewards = torch.tensor([s["format_reward"] for s in scores], dtype=torch.float32)
    answer_rewards = torch.tensor([s["answer_reward"] for s in scores], dtype=torch.float32)

    grouped = raw_rewards.view(-1, group_size)  # (n_groups, group_size)
    zero_std = grouped.amax(dim=1) == grouped.amin(dim=1)  # (n_groups,)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_by_std and group_size > 1:
        std = grouped.std(dim=1, keepdim=True) if std_scope == "group" else raw_rewards.std()
        centered = centered / (std + advantage_eps)
    advantages = torch.where(zero_std.unsqueeze(1), torch.zeros_like(centered), centered)

    metadata = {
        "reward_mean": raw_rewards.mean().item(),
        "reward_std": raw_rewards.std(correction=0).item(),
        "reward_max": raw_rewards.max().item(),
        "reward_min": raw_rewards.min().item(),
        "format_reward_mean": format_rewards.mean().item(),
        "answer_reward_mean": answer_rewards.mean().item(),
        "frac_zero_std_groups": zero_std.float().mean().item(),
    }
    return advantages.reshape(-1), raw_rewards, metadata


def soft_overlong_punishment(
    response_lengths: torch.Tensor, max_length: int, buffer: int, penalty_factor: float = 1.0,
) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), times `penalty_factor`.

    With L_max = `max_length` and L_cache = `buffer`, a response of |y| tokens gets

        R_length(y) = 0                               if |y| <= L_max - L_cache
                      ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
                      -1                              if L_max < |y|

    a linear penalty over the last `buffer` tokens before the limit (-1 at the limit, where a
    response cut at max_new_tokens ends); verl's `overlong_buffer.len` and `penalty_factor`.

    Args:
        response_lengths: (batch_size,) response lengths in tokens (ints or floats).
        max_length: L_max, the longest response (sampling.max_new_tokens), tokens.
        buffer: L_cache in 0..max_length, tokens; 0 = no penalty.
        penalty_factor: the penalty's scale (> 0): R_length * penalty_factor is returned.

    Returns:
        (batch_size,) float32 penalties in [-penalty_factor, 0].
    """
    if not 0 <= buffer <= max_length:
        raise ValueError(f"the overlong buffer must be in 0..max_length={max_length}, got {buffer}")
    lengths = response_lengths.to(torch.float32)
    if buffer == 0:
        return torch.zeros_like(lengths)
    penalty = ((max_length - buffer) - lengths) / buffer
    return penalty.clamp(min=-1.0, max=0.0) * penalty_factor
