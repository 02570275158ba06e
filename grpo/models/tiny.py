"""A tiny Qwen2 policy with a character tokenizer, built locally for the toy addition task.

The toy task: the prompt is `Q: a+b A:` (the `toy` prompt template `Q: {question} A:` applied to
the question `a+b`, see `grpo.data.datasets`) and the response to learn is `<answer>N</answer>` followed by
EOS, with N = a + b. The model is a 2-layer, hidden-64 Qwen2 (124,672 parameters with the
19-token vocabulary) saved with `save_pretrained`, so `grpo.models.loading.load_policy` loads it through
the same offline code path as Qwen2.5-Math-1.5B.

Pure RL from random weights settles on "always the most frequent sum" (reward 0.2), and so does
RL from a model that has learned the format but not yet to look at the operands, which is where
a fixed number of supervised steps leaves many seeds (the moment the model starts using the
operands varies from ~15 to ~100 steps between seeds). So the build ends with a supervised
warm-up on correct answers, with all sums equally frequent, that runs until the greedy accuracy
first reaches 0.25 (at least 10 steps): the model then answers in the right format and has begun
to condition on the operands, but is mostly wrong (greedy accuracy 0.28-0.32 after 13-52 steps over
seeds 0-7),
which leaves RL room to raise it.

The build is deterministic given its settings, which include the torch and transformers versions
and the CPU kernels torch runs (`grpo.models.build.numerics_settings`), idempotent, and safe when several processes build the same directory at once
(`grpo.models.build`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from grpo.data.prompts import format_prompt, load_prompt_template
from grpo.data.toy_task import toy_pairs
from grpo.models.build import build_once, isolated_torch_state, numerics_settings
from grpo.models.tiny_tokenizer import ANSWER_CLOSE, ANSWER_OPEN, POSITIONS, build_tokenizer

# Bump when the architecture, tokenizer or warm-up recipe changes, so old caches are rebuilt.
BUILD_FORMAT_VERSION = 3


def tiny_config(vocab_size: int) -> Qwen2Config:
    """The tiny Qwen2 architecture: 2 layers, hidden 64, MLP 256, 2 query / 1 key-value heads
    (head dim 32, the smallest vLLM's CPU attention serves), tied input/output embeddings,
    256 positions."""
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=POSITIONS,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=1,
    )


def toy_prompt(question: str) -> str:
    """The `toy` prompt (grpo/data/templates/toy.prompt) for a question such as `3+4`: `Q: 3+4 A:`."""
    return format_prompt(load_prompt_template("toy"), question)


def toy_response(answer: str) -> str:
    """The well-formed response for an answer such as `7`: `<answer>7</answer>`."""
    return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


def _sft_batch(
    tokenizer: PreTrainedTokenizerFast, pairs: Sequence[tuple[str, str]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, labels), each (B, T) int64, for prompt + correct
    response + EOS of each (question, answer) pair; labels are -100 on prompt tokens and padding,
    so only the response is learned."""
    rows = []
    for question, answer in pairs:
        prompt_ids = tokenizer(toy_prompt(question))["input_ids"]
        response_ids = tokenizer(toy_response(answer))["input_ids"] + [tokenizer.eos_token_id]
        rows.append((prompt_ids + response_ids, [-100] * len(prompt_ids) + response_ids))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (ids, lab) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
        labels[i, : len(lab)] = torch.tensor(lab)
    return input_ids, attention_mask, labels


def warm_up(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    min_steps: int,
    target_accuracy: float | None,
    max_steps: int,
    seed: int,
    lr: float,
    batch_size: int,
    max_operand: int,
) -> tuple[int, float]:
    """Supervised warm-up in place: AdamW steps of cross-entropy on correct toy responses
    (`<answer>N</answer>` + EOS, prompt tokens masked), each on `batch_size` questions a+b,
    a, b in 0..max_operand, drawn with replacement by a generator seeded `seed`: first a sum,
    uniformly, then a pair with that sum. Balanced sums give the rare answers (0, 2*max_operand)
    as much probability as the common ones, so that RL can later find them by sampling.

    Runs `min_steps` steps, then, unless `target_accuracy` is None, keeps going until
    `greedy_accuracy` (checked after every step) reaches `target_accuracy`, `max_steps` at most.
    Returns (steps taken, greedy accuracy at the end); the model is left in eval mode.
    """
    by_sum: dict[str, list[tuple[str, str]]] = {}
    for question, answer in toy_pairs(max_operand):
        by_sum.setdefault(answer, []).append((question, answer))
    sums = list(by_sum.values())
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    steps = 0
    accuracy = greedy_accuracy(model, tokenizer, max_operand)
    while steps < min_steps or (
        target_accuracy is not None and accuracy < target_accuracy and steps < max_steps
    ):
        model.train()
        batch = []
        for _ in range(batch_size):
            same_sum = sums[int(torch.randint(len(sums), (), generator=generator))]
            batch.append(same_sum[int(torch.randint(len(same_sum), (), generator=generator))])
        input_ids, attention_mask, labels = _sft_batch(tokenizer, batch)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
        model.eval()
        if steps >= min_steps:
            accuracy = greedy_accuracy(model, tokenizer, max_operand)
    return steps, accuracy


@torch.no_grad()
def greedy_accuracy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, max_operand: int = 4
) -> float:
    """Fraction of all (max_operand + 1)^2 toy questions whose greedy response, cut after the
    first `</answer>` (the toy prompt's stop string) within 8 new tokens, is exactly
    `<answer>N</answer>` with the right N."""
    pairs = toy_pairs(max_operand)
    prompts = [toy_prompt(question) for question, _ in pairs]
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        batch = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
    finally:
        tokenizer.padding_side = padding_side
    out = model.generate(
        **batch,
        do_sample=False,
        max_new_tokens=8,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(ANSWER_CLOSE)],
    )
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    responses = ["".join(text.partition(ANSWER_CLOSE)[:2]) for text in texts]
    correct = sum(r == toy_response(answer) for r, (_, answer) in zip(responses, pairs, strict=True))
    return correct / len(pairs)


