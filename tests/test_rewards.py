"""Boxed-answer extraction and the reward functions' format/answer semantics."""

from __future__ import annotations

import pytest

from grpo import (
    REWARD_FNS,
    answer_tag_reward_fn,
    extract_boxed_answer,
    question_only_reward_fn,
    r1_zero_reward_fn,
)

CORRECT = {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}
WRONG = {"format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}
MALFORMED = {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{\\{1, \\{2\\}\\}}", "\\{1, \\{2\\}\\}"),
        (
            "\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}",
            "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
        ),
        ("\\fbox{7}", "7"),
        ("\\boxed{}", ""),
        ("\\boxed{\\frac{1}{2}", None),
        ("no box here", None),
    ],
)
def test_extract_boxed_answer(text, expected):
    assert extract_boxed_answer(text) == expected


def test_r1_zero_reward_fn():
    assert r1_zero_reward_fn("2+2 is 4 </think> <answer>4</answer>", "4") == CORRECT
    assert r1_zero_reward_fn("</think> <answer>\\boxed{4}</answer>", "4") == CORRECT
    assert r1_zero_reward_fn("2+2 is 5 </think> <answer>5</answer>", "4") == WRONG
    assert r1_zero_reward_fn("</think> <answer>\\boxed{4</answer>", "4") == WRONG
    assert r1_zero_reward_fn("</think><answer>4</answer>", "4") == MALFORMED  # no space
    assert r1_zero_reward_fn("</think> <answer>4", "4") == MALFORMED
    assert r1_zero_reward_fn("the answer is \\boxed{4}", "4") == MALFORMED
    # the answer is everything after the last <answer> (as in the CS336 grader)
    assert r1_zero_reward_fn("</think> <answer>3</answer> <answer>4</answer>", "4") == CORRECT


def test_question_only_reward_fn():
    assert question_only_reward_fn("so the answer is $\\boxed{\\frac{1}{2}}$", "0.5") == CORRECT
    assert question_only_reward_fn("\\boxed{3} no wait \\boxed{4}", "4") == CORRECT
    assert question_only_reward_fn("\\boxed{3}", "4") == WRONG
    assert question_only_reward_fn("the answer is 4", "4") == MALFORMED


def test_answer_tag_reward_fn_for_the_toy_task():
    assert answer_tag_reward_fn(" <answer>7</answer>", "7") == CORRECT
    assert answer_tag_reward_fn(" 3+4 is <answer> 7 </answer>", 7) == CORRECT
    assert answer_tag_reward_fn(" <answer>6</answer> <answer>7</answer>", "7") == CORRECT
    assert answer_tag_reward_fn(" <answer>8</answer>", "7") == WRONG
    assert answer_tag_reward_fn(" <answer></answer>", "7") == WRONG
    assert answer_tag_reward_fn(" 7", "7") == MALFORMED
    assert answer_tag_reward_fn(" <answer>7", "7") == MALFORMED


def test_reward_registry():
    assert REWARD_FNS == {
        "r1_zero_reward_fn": r1_zero_reward_fn,
        "question_only_reward_fn": question_only_reward_fn,
        "answer_tag_reward_fn": answer_tag_reward_fn,
    }
