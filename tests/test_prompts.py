"""Prompt templates and the prompt/reward-function pairing check."""

from __future__ import annotations

import pytest

from grpo import (
    PROMPT_REWARD_PAIRS,
    REWARD_FNS,
    check_prompt_reward_pair,
    format_prompt,
    load_prompt_template,
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
        assert reward_name in REWARD_FNS
        check_prompt_reward_pair(prompt_name, reward_name)  # does not raise


def test_mismatched_pair_names_the_config_keys_and_the_fix():
    with pytest.raises(ValueError) as info:
        check_prompt_reward_pair("r1_zero", "question_only_reward_fn")
    message = str(info.value)
    assert "prompt.name='r1_zero'" in message
    assert "Set prompt.reward_fn=r1_zero_reward_fn" in message
    assert "prompt.name=question_only" in message


@pytest.mark.parametrize(
    ("prompt_name", "reward_name", "message"),
    [
        ("cot", "r1_zero_reward_fn", "prompt.name='cot' is not a known prompt"),
        ("r1_zero", "exact_match", "prompt.reward_fn='exact_match' is not a known reward"),
    ],
)
def test_unknown_names_in_the_pair(prompt_name, reward_name, message):
    with pytest.raises(ValueError, match=message):
        check_prompt_reward_pair(prompt_name, reward_name)
