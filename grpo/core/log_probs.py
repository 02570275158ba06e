"""Per-token log-probabilities and entropies of a causal language model.

Both are computed from the logits with the log-sum-exp form (log p_y = z_y - logsumexp(z)), which
is numerically stable and avoids materialising a full (batch_size, sequence_length, vocab_size)
log-softmax next to the logits.
"""

from __future__ import annotations

import torch


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (in nats) of the next-token distribution at every position.

    H = logsumexp(z) - sum_v softmax(z)_v * z_v, which equals -sum_v p_v log p_v without ever
    taking the log of a (possibly underflowed) probability.

    Args:
        logits: (batch_size, sequence_length, vocab_size) unnormalized logits (any leading dims).

    Returns:
        (batch_size, sequence_length) entropies in nats.
    """
    probs = torch.softmax(logits, dim=-1)
    # einsum contracts the vocabulary dimension without an extra (..., vocab_size) product tensor.
    expected_logit = torch.einsum("...v,...v->...", probs, logits)
    return torch.logsumexp(logits, dim=-1) - expected_logit


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
    label_logits = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    out = {"log_probs": label_logits - torch.logsumexp(logits, dim=-1)}
    if return_token_entropy:
        with torch.no_grad():
            out["token_entropy"] = compute_entropy(logits)
    return out
