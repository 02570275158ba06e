"""Turn (prompt, response) string pairs into model inputs, next-token labels and a response mask."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def _check_pairs(n_prompts: int, n_outputs: int) -> None:
    if n_prompts != n_outputs:
        raise ValueError(f"got {n_prompts} prompts but {n_outputs} outputs; they must pair up")
    if n_prompts == 0:
        raise ValueError("cannot build a batch from zero examples")


def pack_prompt_and_output_ids(
    prompt_ids: Sequence[Sequence[int]],
    output_ids: Sequence[Sequence[int]],
    pad_token_id: int,
) -> dict[str, torch.Tensor]:
    """Concatenate prompt and response token ids, right-pad, and shift into inputs and labels.

    Args:
        prompt_ids: per example, the prompt token ids.
        output_ids: per example, the response token ids.
        pad_token_id: id written into the padding (padding is excluded by the mask anyway).

    Returns:
        With L = max(len(prompt) + len(response)) over the batch, all of shape (batch_size, L - 1):
        "input_ids" (int64): the concatenated, padded ids with the last position dropped;
        "labels" (int64): the same ids shifted left by one (the next token at each position);
        "response_mask" (bool): True where `labels` holds a response token.
    """
    _check_pairs(len(prompt_ids), len(output_ids))
    full_len = max(len(p) + len(o) for p, o in zip(prompt_ids, output_ids, strict=True))
    ids = torch.full((len(prompt_ids), full_len), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), full_len), dtype=torch.bool)
    for row, (prompt, output) in enumerate(zip(prompt_ids, output_ids, strict=True)):
        n_prompt, n_total = len(prompt), len(prompt) + len(output)
        ids[row, :n_total] = torch.tensor([*prompt, *output], dtype=torch.long)
        mask[row, n_prompt:n_total] = True
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": mask[:, 1:]}


def tokenize_prompt_and_output(
    prompt_strs: Sequence[str],
    output_strs: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
) -> dict[str, torch.Tensor]:
    """Tokenize prompts and responses separately, concatenate them and build the response mask.

    The prompt is tokenized with the tokenizer's special tokens (a BOS where the tokenizer adds
    one, as an inference engine does); the response without, so no BOS lands mid-sequence.
    Padding uses `tokenizer.pad_token_id`, or the EOS id when the tokenizer has no pad token.

    Args:
        prompt_strs: batch_size prompt strings.
        output_strs: batch_size response strings.
        tokenizer: a Hugging Face tokenizer.

    Returns:
        "input_ids", "labels" (int64) and "response_mask" (bool), each of shape
        (batch_size, max(prompt_and_output_lens) - 1); see `pack_prompt_and_output_ids`.
    """
    pad_token_id = tokenizer.pad_token_id
    if pad_token_id is None:
        pad_token_id = tokenizer.eos_token_id
    if pad_token_id is None:
        raise ValueError("the tokenizer has neither a pad token nor an EOS token to pad with")
    _check_pairs(len(prompt_strs), len(output_strs))
    prompt_ids = tokenizer(list(prompt_strs))["input_ids"]
    output_ids = tokenizer(list(output_strs), add_special_tokens=False)["input_ids"]
    return pack_prompt_and_output_ids(prompt_ids, output_ids, pad_token_id)
