"""Per-token log-probabilities and entropies of a causal language model.

Both are computed from the logits with the log-sum-exp form (log p_y = z_y - logsumexp(z)), which
is numerically stable and avoids materialising a full (batch_size, sequence_length, vocab_size)
log-softmax next to the logits.

fp32 (and fp64) logits are used as they are. Lower-precision logits (bf16 under `bf16-mixed`'s
autocast, fp16) are widened to fp32 for the log-softmax, a chunk of `CHUNK_ELEMENTS` logits at a
time (`chunked_label_log_probs`, `chunked_entropy`), so that a micro-batch's whole logits are never
held in fp32: a bf16 logsumexp subtracted from a bf16 logit is off by 0.022 nats on average
against fp64 of the same logits on Qwen-sized ones (bf16 keeps 8 significant bits: a logsumexp
between 16 and 32 is a multiple of 1/8), the fp32 one by 5e-7 (`bench/log_prob_precision.py`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

CHUNK_ELEMENTS = 2**25
"""Logits widened to fp32 at a time for lower-precision logits (128 MiB of fp32; 220 tokens of
Qwen's 151,936-token vocabulary); a chunk holds at least one token."""

FULL_PRECISION = (torch.float32, torch.float64)
"""Logit dtypes whose log-softmax is computed as they are, without widening or chunks."""


def _computation_dtype(logits: torch.Tensor) -> torch.dtype:
    """fp32 for bf16/fp16 logits, the logits' own dtype for fp32/fp64 ones."""
    return torch.promote_types(logits.dtype, torch.float32)


def _token_chunks(logits: torch.Tensor, chunk_elements: int) -> tuple[torch.Tensor, list[slice]]:
    """`logits` as (tokens, vocab_size) and the row slices of at most max(1, chunk_elements //
    vocab_size) tokens each that cover it."""
    if chunk_elements < 1:
        raise ValueError(f"chunk_elements must be >= 1, got {chunk_elements}")
    flat = logits.reshape(-1, logits.shape[-1])
    rows = max(1, chunk_elements // logits.shape[-1])
    return flat, [slice(start, start + rows) for start in range(0, flat.shape[0], rows)]


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (in nats) of the next-token distribution at every position.

    For fp32/fp64 logits H = logsumexp(z) - sum_v softmax(z)_v * z_v, which equals
    -sum_v p_v log p_v without ever taking the log of a (possibly underflowed) probability; bf16
    and fp16 logits go to `chunked_entropy` (fp32, in chunks).

    Args:
        logits: (batch_size, sequence_length, vocab_size) unnormalized logits (any leading dims).

    Returns:
        (batch_size, sequence_length) entropies in nats (fp32 for bf16/fp16 logits).
    """
    return entropy_as_is(logits) if logits.dtype in FULL_PRECISION else chunked_entropy(logits)


def entropy_as_is(logits: torch.Tensor) -> torch.Tensor:
    """`compute_entropy`'s fp32/fp64 path, in the logits' own dtype (and whatever autocast does to
    its ops): (...) entropies in nats from (..., vocab_size) logits."""
    probs = torch.softmax(logits, dim=-1)
    # einsum contracts the vocabulary dimension without an extra (..., vocab_size) product tensor.
    expected_logit = torch.einsum("...v,...v->...", probs, logits)
    return torch.logsumexp(logits, dim=-1) - expected_logit


def chunked_entropy(logits: torch.Tensor, chunk_elements: int = CHUNK_ELEMENTS) -> torch.Tensor:
    """Entropy (nats) -sum_v p_v log p_v with log p = z - logsumexp(z), computed in fp32 (fp64 for
    fp64 logits) over chunks of at most `chunk_elements` logits (at least one token), outside any
    autocast. A logging statistic: call it under no_grad, or its graph keeps every chunk.

    Args:
        logits: (..., vocab_size) unnormalized logits of any float dtype.
        chunk_elements: logits widened at a time.

    Returns:
        (...) entropies, in fp32 (fp64 for fp64 logits).
    """
    dtype = _computation_dtype(logits)
    flat, chunks = _token_chunks(logits, chunk_elements)
    entropy = torch.empty(flat.shape[0], dtype=dtype, device=logits.device)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        for rows in chunks:
            log_p = flat[rows].to(dtype, copy=True)
            log_p -= torch.logsumexp(log_p, dim=-1, keepdim=True)
            # an elementwise product and a sum: CPU einsum on a 2-D chunk is off by ~4e-3 nats
            entropy[rows] = -log_p.exp().mul_(log_p).sum(dim=-1)
    return entropy.reshape(logits.shape[:-1])


def get_response_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
) -> dict[str, torch.Tensor]:
    """Log-probabilities log p(labels[t] | input_ids[: t + 1]) under a causal LM.

    Nothing is masked: prompt and padding positions get values too; callers apply the response
    mask. The token entropy is computed without autograd (it is a logging statistic), so asking
    for it adds no memory to the backward graph.

    Args:
        model: causal LM returning an object with `.logits` of shape
            (batch_size, sequence_length, vocab_size) (a Hugging Face `PreTrainedModel`).
        input_ids: (batch_size, sequence_length) token ids (prompt + response, right-padded), on
            the model's device.
        labels: (batch_size, sequence_length) next-token ids (input ids shifted left by one).
        return_token_entropy: also return the per-token entropy of the next-token distribution.

    Returns:
        "log_probs": (batch_size, sequence_length) natural-log probabilities of `labels`.
        "token_entropy" (only if requested): (batch_size, sequence_length) entropies in nats.
    """
    logits = model(input_ids).logits
    out = {"log_probs": label_log_probs(logits, labels)}
    if return_token_entropy:
        with torch.no_grad():
            out["token_entropy"] = compute_entropy(logits)
    return out


def label_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[labels]: (batch_size, sequence_length) from (batch_size,
    sequence_length, vocab_size) logits and (batch_size, sequence_length) token ids. fp32/fp64
    logits: z_y - logsumexp(z) as they are; bf16/fp16 logits: `chunked_label_log_probs` (fp32
    log-probs, computed in fp32 a chunk at a time)."""
    if logits.dtype in FULL_PRECISION:
        return label_log_probs_as_is(logits, labels)
    return chunked_label_log_probs(logits, labels)


def label_log_probs_as_is(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """`label_log_probs`' fp32/fp64 path, z_y - logsumexp(z) in the logits' own dtype: (...) from
    (..., vocab_size) logits and (...) token ids."""
    label_logits = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    return label_logits - torch.logsumexp(logits, dim=-1)


def chunked_label_log_probs(logits: torch.Tensor, labels: torch.Tensor,
                            chunk_elements: int = CHUNK_ELEMENTS) -> torch.Tensor:
    """log softmax(logits)[labels] computed in fp32 (fp64 for fp64 logits) over chunks of at most
    `chunk_elements` logits (at least one token), with its own backward: it saves the logits as
    they are and one logsumexp a token, and forms the gradient g * (onehot(label) - softmax(z))
    chunk by chunk, so no whole fp32 copy of the logits is ever held (the gradient of the logits
    is returned in their dtype, as autograd's own would be).

    Args:
        logits: (..., vocab_size) unnormalized logits of any float dtype.
        labels: (...) token ids (int64) in [0, vocab_size).
        chunk_elements: logits widened at a time.

    Returns:
        (...) natural-log probabilities, in fp32 (fp64 for fp64 logits).
    """
    return _ChunkedLabelLogProbs.apply(logits, labels, chunk_elements)


class _ChunkedLabelLogProbs(torch.autograd.Function):
    """`chunked_label_log_probs`' forward and backward (arguments as there)."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor,
                chunk_elements: int) -> torch.Tensor:
        dtype = _computation_dtype(logits)
        flat, chunks = _token_chunks(logits, chunk_elements)
        flat_labels = labels.reshape(-1, 1)
        log_sum_exp = torch.empty(flat.shape[0], dtype=dtype, device=logits.device)
        with torch.autocast(device_type=logits.device.type, enabled=False):
            for rows in chunks:
                log_sum_exp[rows] = torch.logsumexp(flat[rows].to(dtype), dim=-1)
            label_logits = flat.gather(-1, flat_labels).squeeze(-1).to(dtype)
        ctx.save_for_backward(logits, labels, log_sum_exp)
        ctx.chunk_elements = chunk_elements
        return (label_logits - log_sum_exp).reshape(labels.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        logits, labels, log_sum_exp = ctx.saved_tensors
        flat, chunks = _token_chunks(logits, ctx.chunk_elements)
        flat_labels = labels.reshape(-1, 1)
        grad = grad_output.reshape(-1, 1).to(log_sum_exp.dtype)
        grad_logits = torch.empty_like(flat)
        with torch.autocast(device_type=logits.device.type, enabled=False):
            for rows in chunks:
                chunk = flat[rows].to(log_sum_exp.dtype, copy=True).sub_(log_sum_exp[rows, None])
                chunk.exp_().mul_(-grad[rows])
                grad_logits[rows] = chunk.scatter_add_(-1, flat_labels[rows], grad[rows])
        return grad_logits.reshape(logits.shape), None, None


def sampling_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The logits of the distribution rollouts are sampled from: divided by `temperature`, then
    cut to the nucleus of mass `top_p` (-inf outside it) by the rule of transformers'
    `TopPLogitsWarper`: a token is cut when the ascending cumulative probability up to it is
    <= 1 - top_p, the most likely token never. Shape (..., vocab_size) in and out; float32 unless
    temperature = top_p = 1, which returns `logits` itself.
    """
    if temperature <= 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature > 0 and top_p in (0, 1], got {temperature}, {top_p}")
    if temperature == 1.0 and top_p == 1.0:
        return logits
    scores = logits.float() / temperature
    if top_p < 1.0:
        ascending, order = torch.sort(scores, dim=-1)
        cut = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
        cut[..., -1] = False
        scores = scores.masked_fill(cut.scatter(-1, order, cut), float("-inf"))
    return scores


def sampling_log_probs(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float, top_p: float,
    too_early: torch.Tensor | None = None, end_ids: tuple[int, ...] = (),
) -> torch.Tensor:
    """Log-probs of `labels` under the sampling distribution: the minimum-length rule first
    (`end_ids` cannot be sampled where `too_early`, as vLLM's min_tokens and transformers'
    MinNewTokensLengthLogitsProcessor do), then `sampling_logits`.

    Args:
        logits: (batch_size, sequence_length, vocab_size) raw logits.
        labels: (batch_size, sequence_length) token ids.
        temperature: > 0; temperature = top_p = 1 without a mask gives `label_log_probs` exactly.
        top_p: nucleus mass in (0, 1].
        too_early: (batch_size, sequence_length) bool, the positions before the minimum response
            length; None: none.
        end_ids: the token ids that end a response (EOS), masked there.

    Returns:
        (batch_size, sequence_length) natural-log probabilities; -inf for a label outside the
        nucleus.
    """
    if too_early is not None and end_ids and bool(too_early.any()):
        logits = logits.float().clone()
        rows, positions = too_early.nonzero(as_tuple=True)
        for token in end_ids:
            logits[rows, positions, token] = float("-inf")
    return label_log_probs(sampling_logits(logits, temperature, top_p), labels)