def build_tiny_model(
    out_dir: str | os.PathLike,
    seed: int = 0,
    warmup_steps: int = 10,
    warmup_target_accuracy: float | None = 0.25,
    warmup_max_steps: int = 300,
    warmup_lr: float = 3e-3,
    warmup_batch_size: int = 32,
    max_operand: int = 4,
) -> Path:
    """Build the tiny model and tokenizer into `out_dir` (unless already there) and return it.

    seed: seeds the random initialisation and the warm-up's question draws.
    warmup_steps, warmup_target_accuracy, warmup_max_steps, warmup_lr, warmup_batch_size: the
      supervised warm-up (see `warm_up`): at least warmup_steps steps, then on until the greedy
      accuracy reaches warmup_target_accuracy (None: stop at warmup_steps), at most
      warmup_max_steps. warmup_steps=0 with target None leaves the random initialisation.
    max_operand: warm-up questions are a+b with a, b in 0..max_operand.

    Idempotent and safe under concurrent builds (`grpo.models.build.build_once`): a directory
    holding a finished build with the same settings is returned as is, one with other settings
    is rebuilt, any other non-empty directory raises FileExistsError. Takes 0.3-2 s on one core.
    """
    settings = {
        "format_version": BUILD_FORMAT_VERSION,
        "seed": seed,
        "warmup_steps": warmup_steps,
        "warmup_target_accuracy": warmup_target_accuracy,
        "warmup_max_steps": warmup_max_steps,
        "warmup_lr": warmup_lr,
        "warmup_batch_size": warmup_batch_size,
        "max_operand": max_operand,
        **numerics_settings(),
    }
    return build_once(out_dir, settings, _build_into)


def _build_into(directory: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """Initialise, warm up and save model + tokenizer into `directory`; returns the warm-up's
    steps taken and greedy accuracy at the end."""
    with isolated_torch_state():
        tokenizer = build_tokenizer()
        torch.manual_seed(settings["seed"])
        model = Qwen2ForCausalLM(tiny_config(len(tokenizer))).float()
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        steps, accuracy = warm_up(
            model,
            tokenizer,
            min_steps=settings["warmup_steps"],
            target_accuracy=settings["warmup_target_accuracy"],
            max_steps=settings["warmup_max_steps"],
            seed=settings["seed"],
            lr=settings["warmup_lr"],
            batch_size=settings["warmup_batch_size"],
            max_operand=settings["max_operand"],
        )
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        return {"warmup_steps_taken": steps, "greedy_accuracy": accuracy}
