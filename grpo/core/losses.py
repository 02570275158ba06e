"""Per-token policy-gradient losses (CS336 assignment 5, eqs. 32-33) and the loss registry.

All losses are per token, shape (batch_size, sequence_length), to be reduced with the response
mask by the caller. Rewards/advantages have one value per sequence: shape (batch_size, 1), or
(batch_size,) which is reshaped to (batch_size, 1) (never broadcast along the wrong axis).

`POLICY_LOSSES` is the one table of implemented losses, read by the dispatcher, the trainer and
`python -m grpo.core.losses` (the docs): each entry is the loss's `grpo.core.specs.LossSpec` (its
name, the inputs it reads, its summary; the torch-free part the config validator reads) with its
function. Inputs are rollout-batch tensors (`BATCH_INPUTS`) or hyperparameters, which live in the
loss's own `conf/loss/<name>.yaml` and nowhere else. Adding a loss: its `LossSpec` in
`grpo.core.specs`, its function registered with `@register_policy_loss(<name>)` (or the decorator
called on an existing function, as below), and `conf/loss/<name>.yaml` with `name` and its
hyperparameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from grpo.core.specs import LOSS_SPECS, LossSpec

LossType = str
"""A key of `POLICY_LOSSES`."""

LossOutput = torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]


@dataclass(frozen=True)
class PolicyLoss(LossSpec):
    """One implemented loss: its spec and `fn`, called as fn(policy_log_probs=...,
    **{parameter: value}); it returns the (batch_size, sequence_length) per-token loss, or (loss,
    metadata) with 0-dim statistics and, for clipped losses, a "clipped" (batch_size,
    sequence_length) bool tensor."""

    fn: Callable[..., LossOutput] = field(kw_only=True)


POLICY_LOSSES: dict[str, PolicyLoss] = {}
"""Implemented losses by the name used as `loss_type` and in `conf/loss/<name>.yaml`."""


def register_policy_loss(name: str) -> Callable[[Callable[..., LossOutput]], Callable[..., LossOutput]]:
    """Decorator: implement loss `name` (its `grpo.core.specs.LOSS_SPECS` entry) with the
    decorated function (as verl's core_algos.py registers its losses).

    Raises:
        ValueError: `name` has no spec, or is already implemented.
    """
    spec = LOSS_SPECS.get(name)
    if spec is None:
        raise ValueError(f"policy loss {name!r} has no LossSpec; add it to grpo.core.specs.LOSS_SPECS")

    def register(fn: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        POLICY_LOSSES[name] = PolicyLoss(**{f.name: getattr(spec, f.name) for f in fields(spec)},
                                         fn=fn)
        return fn

    return register


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


register_policy_loss("no_baseline")(compute_naive_policy_gradient_loss)
register_policy_loss("reinforce_with_baseline")(compute_naive_policy_gradient_loss)


@register_policy_loss("grpo_clip")
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
    return compute_grpo_clip_higher_loss(
        advantages, policy_log_probs, old_log_probs, cliprange, cliprange
    )


@register_policy_loss("grpo_clip_higher")
def compute_grpo_clip_higher_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    cliprange_low: float,
    cliprange_high: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token GRPO-Clip with DAPO's clip-higher: ratio clipped to [1 - eps_low, 1 + eps_high].

    -min(ratio * A, clip(ratio, 1 - cliprange_low, 1 + cliprange_high) * A); a cliprange_high
    above cliprange_low lets low-probability tokens with a positive advantage grow further before
    their gradient is cut (DAPO, Yu et al. 2025: 0.2 and 0.28). Equal ranges give GRPO-Clip.

    Args:
        advantages: (batch_size, 1) advantage of each response.
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.
        old_log_probs: (batch_size, sequence_length) log-probs of the policy that sampled.
        cliprange_low: eps_low, e.g. 0.2.
        cliprange_high: eps_high, e.g. 0.28.

    Returns:
        loss and metadata as `compute_grpo_clip_loss`.
    """
    adv = _per_sequence(advantages, policy_log_probs)
    ratio = torch.exp(policy_log_probs - old_log_probs.detach())
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - cliprange_low, 1.0 + cliprange_high) * adv
    is_clipped = (clipped < unclipped).detach()
    loss = -torch.minimum(unclipped, clipped)
    return loss, {"clipped": is_clipped, "clip_fraction": is_clipped.float().mean()}


@register_policy_loss("grpo_no_clip")
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


