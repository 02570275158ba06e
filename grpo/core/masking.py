"""Masked reductions over per-token tensors (CS336 assignment 5 `masked_mean` / `masked_normalize`).

Masks are boolean or 0/1 tensors of the same shape as the data; positions where the mask is 0 are
excluded. Excluded positions are selected away (`torch.where`), not multiplied by zero, so a NaN or
inf at a padding position cannot leak into the result or its gradient.
"""

from __future__ import annotations

import torch


def _masked_sum(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None) -> torch.Tensor:
    """Sum of `tensor` over the positions where `mask` is nonzero, along `dim` (all dims if None)."""
    kept = torch.where(
        mask.bool(), tensor, torch.zeros((), dtype=tensor.dtype, device=tensor.device)
    )
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `tensor` over the positions where `mask` is 1.

    Args:
        tensor: any shape, e.g. (batch_size, sequence_length) per-token losses.
        mask: same shape as `tensor`; 1/True marks the positions that count.
        dim: dimension to average along; None averages over every masked position.

    Returns:
        The masked mean, shaped like `tensor.mean(dim)` (a 0-dim tensor when dim is None).
        A slice with no masked position gives NaN (0/0), exactly as in the CS336 reference;
        `grpo_microbatch_train_step` guards against that case itself.
    """
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return _masked_sum(tensor, mask, dim) / count


def masked_normalize(
    tensor: torch.Tensor,
    mask: torch.Tensor,
    dim: int | None = None,
    normalize_constant: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """Sum of `tensor` over the positions where `mask` is 1, divided by `normalize_constant`.

    Args:
        tensor: any shape, e.g. (batch_size, sequence_length) per-token losses.
        mask: same shape as `tensor`; 1/True marks the positions that count.
        dim: dimension to sum along; None sums over every masked position.
        normalize_constant: the divisor (for Dr. GRPO, the maximum generation length in tokens);
            a 0-dim tensor also works.

    Returns:
        The normalized masked sum, shaped like `tensor.sum(dim)` (0-dim when dim is None).
    """
    return _masked_sum(tensor, mask, dim) / normalize_constant
