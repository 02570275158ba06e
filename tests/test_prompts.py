"""Prompt templates and the prompt/reward-function pairing check."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo import (
    PROMPT_REWARD_PAIRS,
    REWARD_FNS,
    format_prompt,
    load_prompt_template,
    reward_fn_for,
)


def test_r1_zero_template_is_the_cs336_prompt():
    template = load_prompt_template("r1_zero")
    assert template.startswith(
        "A conversation between User and Assistant. The User asks a question"
    )
    assert "<think> reasoning process here </think> <answer> answer here </answer>." in template
    assert template.endswith("\nUser: {question}\nAssistant: <think>")


def test_format_prompt_keeps_latex_braces():
    question = "What is $\\frac{1}{2} + \\{x\\}$?"
    prompt = format_prompt(load_prompt_template("r1_zero"), question)
    assert prompt.endswith(f"User: {question}\nAssistant: <think>")
    assert format_prompt(load_prompt_template("question_only"), question) == question
    assert format_prompt(load_prompt_template("toy"), "3+4") == "Q: 3+4 A:"


def test_format_prompt_requires_the_placeholder():
    with pytest.raises(ValueError, match="no {question} placeholder"):
        format_prompt("Q: {problem}", "3+4")


def test_unknown_prompt():
    with pytest.raises(ValueError, match="unknown prompt 'cot'"):
        load_prompt_template("cot")


def test_every_prompt_is_paired_with_a_registered_reward_fn():
    assert PROMPT_REWARD_PAIRS == {
        "r1_zero": "r1_zero_reward_fn",
        "question_only": "question_only_reward_fn",
        "toy": "answer_tag_reward_fn",
    }
    for prompt_name, reward_name in PROMPT_REWARD_PAIRS.items():
        assert reward_fn_for(prompt_name) is REWARD_FNS[reward_name]
    # a well-formed correct completion of each prompt scores 1 with its paired reward only
    assert reward_fn_for("r1_zero")("4 </think> <answer>4</answer>", "4")["reward"] == 1.0
    assert reward_fn_for("question_only")("\\boxed{4}", "4")["reward"] == 1.0
    assert reward_fn_for("toy")(" <answer>4</answer>", "4")["reward"] == 1.0
    assert reward_fn_for("r1_zero")("\\boxed{4}", "4")["reward"] == 0.0


def test_prompt_configs_are_the_paired_prompts_and_state_no_reward():
    conf = Path(__file__).resolve().parents[1] / "conf" / "prompt"
    yamls = {path.stem: OmegaConf.load(path) for path in conf.glob("*.yaml")}
    assert set(yamls) == set(PROMPT_REWARD_PAIRS)
    for name, cfg in yamls.items():
        assert cfg.name == name and set(cfg) == {"name", "stop"}


def test_unknown_prompt_names_the_config_key():
    with pytest.raises(ValueError, match="prompt.name='cot' is not a known prompt"):
        reward_fn_for("cot")