@register_policy_loss("gspo")
def compute_gspo_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_low: float,
    cliprange_high: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (Group Sequence Policy Optimization, Zheng et al. 2025), as per-token losses.

    The ratio is one per sequence, length-normalized: s_i = exp(mean over the response tokens of
    sequence i of (log pi_theta - log pi_old)) = (pi_theta(y_i) / pi_old(y_i))^(1/|y_i|), clipped
    to [1 - cliprange_low, 1 + cliprange_high] (the paper: 3e-4 and 4e-4); every token of the
    sequence carries the same loss value -min(s_i * A_i, clip(s_i) * A_i). The gradient is
    GSPO-token's form (the paper's section 4.2): each token's value is
    sg[s_i] * pi_theta(y_t) / sg[pi_theta(y_t)], so its gradient flows through that token's own
    log-prob alone, with weight s_i (0 where the clipped term is the smaller one). With the
    length normalizations, which weigh every token of a sequence alike, the gradient is GSPO's
    own: with "mean", d loss / d log pi_t = -s_i * A_i / |y_i| on an unclipped sequence.

    Args:
        advantages: (batch_size, 1) advantage of each response.
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.
        old_log_probs: (batch_size, sequence_length) log-probs of the policy that sampled.
        response_mask: (batch_size, sequence_length) 1/True on the response tokens the sequence
            ratio averages over (the same mask the caller's normalization reads).
        cliprange_low: eps_low, e.g. 3e-4.
        cliprange_high: eps_high, e.g. 4e-4.

    Returns:
        loss: (batch_size, sequence_length) per-token loss (the sequence's value at every
            position, padding included: the caller's mask drops those).
        metadata: "clipped": (batch_size, 1) bool, True where the sequence's clipped term is the
            smaller one (strictly): its gradient is cut off; "clip_fraction": 0-dim, the fraction
            of sequences with a response token that are clipped.
    """
    adv = _per_sequence(advantages, policy_log_probs)
    if response_mask.shape != policy_log_probs.shape:
        raise ValueError(f"response_mask {tuple(response_mask.shape)} must have the shape of "
                         f"policy_log_probs {tuple(policy_log_probs.shape)}")
    mask = response_mask.bool()
    with torch.no_grad():
        log_ratio = torch.where(mask, policy_log_probs - old_log_probs, 0.0)
        tokens = mask.sum(dim=1, keepdim=True)
        sequence_log_ratio = log_ratio.sum(dim=1, keepdim=True) / tokens.clamp(min=1)
    # value s_i at every token; d/d log pi_t = s_i, through token t's own log-prob only (none
    # through a position outside the mask, whatever its log-prob)
    own = torch.where(mask, policy_log_probs - policy_log_probs.detach(), 0.0)
    ratio = torch.exp(sequence_log_ratio + own)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - cliprange_low, 1.0 + cliprange_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        s = torch.exp(sequence_log_ratio)
        is_clipped = torch.clamp(s, 1.0 - cliprange_low, 1.0 + cliprange_high) * adv < s * adv
        counted = tokens > 0
        fraction = (is_clipped & counted).sum() / counted.sum().clamp(min=1)
    return loss, {"clipped": is_clipped, "clip_fraction": fraction.to(policy_log_probs.dtype)}


@register_policy_loss("cispo")
def compute_cispo_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    ratio_cap: float,
    ratio_floor: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1, 2025; the loss of ScaleRL, Khatri et al. 2025): REINFORCE weighted by
    the detached, truncated importance ratio.

    -sg(clip(ratio, ratio_floor, ratio_cap)) * A * log pi_theta(o_t), ratio = pi_theta(o_t) /
    pi_old(o_t) per token. The weight is a constant of the gradient, so every token keeps its
    gradient -w * A (none is switched off, unlike GRPO-Clip's); the cap truncates the weight
    (ScaleRL's eps_max; TRL recommends 5), a floor of 0 is no lower bound (MiniMax sets none). At
    ratio 1 it is `reinforce_with_baseline`.

    Args:
        advantages: (batch_size, 1) advantage of each response.
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.
        old_log_probs: (batch_size, sequence_length) log-probs of the policy that sampled.
        ratio_cap: the largest weight, >= 1 (e.g. 5).
        ratio_floor: the smallest weight, in [0, 1] (0: no lower bound).

    Returns:
        loss: (batch_size, sequence_length) per-token loss.
        metadata: "capped": (batch_size, sequence_length) bool, True where the ratio lies outside
            [ratio_floor, ratio_cap], so the weight is the bound, not the ratio; "cap_fraction":
            0-dim, their fraction over the whole tensor (`grpo_microbatch_train_step` reports it
            over response tokens only).
    """
    adv = _per_sequence(advantages, policy_log_probs)
    with torch.no_grad():
        ratio = torch.exp(policy_log_probs - old_log_probs)
        weight = torch.clamp(ratio, ratio_floor, ratio_cap)
        capped = (ratio > ratio_cap) | (ratio < ratio_floor)
    loss = -weight * adv * policy_log_probs
    return loss, {"capped": capped, "cap_fraction": capped.float().mean()}
def compute_reference_kl(policy_log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref) on tokens sampled from the policy
    (Schulman 2020; TRL's GRPO `beta` term, verl's `kl_loss_type: low_var_kl` without its clamp):

        kl_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1   (>= 0, 0 where they agree)

    Its gradient with respect to logp_t is 1 - exp(ref_t - logp_t); none flows into
    `ref_log_probs`. The trainer adds `kl.beta * kl_t` to each token's loss before the length
    normalization (`grpo.core.train_step`).

    Args:
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.
        ref_log_probs: (batch_size, sequence_length) log-probs of the same tokens under the
            reference policy (the initial weights, frozen).

    Returns:
        (batch_size, sequence_length) per-token KL estimate, nats.
    """
    log_ratio = ref_log_probs.detach() - policy_log_probs
    return torch.exp(log_ratio) - log_ratio - 1.0


_UNIMPLEMENTED = sorted(set(LOSS_SPECS) - set(POLICY_LOSSES))
if _UNIMPLEMENTED:
    raise ImportError(f"losses {_UNIMPLEMENTED} have a LossSpec but no registered function")


def compute_policy_gradient_loss(
    policy_log_probs: torch.Tensor,
    loss_type: LossType,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    response_mask: torch.Tensor | None = None,
    **hyperparameters: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dispatch to the per-token loss registered as `loss_type` in `POLICY_LOSSES`.

    Args:
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained.
        loss_type: "no_baseline" (needs raw_rewards), "reinforce_with_baseline" (advantages),
            "grpo_clip" (advantages, old_log_probs, cliprange), "grpo_no_clip" (advantages,
            old_log_probs), or any other registered loss.
        raw_rewards: (batch_size, 1) rewards.
        advantages: (batch_size, 1) advantages.
        old_log_probs: (batch_size, sequence_length) log-probs of pi_old, the weights at the
            start of the GRPO step (the sampling policy on-policy; with off_policy.staleness=1 the
            proximal policy, a step newer than the behaviour policy that sampled).
        cliprange: clip eps for "grpo_clip".
        response_mask: (batch_size, sequence_length) 1 on response tokens, for a loss that
            reads it ("gspo": its per-sequence ratio); the others ignore it.
        **hyperparameters: further hyperparameters of registered losses, by their config key.

    Returns:
        loss: (batch_size, sequence_length) per-token loss.
        metadata: the loss's statistics ("clipped", "clip_fraction" for the clipped losses,
            "capped", "cap_fraction" for cispo; else empty).

    Raises:
        ValueError: unknown loss_type, or an input the loss type needs is None or missing.
    """
    loss = POLICY_LOSSES.get(loss_type)
    if loss is None:
        raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {tuple(POLICY_LOSSES)}")
    given = {
        "raw_rewards": raw_rewards, "advantages": advantages, "old_log_probs": old_log_probs,
        "response_mask": response_mask, "cliprange": cliprange, **hyperparameters,
    }
    missing = [name for name in loss.inputs if given.get(name) is None]
    if missing:
        raise ValueError(f"loss_type={loss_type!r} requires {', '.join(missing)} (got None)")
    unread = sorted(set(hyperparameters) - set(loss.inputs))
    if unread:
        raise ValueError(f"loss_type={loss_type!r} does not read {', '.join(unread)}")
    out = loss.fn(policy_log_probs=policy_log_probs,
                  **{param: given[name] for name, param in loss.inputs.items()})
    return out if isinstance(out, tuple) else (out, {})


def describe_losses() -> str:
    """A markdown table of the registered losses: name, inputs, probability ratio (per token,
    per sequence or none), summary."""
    rows = ["| loss | reads | probability ratio | what |", "| --- | --- | --- | --- |"]
    for loss in POLICY_LOSSES.values():
        reads = ", ".join(f"`loss.{k}`" if k in loss.hyperparameters else k for k in loss.inputs)
        ratio = ("per sequence" if loss.sequence_ratio else "per token") if loss.uses_ratio else "no"
        rows.append(f"| `{loss.name}` | {reads} | {ratio} | {loss.summary} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(describe_losses())
