"""Importance-sampling corrections for rollouts sampled by other weights than the trained ones.

With `off_policy.staleness=1` the batch trained at GRPO step t was sampled with the weights of
step t-2 (the behaviour policy, whose log-probs the rollout engine reports under the sampling
distribution), while step t starts from the weights of step t-1 (the proximal policy, pi_old).
The CS336 losses see only pi_theta / pi_old; a correction weights each token's loss by how much
more (or less) likely pi_old makes the sampled token than the behaviour policy did:

    w_t = pi_old(y_t) / pi_behaviour(y_t), both under the sampling distribution (temperature and
    top-p applied), held fixed (no gradient) through every epoch and micro-batch of the step.

`CORRECTIONS` is the one table of them (`off_policy.correction` names one; their names and
whether each weighs are `grpo.core.specs.CORRECTION_WEIGHS`):

- "tis": truncated importance sampling, w_t = min(w, is_cap) (Ionides 2008; the choice of
  PipelineRL, slime, prime-rl and OpenRLHF at a cap of about 2). The default: unbiased where the
  weight stays under the cap, bounded variance where it does not, and at one step of staleness
  the weights sit near 1 (the cap is rarely hit; `train/is_capped_fraction` says how often).
- "none": no weight (w = 1): the stale batch is trained as if on-policy.

A "decoupled" objective (AReaL) is this same product: the clipped ratio pi_theta / pi_old times
the behaviour weight pi_old / pi_behaviour; with loss=grpo_clip and correction=tis it is that
objective with the weight truncated.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from grpo.core.specs import CORRECTION_WEIGHS

ImportanceCorrection = Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]


def truncated_importance_weights(
    proximal_log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token weights min(exp(proximal - behaviour), cap) and where the cap bit.

    Args:
        proximal_log_probs: (batch_size, sequence_length) log pi_old of the sampled tokens, under
            the sampling distribution.
        behaviour_log_probs: (batch_size, sequence_length) the rollout engine's log-probs of the
            same tokens, same distribution; NaN where the engine reported none (weight 1 there).
        cap: the truncation C > 0.

    Returns:
        weights: (batch_size, sequence_length) in [0, cap], no gradient.
        capped: (batch_size, sequence_length) bool, True where the raw weight exceeded the cap.
    """
    if not cap > 0:
        raise ValueError(f"the importance-weight cap must be > 0, got {cap}")
    with torch.no_grad():
        log_weight = (proximal_log_probs - behaviour_log_probs).float()
        log_weight = torch.where(torch.isnan(log_weight), torch.zeros_like(log_weight), log_weight)
        raw = torch.exp(log_weight)
        capped = raw > cap
        return raw.clamp(max=cap), capped


_WEIGHTS: dict[str, ImportanceCorrection] = {"tis": truncated_importance_weights}

CORRECTIONS: dict[str, ImportanceCorrection | None] = {
    name: _WEIGHTS[name] if weighs else None for name, weighs in CORRECTION_WEIGHS.items()
}
"""`off_policy.correction` name (`grpo.core.specs.CORRECTION_WEIGHS`) -> the function giving
(weights, capped) per token; None: no weight, and nothing computed for it."""
