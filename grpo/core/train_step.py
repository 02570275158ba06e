"""One GRPO micro-batch step: per-token loss, length normalization, gradient-accumulation scaling,
backward.

Length normalizations (how a sequence's per-token losses become the scalar that is optimized):

- "mean" (CS336 reference): each sequence's masked mean over its response tokens, averaged over the
  micro-batch, divided by gradient_accumulation_steps.
- "constant" (Dr. GRPO): each sequence's masked sum divided by `normalize_constant` (the maximum
  generation length), averaged over the micro-batch, divided by gradient_accumulation_steps.
- "microbatch": each sequence's masked sum divided by the longest response in this micro-batch,
  averaged, divided by gradient_accumulation_steps. The divisor depends on how sequences are grouped
  into micro-batches, so the gradient changes with the micro-batch size.
- "token" (DAPO token-level): the masked sum over every response token divided by
  `batch_response_tokens`, the number of response tokens in the whole optimizer-step batch (no
  further division by gradient_accumulation_steps). Without it, this micro-batch's own token count
  is used and the result is divided by gradient_accumulation_steps.

With "mean", "constant" and "token" (given batch_response_tokens), the accumulated gradient of a
rollout batch is the same however it is split into equal-size micro-batches.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import torch

from grpo.core.losses import LossType, compute_policy_gradient_loss
from grpo.core.masking import masked_normalize

LengthNormalization = Literal["mean", "constant", "microbatch", "token"]
LENGTH_NORMALIZATIONS: tuple[str, ...] = get_args(LengthNormalization)


def _sequence_masked_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(batch_size,) masked mean over dim 1; a sequence without response tokens gives 0, not NaN."""
    return masked_normalize(per_token, mask, dim=1) / mask.sum(dim=1).clamp(min=1)


def grpo_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    loss_type: LossType,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    length_normalization: LengthNormalization = "mean",
    normalize_constant: float | None = None,
    batch_response_tokens: int | None = None,
    **hyperparameters: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Compute the micro-batch policy-gradient loss, scale it, and call `backward()` on it.

    With the default arguments this is exactly the CS336 reference: masked mean over the sequence
    dimension, mean over the batch, divided by gradient_accumulation_steps. (One guarded
    difference: a sequence with no response token contributes 0 instead of making the loss NaN.)

    Args:
        policy_log_probs: (batch_size, sequence_length) log-probs of the policy being trained
            (requires grad).
        response_mask: (batch_size, sequence_length) 1/True on response tokens, 0 on prompt and
            padding.
        gradient_accumulation_steps: micro-batches per optimizer step.
        loss_type: see `compute_policy_gradient_loss`.
        raw_rewards: (batch_size, 1) rewards, for "no_baseline".
        advantages: (batch_size, 1) advantages, for the other loss types.
        old_log_probs: (batch_size, sequence_length) log-probs of the sampling policy, for
            "grpo_clip"/"grpo_no_clip"; when given (any loss type) the ratio statistics are logged.
        cliprange: clip eps for "grpo_clip".
        length_normalization: "mean", "constant", "microbatch" or "token" (module docstring).
        normalize_constant: divisor in tokens for "constant" (the max generation length); ignored
            by the other modes.
        batch_response_tokens: response tokens in the whole optimizer-step batch, for "token";
            ignored by the other modes.
        **hyperparameters: further hyperparameters of the loss (`grpo.core.losses.POLICY_LOSSES`).

    Returns:
        loss: 0-dim tensor, the loss that was back-propagated (already scaled for accumulation).
        metadata: detached 0-dim tensors: the scalar statistics of the loss, plus, when
            `old_log_probs` is given, "mean_ratio" (masked mean of exp(policy - old)),
            "approx_kl" (masked mean of the k3 estimator (r - 1) - log r) and "clip_fraction"
            (fraction of response tokens clipped; 0 unless the loss reports "clipped", as
            grpo_clip does).
    """
    if length_normalization not in LENGTH_NORMALIZATIONS:
        raise ValueError(
            f"unknown length_normalization {length_normalization!r}; "
            f"expected one of {LENGTH_NORMALIZATIONS}"
        )
    if gradient_accumulation_steps < 1:
        raise ValueError(
            f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps}"
        )
    if policy_log_probs.shape != response_mask.shape:
        raise ValueError(
            f"policy_log_probs {tuple(policy_log_probs.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must have the same (batch_size, sequence_length) shape"
        )
    if length_normalization == "constant" and normalize_constant is None:
        raise ValueError(
            "length_normalization='constant' needs normalize_constant (the maximum generation "
            "length in tokens)"
        )
    if batch_response_tokens is not None and batch_response_tokens <= 0:
        raise ValueError(f"batch_response_tokens must be positive, got {batch_response_tokens}")

    per_token, loss_metadata = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange,
        **hyperparameters,
    )
    mask = response_mask.bool()

    if length_normalization == "mean":
        loss = _sequence_masked_mean(per_token, mask).mean() / gradient_accumulation_steps
    elif length_normalization == "constant":
        per_sequence = masked_normalize(
            per_token, mask, dim=1, normalize_constant=normalize_constant
        )
        loss = per_sequence.mean() / gradient_accumulation_steps
    elif length_normalization == "microbatch":
        longest = mask.sum(dim=1).max().clamp(min=1)  # a tensor: no host-device sync
        per_sequence = masked_normalize(per_token, mask, dim=1, normalize_constant=longest)
        loss = per_sequence.mean() / gradient_accumulation_steps
    elif batch_response_tokens is not None:  # "token", whole-batch divisor
        loss = masked_normalize(per_token, mask, normalize_constant=batch_response_tokens)
    else:  # "token", this micro-batch's divisor
        loss = masked_normalize(per_token, mask, normalize_constant=mask.sum().clamp(min=1))
        loss = loss / gradient_accumulation_steps
    loss.backward()

    metadata = {k: v.detach() for k, v in loss_metadata.items() if v.dim() == 0}
    if old_log_probs is not None:
        with torch.no_grad():
            n_tokens = mask.sum().clamp(min=1)  # a micro-batch without response tokens logs 0

            def token_mean(values: torch.Tensor) -> torch.Tensor:
                return masked_normalize(values, mask, normalize_constant=n_tokens)

            log_ratio = policy_log_probs.detach() - old_log_probs
            ratio = torch.exp(log_ratio)
            metadata["mean_ratio"] = token_mean(ratio)
            metadata["approx_kl"] = token_mean((ratio - 1.0) - log_ratio)
            clipped = loss_metadata.get("clipped")
            metadata["clip_fraction"] = (
                token_mean(clipped.float())
                if clipped is not None
                else torch.zeros((), dtype=ratio.dtype, device=ratio.device)
            )
    return loss, metadata
