"""Tokenization into inputs/labels/response mask, per-token log-probs and entropies."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from grpo import (
    compute_entropy,
    get_response_log_probs,
    pack_prompt_and_output_ids,
    tokenize_prompt_and_output,
)

VOCAB = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3, "hello": 4, "world": 5, "a": 6, "b": 7}


def word_tokenizer(*, bos: bool = False, pad: bool = True) -> PreTrainedTokenizerFast:
    """Whitespace word-level tokenizer over VOCAB; optionally prepends [BOS] to every encoding."""
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="[BOS] $A", special_tokens=[("[BOS]", VOCAB["[BOS]"])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        eos_token="[EOS]",
        pad_token="[PAD]" if pad else None,
    )


def test_tokenize_prompt_and_output_hand_computed():
    # full sequences: [hello world | a b] (4 ids) and [a | b b] (3 ids, padded to 4 with [PAD]=0)
    out = tokenize_prompt_and_output(["hello world", "a"], ["a b", "b b"], word_tokenizer())
    assert out["input_ids"].tolist() == [[4, 5, 6], [6, 7, 7]]
    assert out["labels"].tolist() == [[5, 6, 7], [7, 7, 0]]
    assert out["response_mask"].tolist() == [[False, True, True], [True, True, False]]
    assert out["input_ids"].dtype == torch.long and out["response_mask"].dtype == torch.bool


def test_pack_prompt_and_output_ids_hand_computed():
    out = pack_prompt_and_output_ids([[10, 11], [12]], [[13], [14, 15, 16]], pad_token_id=0)
    # full rows [10 11 | 13 0] and [12 | 14 15 16]
    assert out["input_ids"].tolist() == [[10, 11, 13], [12, 14, 15]]
    assert out["labels"].tolist() == [[11, 13, 0], [14, 15, 16]]
    assert out["response_mask"].tolist() == [[False, True, False], [True, True, True]]


def test_tokenize_adds_bos_to_prompt_only_and_pads_with_eos_without_pad_token():
    out = tokenize_prompt_and_output(["a"], ["b"], word_tokenizer(bos=True, pad=False))
    # [BOS] a | b  -> no BOS before the response
    assert out["input_ids"].tolist() == [[2, 6]]
    assert out["labels"].tolist() == [[6, 7]]
    assert out["response_mask"].tolist() == [[False, True]]
    padded = tokenize_prompt_and_output(["a", "a"], ["b b", "b"], word_tokenizer(pad=False))
    assert padded["labels"].tolist() == [[7, 7], [7, VOCAB["[EOS]"]]]


def test_tokenize_rejects_unpaired_or_empty_lists():
    with pytest.raises(ValueError, match="pair up"):
        tokenize_prompt_and_output(["a", "b"], ["a"], word_tokenizer())
    with pytest.raises(ValueError, match="zero examples"):
        tokenize_prompt_and_output([], [], word_tokenizer())


def test_compute_entropy_hand_computed_and_stable():
    # softmax([0, 0, ln 2]) = [1/4, 1/4, 1/2]: H = 2 * (1/4) ln 4 + (1/2) ln 2 = 1.5 ln 2
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0)], [5.0, 5.0, 5.0]]])
    entropy = compute_entropy(logits)
    assert entropy.shape == (1, 2)
    assert entropy[0, 0].item() == pytest.approx(1.5 * math.log(2.0), abs=1e-6)
    assert entropy[0, 1].item() == pytest.approx(math.log(3.0), abs=1e-6)  # uniform over 3
    # huge logits: a naive softmax-then-log would give inf/NaN here
    peaked = compute_entropy(torch.tensor([[[1e4, 0.0, -1e4]]]))
    assert torch.isfinite(peaked).all() and peaked.item() == pytest.approx(0.0, abs=1e-6)


class FixedLogitsModel(torch.nn.Module):
    """Returns the same (sequence_length, vocab_size) logits for every row, times a learnable
    scale (so the log-probs carry a gradient)."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits
        self.scale = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.scale * self.logits.expand(input_ids.shape[0], -1, -1))


def test_get_response_log_probs_hand_computed():
    logits = torch.tensor([[0.0, 0.0, math.log(2.0)], [math.log(3.0), 0.0, 0.0]])
    model = FixedLogitsModel(logits)
    input_ids = torch.zeros((2, 2), dtype=torch.long)
    labels = torch.tensor([[2, 0], [0, 1]])
    out = get_response_log_probs(model, input_ids, labels, return_token_entropy=True)
    # position 0: p = [1/4, 1/4, 1/2]; position 1: p = [3/5, 1/5, 1/5]
    expected = [[math.log(0.5), math.log(0.6)], [math.log(0.25), math.log(0.2)]]
    torch.testing.assert_close(out["log_probs"], torch.tensor(expected))
    h0 = 1.5 * math.log(2.0)
    h1 = -(0.6 * math.log(0.6) + 2 * 0.2 * math.log(0.2))
    torch.testing.assert_close(out["token_entropy"], torch.tensor([[h0, h1], [h0, h1]]))
    assert out["log_probs"].requires_grad and not out["token_entropy"].requires_grad
    assert "token_entropy" not in get_response_log_probs(model, input_ids, labels)


def test_get_response_log_probs_matches_log_softmax_of_a_real_causal_lm():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=11, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config).eval()
    input_ids = torch.randint(0, 11, (3, 6))
    labels = torch.randint(0, 11, (3, 6))
    out = get_response_log_probs(model, input_ids, labels, return_token_entropy=True)
    logits = model(input_ids).logits
    reference = torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out["log_probs"], reference)
    probs = torch.softmax(logits, dim=-1)
    torch.testing.assert_close(out["token_entropy"], -(probs * probs.log()).sum(-1))
