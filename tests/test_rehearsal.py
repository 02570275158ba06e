"""The Qwen-shaped rehearsal model (grpo.models.rehearsal): Qwen2.5-Math-1.5B's tokenizer, the R1-Zero
prompt's token boundaries and masks, the `</answer>` stop inside a BPE merge, and a short GRPO run
on the shipped MATH sample with the transformers engine (tests/test_vllm_cpu.py runs it with vLLM).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from training_runs import shipped_data

from grpo.core.tokenization import tokenize_prompt_and_output
from grpo.data.prompts import format_prompt, load_prompt_template
from grpo.models import rehearsal
from grpo.models.loading import load_policy
from grpo.rollout.base import SamplingSettings
from grpo.rollout.hf import HFRolloutEngine
from grpo.training.trainer import train

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is $2 + 3$?"
RESPONSE = " Add the numbers. </think> <answer> 5 </answer>"
# the BPE tokens of RESPONSE ("Ġ" is a leading space): "</think>" and "</answer>" are 3 pieces
RESPONSE_TOKENS = ["ĠAdd", "Ġthe", "Ġnumbers", ".", "Ġ</", "think", ">", "Ġ<", "answer", ">",
                   "Ġ", "5", "Ġ</", "answer", ">"]
ANSWER_CLOSE = "</answer>"
NEWLINE_AFTER_TAG = ">Ċ"  # one BPE token: ">" followed by a newline


def rehearsal_config(model_dir: Path, *overrides: str):
    """`model=qwen-rehearsal data=math_sample prompt=r1_zero`, a few small CPU steps."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=[
            "model=qwen-rehearsal", f"model.path={model_dir}", *shipped_data("math_sample"),
            "prompt=r1_zero",
            "n_grpo_steps=3", "rollout_batch_size=8", "group_size=4", "train_batch_size=8",
            "micro_batch_size=4", "sampling.max_new_tokens=24", "eval.eval_every=1",
            "eval.n_examples=8", "eval.temperature=0.0", "learning_rate=1e-3",
            *overrides,
        ])


def test_tokenizer_is_qwen25_math_15b_s(rehearsal_model_dir: Path) -> None:
    model, tokenizer = load_policy({"path": str(rehearsal_model_dir)}, "cpu")
    # Qwen2.5-Math-1.5B: 151,643 BPE tokens + 22 added ones; 151,936 embedding rows
    assert len(tokenizer) == 151_665
    assert model.config.vocab_size == model.get_input_embeddings().weight.shape[0] == 151_936
    assert model.config.tie_word_embeddings
    assert model.config.rope_parameters["rope_theta"] == 10000.0
    assert model.config.max_position_embeddings == 4096
    added = {i: t for i, t in tokenizer.added_tokens_decoder.items()}
    assert [added[i].content for i in sorted(added)] == list(rehearsal.QWEN25_ADDED_TOKENS)
    assert [added[i].special for i in sorted(added)] == [True] * 14 + [False] * 8
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.eos_token_id == model.config.eos_token_id == 151_643
    assert tokenizer.bos_token is None
    # known ids of Qwen's BPE
    assert tokenizer("Hello world")["input_ids"] == [9707, 1879]
    assert tokenizer(" Hello world")["input_ids"] == [21927, 1879]
    # Qwen3's extra added tokens are gone: <think> is BPE pieces, as for Qwen2.5-Math-1.5B
    assert tokenizer.convert_ids_to_tokens(tokenizer("<think>")["input_ids"]) == ["<th", "ink", ">"]
    head = model.config.hidden_size // model.config.num_attention_heads
    assert head == 32  # served by vLLM's CPU attention


