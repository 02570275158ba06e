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

- "prompt" (ScaleRL's prompt-level average): each prompt's responses averaged together over all
  of their response tokens (the masked sum of the prompt's sequences divided by their response
  tokens), then the mean over the prompts. In an optimizer step that holds part of a group (rows
  are shuffled one by one), a prompt is the part the step holds: its response tokens and the
  number of prompts are counted over the whole optimizer-step batch (`optimizer_step_totals`),
  so only `grpo_share_train_step` computes it; `grpo_microbatch_train_step` refuses it.

With "mean", "constant" and "token" (given batch_response_tokens), the accumulated gradient of a
rollout batch is the same however it is split into equal-size micro-batches.

`grpo_share_train_step` is the trainer's path for micro-batches of unequal size (token budgets,
left-out zero-advantage sequences): each micro-batch contributes its share of the optimizer
step, measured against `OptimizerStepTotals` (every sequence of the step, its response tokens,
its longest response, its prompts and each one's response tokens), so the step's gradient is the
same whatever the partition, for every normalization; "microbatch" there divides by the longest
response of the optimizer step. A sequence left out of the loss altogether (a filter's: a
zero-variance group's, or DAPO's overlong filter, a response cut at max_new_tokens) is in no
micro-batch and not counted in the totals either, so it is out of every denominator too. The KL
term to the reference policy (`kl_coef` > 0) is added to each token's loss before the
normalization, so it is normalized as the policy-gradient loss is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from grpo.core.losses import LossType, compute_policy_gradient_loss, compute_reference_kl
from grpo.core.masking import masked_normalize
from grpo.core.specs import LENGTH_NORMALIZATIONS, LengthNormalization


def _sequence_masked_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(batch_size,) masked mean over dim 1; a sequence without response tokens gives 0, not NaN."""
    return masked_normalize(per_token, mask, dim=1) / mask.sum(dim=1).clamp(min=1)


def _normalized_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    length_normalization: str,
    batch_divisor: float,
    normalize_constant: float | None,
    longest: float | torch.Tensor,
    total_tokens: float | torch.Tensor,
    prompt_tokens: torch.Tensor | None = None,
    prompts: int | None = None,
) -> torch.Tensor:
    """The micro-batch loss (0-dim) from (batch_size, sequence_length) per-token losses:
    "mean", "constant" and "microbatch" divide the micro-batch mean of the per-sequence values by
    `batch_divisor` ("microbatch" divides each sequence by `longest` tokens first); "token"
    divides the masked sum by `total_tokens`; "prompt" divides each sequence's masked sum by
    `prompt_tokens` (batch_size,), its prompt's response tokens in the optimizer step, and their
    sum by `prompts`, the optimizer step's number of prompts."""
    if length_normalization == "mean":
        return _sequence_masked_mean(per_token, mask).mean() / batch_divisor
    if length_normalization == "token":
        return masked_normalize(per_token, mask, normalize_constant=total_tokens)
    if length_normalization == "prompt":
        assert prompt_tokens is not None and prompts is not None  # _check_prompt_totals
        per_sequence = masked_normalize(per_token, mask, dim=1) / prompt_tokens.to(per_token.dtype)
        return per_sequence.sum() / prompts
    divisor = normalize_constant if length_normalization == "constant" else longest
    per_sequence = masked_normalize(per_token, mask, dim=1, normalize_constant=divisor)
    return per_sequence.mean() / batch_divisor


def _backward(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    loss_type: LossType,
    reduce: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    raw_rewards: torch.Tensor | None,
    advantages: torch.Tensor | None,
    old_log_probs: torch.Tensor | None,
    cliprange: float | None,
    hyperparameters: dict[str, Any],
    importance_weights: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The per-token loss, times `importance_weights` where given, plus `kl_coef` times the k3
    KL to the reference where `ref_log_probs` are given (not importance-weighted), reduced by
    `reduce(per_token, bool mask)` to the micro-batch loss, back-propagated; the loss and the
    detached metadata (ratio statistics with old_log_probs, "kl_to_reference" with
    ref_log_probs)."""
    per_token, loss_metadata = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange,
        response_mask=response_mask, **hyperparameters,
    )
    if importance_weights is not None:
        per_token = per_token * importance_weights.detach()
    mask = response_mask.bool()
    kl = None
    if ref_log_probs is not None:
        kl = compute_reference_kl(policy_log_probs, ref_log_probs)
        per_token = per_token + kl_coef * kl
    elif kl_coef:
        raise ValueError(f"kl_coef={kl_coef} needs ref_log_probs (the reference policy's log-probs)")
    loss = reduce(per_token, mask)
    loss.backward()
    metadata = {k: v.detach() for k, v in loss_metadata.items() if v.dim() == 0}
    if old_log_probs is not None:
        metadata.update(_ratio_metadata(policy_log_probs, old_log_probs, mask, loss_metadata))
    if kl is not None:
        with torch.no_grad():  # a micro-batch without response tokens logs 0
            metadata["kl_to_reference"] = masked_normalize(
                kl.detach(), mask, normalize_constant=mask.sum().clamp(min=1))
    return loss, metadata


def _check_shapes(policy_log_probs: torch.Tensor, response_mask: torch.Tensor,
                  length_normalization: str, normalize_constant: float | None) -> None:
    if length_normalization not in LENGTH_NORMALIZATIONS:
        raise ValueError(
            f"unknown length_normalization {length_normalization!r}; "
            f"expected one of {LENGTH_NORMALIZATIONS}"
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


def _check_prompt_totals(totals: OptimizerStepTotals, prompt_tokens: torch.Tensor | None,
                         batch_size: int) -> None:
    """Refuse "prompt" without the optimizer step's prompts and each row's prompt tokens."""
    if totals.prompts is None or totals.prompts < 1:
        raise ValueError("length_normalization='prompt' needs totals.prompts, the optimizer "
                         "step's number of prompts (optimizer_step_totals counts them)")
    if prompt_tokens is None or prompt_tokens.shape != (batch_size,):
        shape = None if prompt_tokens is None else tuple(prompt_tokens.shape)
        raise ValueError("length_normalization='prompt' needs prompt_tokens of shape "
                         f"({batch_size},), each row's prompt's response tokens in the optimizer "
                         f"step, got {shape}")


def _ratio_metadata(policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor,
                    loss_metadata: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """mean_ratio, approx_kl (k3) and clip_fraction over the response tokens (0 without any);
    a (batch_size, 1) "clipped" (a per-sequence ratio: GSPO) gives the fraction of the sequences
    with a response token instead; a "capped" (CISPO) gives cap_fraction over the tokens."""
    with torch.no_grad():
        n_tokens = mask.sum().clamp(min=1)  # a micro-batch without response tokens logs 0

        def token_mean(values: torch.Tensor) -> torch.Tensor:
            return masked_normalize(values, mask, normalize_constant=n_tokens)

        log_ratio = policy_log_probs.detach() - old_log_probs
        ratio = torch.exp(log_ratio)
        clipped = loss_metadata.get("clipped")
        if clipped is None:
            clip_fraction = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
        elif clipped.shape == mask.shape:
            clip_fraction = token_mean(clipped.float())
        else:  # one per sequence
            sequences = mask.any(dim=1, keepdim=True)
            clip_fraction = masked_normalize(clipped.float(), sequences,
                                             normalize_constant=sequences.sum().clamp(min=1))
        metadata = {
            "mean_ratio": token_mean(ratio),
            "approx_kl": token_mean((ratio - 1.0) - log_ratio),
            "clip_fraction": clip_fraction,
        }
        if "capped" in loss_metadata:
            metadata["cap_fraction"] = token_mean(loss_metadata["capped"].float())
        return metadata


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
        old_log_probs: (batch_size, sequence_length) log-probs of pi_old, the weights at the
            start of the GRPO step (those that sampled the batch on-policy; with
            off_policy.staleness=1 the proximal policy, a step newer than the one that sampled),
            for "grpo_clip"/"grpo_no_clip"; when given (any loss type) the ratio statistics are
            logged.
        cliprange: clip eps for "grpo_clip".
        length_normalization: "mean", "constant", "microbatch" or "token" (module docstring;
            "prompt" is refused: it needs `grpo_share_train_step`).
        normalize_constant: divisor in tokens for "constant" (the max generation length); ignored
            by the other modes.
        batch_response_tokens: response tokens in the whole optimizer-step batch, for "token";
            ignored by the other modes.
        **hyperparameters: further hyperparameters of the loss (`grpo.core.losses.POLICY_LOSSES`).

    Returns:
        loss: 0-dim tensor, the loss that was back-propagated (already scaled for accumulation).
        metadata: detached 0-dim tensors: the scalar statistics of the loss, plus, when
            `old_log_probs` is given, "mean_ratio" (masked mean of exp(policy - old)),
            "approx_kl" (masked mean of the k3 estimator (r - 1) - log r), "clip_fraction"
            (fraction of response tokens clipped; 0 unless the loss reports "clipped", as
            grpo_clip does; for a per-sequence ratio, as gspo's, the fraction of the sequences
            with a response token) and, for a loss that reports "capped" (cispo),
            "cap_fraction" (fraction of response tokens whose weight is the truncation bound).
    """
    _check_shapes(policy_log_probs, response_mask, length_normalization, normalize_constant)
    if gradient_accumulation_steps < 1:
        raise ValueError(
            f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps}"
        )
    if batch_response_tokens is not None and batch_response_tokens <= 0:
        raise ValueError(f"batch_response_tokens must be positive, got {batch_response_tokens}")
    if length_normalization == "prompt":
        raise ValueError(
            "length_normalization='prompt' divides by each prompt's response tokens in the whole "
            "optimizer step, which one micro-batch does not know: use grpo_share_train_step "
            "with optimizer_step_totals"
        )


    def reduce(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        micro_batch_tokens = mask.sum().clamp(min=1)
        loss = _normalized_loss(
            per_token, mask, length_normalization, gradient_accumulation_steps, normalize_constant,
            longest=mask.sum(dim=1).max().clamp(min=1),  # a tensor: no host-device sync
            total_tokens=batch_response_tokens if batch_response_tokens is not None else micro_batch_tokens,
        )
        if length_normalization == "token" and batch_response_tokens is None:
            loss = loss / gradient_accumulation_steps  # this micro-batch's own token count
        return loss

    return _backward(policy_log_probs, response_mask, loss_type, reduce, raw_rewards, advantages,
                     old_log_probs, cliprange, hyperparameters)


@dataclass(frozen=True)
class OptimizerStepTotals:
    """What one optimizer step holds, each micro-batch's share is measured against: its
    sequences (every one, left-out ones included), their response tokens, the longest
    response among them (tokens), and, for "prompt", the number of distinct prompts among them
    (None where not counted)."""

    sequences: int
    response_tokens: int
    longest_response: int
    prompts: int | None = None


def optimizer_step_totals(response_mask: torch.Tensor,
                          prompt_ids: torch.Tensor) -> tuple[OptimizerStepTotals, torch.Tensor]:
    """The totals of the optimizer step whose sequences (every one, left-out ones included) have
    `response_mask` (n_sequences, sequence_length) and answer prompts `prompt_ids` (n_sequences,)
    integer ids (a group's responses share one), and each sequence's prompt's response tokens in
    the step: (n_sequences,) float, the sum of the response tokens of the step's sequences of
    that prompt (at least 1: a prompt whose responses in the step are all empty contributes 0)."""
    if prompt_ids.shape != response_mask.shape[:1] or len(prompt_ids) == 0:
        raise ValueError(f"prompt_ids {tuple(prompt_ids.shape)} must give one prompt id to each "
                         f"of the {response_mask.shape[0]} sequences (at least one)")
    lengths = response_mask.sum(dim=1)
    _, inverse = torch.unique(prompt_ids.to(lengths.device), return_inverse=True)
    per_prompt = torch.zeros(int(inverse.max()) + 1, dtype=lengths.dtype, device=lengths.device)
    per_prompt.index_add_(0, inverse, lengths)
    totals = OptimizerStepTotals(len(lengths), max(1, int(lengths.sum())),
                                 max(1, int(lengths.max())), prompts=len(per_prompt))
    return totals, per_prompt[inverse].clamp(min=1)


def grpo_share_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    loss_type: LossType,
    totals: OptimizerStepTotals,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    length_normalization: LengthNormalization = "mean",
    normalize_constant: float | None = None,
    importance_weights: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    prompt_tokens: torch.Tensor | None = None,
    **hyperparameters: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`grpo_microbatch_train_step` for micro-batches of any size: back-propagate this
    micro-batch's share of its optimizer step's loss.

    With v_i a sequence's value (its masked mean for "mean", masked sum / `normalize_constant`
    for "constant", masked sum / `totals.longest_response` for "microbatch"), the optimizer step's
    loss is sum_i v_i / `totals.sequences` ("token": the masked sum / `totals.response_tokens`;
    "prompt": sum_i (masked sum_i / `prompt_tokens`_i) / `totals.prompts`, the mean over the
    step's prompts of each one's token mean); the micro-batch contributes its own terms. The
    micro-batches' gradients therefore add up to the same gradient whatever the partition, and a
    sequence whose loss is 0 (a zero advantage, for a loss that is a multiple of it) may be left
    out of every micro-batch while still counted in `totals`. Split into equal micro-batches, each gives exactly what
    `grpo_microbatch_train_step` gives with gradient_accumulation_steps = their count (but for
    "microbatch", whose divisor there is the micro-batch's longest response).

    Args:
        policy_log_probs, response_mask: (micro_batch_size, sequence_length), as in
            `grpo_microbatch_train_step`; raw_rewards, advantages: (micro_batch_size, 1);
            old_log_probs, cliprange, hyperparameters: likewise.
        totals: the optimizer step's sequences, response tokens and longest response (and its
            prompts, for "prompt").
        length_normalization, normalize_constant: as in `grpo_microbatch_train_step`.
        importance_weights: (micro_batch_size, sequence_length) per-token weights of the loss,
            held constant (grpo.core.importance: rollouts sampled by stale weights); None = 1.
        ref_log_probs: (micro_batch_size, sequence_length) log-probs of the reference policy
            (the initial weights): `kl_coef` times their k3 KL (`grpo.core.losses.
            compute_reference_kl`) is added to each token's loss before the length
            normalization; None = no KL term (then `kl_coef` must be 0).
        kl_coef: the KL term's weight beta (`kl.beta`; TRL's `beta`, verl's `kl_loss_coef`).
            The term is not 0 at zero advantage: with kl_coef > 0 no row may be left out.
        prompt_tokens: (micro_batch_size,) for "prompt": each row's prompt's response tokens in
            the whole optimizer step (`optimizer_step_totals`); ignored by the other modes.

    Returns:
        loss (0-dim, back-propagated) and metadata, as `grpo_microbatch_train_step` returns them,
        plus "kl_to_reference" (the token mean of the KL estimate, nats) with ref_log_probs.
    """
    _check_shapes(policy_log_probs, response_mask, length_normalization, normalize_constant)
    if min(totals.sequences, totals.response_tokens, totals.longest_response) < 1:
        raise ValueError(f"an optimizer step needs sequences and response tokens, got {totals}")
    if length_normalization == "prompt":
        _check_prompt_totals(totals, prompt_tokens, len(response_mask))

    def reduce(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return _normalized_loss(
            per_token, mask, length_normalization, totals.sequences / len(mask), normalize_constant,
            longest=totals.longest_response, total_tokens=totals.response_tokens,
            prompt_tokens=prompt_tokens, prompts=totals.prompts,
        )

    return _backward(policy_log_probs, response_mask, loss_type, reduce, raw_rewards, advantages,
                     old_log_probs, cliprange, hyperparameters, importance_weights, ref_log_probs,
                     kl_coef)
