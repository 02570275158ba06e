"""Log-probs and entropies of bf16 logits (grpo.core.log_probs): computed in fp32 within 1e-3 nats
of fp64 on Qwen-sized logits, chunk by chunk (any number of tokens a chunk, down to one), with a
gradient equal to autograd's of the unchunked fp64 log-softmax; fp32 logits as they were."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from grpo import get_response_log_probs
from grpo.core.log_probs import (
    chunked_entropy,
    chunked_label_log_probs,
    compute_entropy,
    entropy_as_is,
    label_log_probs,
    label_log_probs_as_is,
)

QWEN_VOCAB = 151_936
BOUND = 1e-3
"""The most a log-prob or entropy of bf16 logits may differ from fp64 of the same logits (nats)."""


def qwen_sized_bf16_logits(tokens: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, tokens, QWEN_VOCAB) bf16 logits, N(0, 9) with a top token +15 a row, and labels sampled
    from each row's distribution."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, tokens, QWEN_VOCAB, generator=generator) * 3
    logits[0, torch.arange(tokens), torch.randint(0, QWEN_VOCAB, (tokens,), generator=generator)] += 15
    labels = torch.multinomial(torch.softmax(logits[0], -1), 1, generator=generator).T
    return logits.bfloat16(), labels


def fp64_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.double(), dim=-1)


def test_bf16_log_probs_and_entropy_are_within_1e_3_nats_of_fp64_of_the_same_logits():
    logits, labels = qwen_sized_bf16_logits(48)
    log_p = fp64_log_softmax(logits)
    reference = log_p.gather(-1, labels[..., None]).squeeze(-1)
    entropy_reference = -(log_p.exp() * log_p).sum(-1)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as the trainer calls them under bf16-mixed
        log_probs, entropy = label_log_probs(logits, labels), compute_entropy(logits)
    assert log_probs.dtype == entropy.dtype == torch.float32
    assert (log_probs.double() - reference).abs().max() <= BOUND
    assert (entropy.double() - entropy_reference).abs().max() <= BOUND
    # the bf16 formula the fp32 path keeps is off by ~2e-2 here: the bound is not loose
    with torch.autocast("cpu", dtype=torch.bfloat16):
        as_is = label_log_probs_as_is(logits, labels).double(), entropy_as_is(logits).double()
    assert (as_is[0] - reference).abs().mean() > 10 * BOUND
    assert (as_is[1] - entropy_reference).abs().mean() > 10 * BOUND


def test_bf16_gradient_is_fp64_autograd_s_to_bf16_rounding():
    logits, labels = qwen_sized_bf16_logits(8, seed=1)
    grad_output = torch.randn(labels.shape, generator=torch.Generator().manual_seed(2))
    exact = logits.double().requires_grad_()
    (reference,) = torch.autograd.grad(
        fp64_log_softmax(exact).gather(-1, labels[..., None]).squeeze(-1), exact, grad_output.double())
    leaf = logits.clone().requires_grad_()
    (grad,) = torch.autograd.grad(label_log_probs(leaf, labels), leaf, grad_output)
    assert grad.dtype == torch.bfloat16
    # each element within a bf16 step (2**-7 relative) of the fp64 gradient
    torch.testing.assert_close(grad.double(), reference, rtol=2**-7, atol=1e-30)


@pytest.mark.parametrize("chunk_rows", [1, 2, 4, 21, 100], ids=lambda r: f"{r}-token chunks")
def test_chunked_log_probs_entropy_and_gradient_equal_the_unchunked_fp64_ones(chunk_rows: int):
    # 21 tokens: chunks of 2 and 4 leave a last chunk of 1; 100 is one chunk larger than the batch
    generator = torch.Generator().manual_seed(3)
    logits = (torch.randn(3, 7, 50, dtype=torch.float64, generator=generator) * 4).requires_grad_()
    labels = torch.randint(0, 50, (3, 7), generator=generator)
    chunk_elements = chunk_rows * 50 + 49  # a part-token remainder is not a token more
    log_probs = chunked_label_log_probs(logits, labels, chunk_elements)
    log_p = torch.log_softmax(logits, dim=-1)
    reference = log_p.gather(-1, labels[..., None]).squeeze(-1)
    torch.testing.assert_close(log_probs, reference, rtol=0, atol=1e-13)
    grad_output = torch.randn(3, 7, dtype=torch.float64, generator=generator)
    (grad,) = torch.autograd.grad(log_probs, logits, grad_output)
    (reference_grad,) = torch.autograd.grad(reference, logits, grad_output)
    torch.testing.assert_close(grad, reference_grad, rtol=0, atol=1e-14)
    entropy = chunked_entropy(logits.detach(), chunk_elements)
    torch.testing.assert_close(entropy, -(log_p.exp() * log_p).sum(-1).detach(), rtol=0, atol=1e-13)
    assert torch.autograd.gradcheck(lambda z: chunked_label_log_probs(z, labels, chunk_elements),
                                    (logits,))


def test_a_chunk_smaller_than_a_token_holds_one_token():
    logits = torch.randn(5, 11, dtype=torch.float64)
    labels = torch.randint(0, 11, (5,))
    reference = torch.log_softmax(logits, -1).gather(-1, labels[:, None]).squeeze(-1)
    torch.testing.assert_close(chunked_label_log_probs(logits, labels, 1), reference)
    with pytest.raises(ValueError, match="chunk_elements must be >= 1"):
        chunked_label_log_probs(logits, labels, 0)


def test_fp32_logits_take_the_fp32_path_bit_for_bit():
    # the pinned CPU demo curves (tests/test_reproducibility.py) rest on this path
    logits = torch.randn(2, 5, 300) * 4
    labels = torch.randint(0, 300, (2, 5))
    assert torch.equal(label_log_probs(logits, labels), label_log_probs_as_is(logits, labels))
    assert torch.equal(compute_entropy(logits), entropy_as_is(logits))


def test_a_bf16_mixed_forward_gives_fp32_log_probs_within_1e_3_of_fp64_of_its_logits():
    # a causal LM of Qwen's vocabulary under bf16 autocast, as the train phase runs it
    torch.manual_seed(4)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=QWEN_VOCAB, n_positions=16, n_embd=8, n_layer=1,
                                       n_head=2)).eval()
    input_ids = torch.randint(0, QWEN_VOCAB, (2, 6))
    labels = torch.randint(0, QWEN_VOCAB, (2, 6))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids).logits
        out = get_response_log_probs(model, input_ids, labels, return_token_entropy=True)
    assert logits.dtype == torch.bfloat16 and out["log_probs"].dtype == torch.float32
    log_p = fp64_log_softmax(logits)
    reference = log_p.gather(-1, labels[..., None]).squeeze(-1)
    assert (out["log_probs"].double() - reference).abs().max() <= BOUND
    assert (out["token_entropy"].double() + (log_p.exp() * log_p).sum(-1)).abs().max() <= BOUND


def test_no_tokens_give_empty_log_probs_and_entropies():
    logits, labels = torch.zeros(2, 0, 9, dtype=torch.bfloat16), torch.zeros(2, 0, dtype=torch.long)
    assert label_log_probs(logits, labels).shape == compute_entropy(logits).shape == (2, 0)
