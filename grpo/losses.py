"""Per-token policy-gradient losses (CS336 assignment 5, eqs. 32-33) and the loss-type dispatcher.

All losses are per token, shape (batch_size, sequence_length), to be reduced with the response
mask by the caller. Rewards/advantages have one value per sequence: shape (batch_size, 1), or
(batch_size,) which is reshaped to (batch_size, 1) (never broadcast along the wrong axis).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

LossType = Literal["no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip"]
LOSS_TYPES: tuple[str, ...] = get_args(LossType)


def _per_sequence(values: torch.Tensor, policy_log_probs: torch.Tensor) -> torch.Tensor:
    """Reshape per-sequence rewards/advantages to (batch_size, 1), checking the batch size."""
    column = values.reshape(-1, 1) if values.dim() == 1 else values
    if column.shape != (policy_log_probs.shape[0], 1):
        raise ValueError(
            f"per-sequence rewards/advantages must have shape (batch_size, 1) = "
            f"({policy_log_probs.shape[0]}, 1), got {tuple(values.shape)}"
        )
    return column


def compute_naive_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
) -> torch.Tensor:
    """Per-token REINFORCE loss -A * log pi(o_t | q, o_<t).

    Args:
        raw_rewards_or_advantages: (batch_size, 1) reward or advantage of each response.
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.

    Returns:
        (batch_size, sequence_length) per-token loss.
    """
    return -_per_sequence(raw_rewards_or_advantages, policy_log_probs) * policy_log_probs


def compute_grpo_clip_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    cliprange: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token GRPO-Clip loss -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A).

    ratio = pi_theta(o_t) / pi_old(o_t) = exp(policy_log_probs - old_log_probs); no gradient flows
    into `old_log_probs`.

    Args:
        advantages: (batch_size, 1) advantage of each response.
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.
        old_log_probs: (batch_size, sequence_length) log-probs of the policy that sampled.
        cliprange: eps, e.g. 0.2.

    Returns:
        loss: (batch_size, sequence_length) per-token loss.
        metadata: "clipped": (batch_size, sequence_length) bool, True where the clipped term is
            the smaller one (strictly), i.e. the token's gradient is cut off; "clip_fraction":
            0-dim, the fraction of clipped positions over the whole tensor (no mask applied here;
            `grpo_microbatch_train_step` reports it over response tokens only).
    """
    adv = _per_sequence(advantages, policy_log_probs)
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange) * adv
    is_clipped = (clipped < unclipped).detach()
    loss = -torch.minimum(unclipped, clipped)
    return loss, {"clipped": is_clipped, "clip_fraction": is_clipped.float().mean()}


def compute_grpo_no_clip_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
) -> torch.Tensor:
    """Per-token unclipped importance-weighted loss -ratio * A (GRPO without the PPO clip).

    Args:
        advantages: (batch_size, 1) advantage of each response.
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.
        old_log_probs: (batch_size, sequence_length) log-probs of the policy that sampled.

    Returns:
        (batch_size, sequence_length) per-token loss.
    """
    adv = _per_sequence(advantages, policy_log_probs)
    return -torch.exp(policy_log_probs - old_log_probs.detach()) * adv


def compute_policy_gradient_loss(
    policy_log_probs: torch.Tensor,
    loss_type: LossType,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dispatch to the per-token loss named by `loss_type`.

    Args:
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.
        loss_type: "no_baseline" (needs raw_rewards), "reinforce_with_baseline" (advantages),
            "grpo_clip" (advantages, old_log_probs, cliprange) or "grpo_no_clip" (advantages,
            old_log_probs).
        raw_rewards: (batch_size, 1) rewards.
        advantages: (batch_size, 1) advantages.
        old_log_probs: (batch_size, sequence_length) log-probs of the sampling policy.
        cliprange: clip eps for "grpo_clip".

    Returns:
        loss: (batch_size, sequence_length) per-token loss.
        metadata: the loss's statistics ("clipped", "clip_fraction" for grpo_clip; else empty).

    Raises:
        ValueError: unknown loss_type, or an argument the loss type needs is None.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {LOSS_TYPES}")
    needed = {
        "no_baseline": {"raw_rewards": raw_rewards},
        "reinforce_with_baseline": {"advantages": advantages},
        "grpo_clip": {
            "advantages": advantages,
            "old_log_probs": old_log_probs,
            "cliprange": cliprange,
        },
        "grpo_no_clip": {"advantages": advantages, "old_log_probs": old_log_probs},
    }[loss_type]
    missing = [name for name, value in needed.items() if value is None]
    if missing:
        raise ValueError(f"loss_type={loss_type!r} requires {', '.join(missing)} (got None)")

    if loss_type == "no_baseline":
        return compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        return compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    if loss_type == "grpo_clip":
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    return compute_grpo_no_clip_loss(advantages, policy_log_probs, old_log_probs), {}
