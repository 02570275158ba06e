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
    out = {"log_probs": label_log_probs(logits, labels)}
    if return_token_entropy:
        with torch.no_grad():
            out["token_entropy"] = compute_entropy(logits)
    return out


def label_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[labels]: (batch_size, sequence_length) from (batch_size,
    sequence_length, vocab_size) logits and (batch_size, sequence_length) token ids."""
    label_logits = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    return label_logits - torch.logsumexp(logits, dim=-1)


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