def test_r1_zero_example_token_by_token(rehearsal_model_dir: Path) -> None:
    _, tokenizer = load_policy({"path": str(rehearsal_model_dir)}, "cpu")
    prompt = format_prompt(load_prompt_template("r1_zero"), QUESTION)
    prompt_ids = tokenizer(prompt)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(prompt_ids[-5:]) == ["Assistant", ":", "Ġ<", "think", ">"]
    response_ids = tokenizer(RESPONSE, add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(response_ids) == RESPONSE_TOKENS

    batch = tokenize_prompt_and_output([prompt, "x"], [RESPONSE, "y"], tokenizer)
    n_prompt, n_response = len(prompt_ids), len(response_ids)
    width = n_prompt + n_response - 1
    assert batch["input_ids"].shape == batch["labels"].shape == (2, width)
    assert batch["input_ids"][0].tolist() == prompt_ids + response_ids[:-1]
    assert batch["labels"][0].tolist() == prompt_ids[1:] + response_ids
    # the mask is on exactly the response tokens of the labels, the first one included
    mask = batch["response_mask"][0].tolist()
    assert mask == [False] * (n_prompt - 1) + [True] * n_response
    labels = batch["labels"][0][batch["response_mask"][0]].tolist()
    assert labels == response_ids and tokenizer.decode(labels) == RESPONSE
    # the shorter row is padded with <|endoftext|>, outside the mask
    assert batch["response_mask"][1].sum() == 1 and batch["labels"][1, -1] == 151_643


@pytest.fixture(scope="module")
def greedy_rollouts(rehearsal_model_dir: Path):
    policy, tokenizer = load_policy({"path": str(rehearsal_model_dir)}, "cpu")
    engine = HFRolloutEngine(policy, tokenizer, batch_size=8, max_model_len=512)
    template = load_prompt_template("r1_zero")
    prompts = [format_prompt(template, q) for q in (QUESTION, "Solve for $x$: $2x + 5 = 17$.")]
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=24, stop=(ANSWER_CLOSE,))
    return tokenizer, prompts, [g[0] for g in engine.generate(prompts, 1, greedy)], engine


def test_answer_stop_inside_a_bpe_merge(greedy_rollouts) -> None:
    """The warmed-up model ends with ` </answer>` + newline: the token `>\\n` completes the stop
    string and runs past it. The text is cut after `</answer>`; the token stays whole; the
    trainer re-tokenizes the text, so its last response token is `>`."""
    tokenizer, prompts, rollouts, _ = greedy_rollouts
    for prompt, rollout in zip(prompts, rollouts, strict=True):
        assert rollout.finish_reason == "stop"
        assert rollout.text.endswith(ANSWER_CLOSE) and "</think> <answer>" in rollout.text
        assert tokenizer.convert_ids_to_tokens(rollout.token_ids[-1:]) == [NEWLINE_AFTER_TAG]
        assert tokenizer.decode(rollout.token_ids) == rollout.text + "\n"
        batch = tokenize_prompt_and_output([prompt], [rollout.text], tokenizer)
        trained = batch["labels"][0][batch["response_mask"][0]].tolist()
        assert tokenizer.convert_ids_to_tokens(trained[-3:]) == ["Ġ</", "answer", ">"]
        assert len(trained) == len(rollout.token_ids)


def test_responses_are_cut_at_max_new_tokens(greedy_rollouts) -> None:
    tokenizer, prompts, _, engine = greedy_rollouts
    short = SamplingSettings(temperature=0.0, max_new_tokens=3, stop=(ANSWER_CLOSE,))
    for group in engine.generate(prompts, 2, short):
        for rollout in group:
            assert rollout.finish_reason == "length" and len(rollout.token_ids) == 3
            assert rollout.text == tokenizer.decode(rollout.token_ids)


@pytest.mark.slow
def test_rehearsal_run_with_the_hf_engine(rehearsal_model_dir: Path, tmp_path: Path) -> None:
    status = train(rehearsal_config(rehearsal_model_dir, "rollout=hf"), tmp_path)
    assert status["status"] == "completed" and status["last_step"] == 3
    check_rehearsal_run(tmp_path)


def check_rehearsal_run(run_dir: Path) -> list[dict]:
    """The checks both engines' rehearsal runs must pass; returns the first eval samples."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]  # 0: the evaluation before any update
    assert "eval/reward" in records[0] and "train/loss" not in records[0]
    samples = [json.loads(line) for line in
               (run_dir / "rollouts" / "eval_step_000000.jsonl").read_text().splitlines()]
    assert len(samples) == 8
    truths = [json.loads(line)["solution"] for line in
              (ROOT / "data" / "math_sample" / "validation.jsonl").read_text().splitlines()]
    for sample, solution in zip(samples, truths, strict=True):
        # the ground truth is the last \boxed{} of the solution; every response is graded
        assert "\\boxed{" + sample["ground_truth"] + "}" in solution
        assert {"reward", "format_reward", "answer_reward"} <= sample.keys()
        assert sample["response_tokens"] <= 24
        well_formed = "</think> <answer>" in sample["response"] and sample["response"].endswith(
            ANSWER_CLOSE)
        assert sample["format_reward"] == float(well_formed)
    assert any(s["format_reward"] == 1.0 for s in samples)
    for record in records[1:]:
        # the rollouts are graded too; all-wrong groups give zero advantages and gradients
        assert 0.0 <= record["train/reward_mean"] <= record["train/format_reward_mean"] <= 1.0
        assert 0.0 <= record["train/grad_norm"] < float("inf")
    assert any(r["train/format_reward_mean"] > 0 for r in records[1:])
    return samples
