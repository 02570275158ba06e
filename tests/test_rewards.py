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
from grpo.grading.answers import MAX_ANSWER_CHARS
from grpo.grading.rewards import MAX_FINAL_ANSWERS

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
        ("\\boxed{1} then \\boxed{2", None),  # the last box is not closed
        ("no box here", None),
        ("\\boxed{a \\boxed{b}}", "b"),  # the last box, nested or not
        ("\\boxed{" + "{" * 8 + "}" * 8 + "}", "{" * 8 + "}" * 8),
        ("\\boxed{" + "{" * 9 + "}" * 9 + "}", None),  # nested deeper than MAX_BOX_NESTING
        ("\\boxed{" + "x" * MAX_ANSWER_CHARS + "}", "x" * MAX_ANSWER_CHARS),
        ("\\boxed{" + "x" * (MAX_ANSWER_CHARS + 1) + "}", None),  # longer than an answer can be
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
    # the answer is everything after the last <answer> (as in the CS336 grader) ...
    assert r1_zero_reward_fn("</think> <answer>4</answer> then", "4") == CORRECT
    assert r1_zero_reward_fn("</think> <answer>4 ok</answer> ok", "4") == CORRECT  # "4 ok ok"
    # ... but a second, different final answer after the reasoning is a hedge
    assert r1_zero_reward_fn("</think> <answer>3</answer> <answer>4</answer>", "4") == WRONG
    assert r1_zero_reward_fn("</think> <answer>4</answer> <answer>4</answer>", "4") == CORRECT
    assert r1_zero_reward_fn("</think> <answer>3</answer> <answer>4</answer>", "3, 4") == CORRECT
    assert r1_zero_reward_fn("say <answer>3</answer> </think> <answer>4</answer>", "4") == CORRECT
    assert r1_zero_reward_fn("</think> <answer>\\boxed{3} or \\boxed{4}</answer>", "4") == WRONG
    assert r1_zero_reward_fn("</think> <answer>\\boxed{3} or \\boxed{4}</answer>", "3") == WRONG
    assert r1_zero_reward_fn("</think> <answer>\\boxed{4} so \\boxed{4}</answer>", "4") == CORRECT


def test_more_final_answers_than_the_bound_are_wrong_unread():
    boxes = "".join(f"\\boxed{{{k}}}" for k in range(MAX_FINAL_ANSWERS))
    truth = ", ".join(str(k) for k in range(MAX_FINAL_ANSWERS))
    assert r1_zero_reward_fn(f"</think> <answer>{boxes}</answer>", truth) == CORRECT
    assert r1_zero_reward_fn(f"</think> <answer>{boxes}\\boxed{{1}}</answer>", truth) == WRONG
    assert question_only_reward_fn(boxes, truth) == CORRECT
    assert question_only_reward_fn(boxes + "\\boxed{1}", truth) == WRONG
    sections = "<answer>1</answer>" * MAX_FINAL_ANSWERS
    assert r1_zero_reward_fn(f"</think> {sections[:-18]}<answer>1</answer>", "1") == CORRECT
    assert r1_zero_reward_fn(f"</think> {sections}<answer>1</answer>", "1") == WRONG


def test_question_only_reward_fn():
    assert question_only_reward_fn("so the answer is $\\boxed{\\frac{1}{2}}$", "0.5") == CORRECT
    # several different boxes are several final answers: a hedge, even as a self-correction
    assert question_only_reward_fn("\\boxed{3} no wait \\boxed{4}", "4") == WRONG
    assert question_only_reward_fn("\\boxed{4}, so the answer is \\boxed{4.0}", "4") == CORRECT
    assert question_only_reward_fn("\\boxed{2} and \\boxed{3}", "2, 3") == CORRECT
    assert question_only_reward_fn("\\boxed{3} then \\boxed{4", "4") == MALFORMED
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


def test_a_boxed_ground_truth_is_graded_by_its_box():
    # MATH gives solutions: the answer is the last box of the ground truth, not its text
    solution = "Half of 4 is 2, and $2/4 = \\boxed{\\frac{1}{2}}$."
    assert r1_zero_reward_fn("</think> <answer>1/2</answer>", solution) == CORRECT
    assert r1_zero_reward_fn("</think> <answer>2</answer>", solution) == WRONG
    assert question_only_reward_fn("so \\boxed{0.5}", solution) == CORRECT
    assert answer_tag_reward_fn(" <answer>2/4</answer>", [solution]) == CORRECT
    # forms that only the box, rewritten on its own, matches (the whole solution text does not)
    assert r1_zero_reward_fn("</think> <answer>1/3</answer>",
                             "Thus $x=\\boxed{0.\\overline{3}}$.") == CORRECT
    assert r1_zero_reward_fn("</think> <answer>2500</answer>",
                             "It is $\\boxed{2.5 \\times 10^3}$.") == CORRECT
    assert question_only_reward_fn("\\boxed{(2, 3]}", "So $\\boxed{2 < x \\le 3}$.") == CORRECT


def test_the_final_answer_follows_the_last_think_close():
    # reasoning may close </think> more than once: only what follows the last one is the answer
    twice = "a </think> <answer>3</answer> no wait </think> <answer>4</answer>"
    assert r1_zero_reward_fn(twice, "4") == CORRECT
    assert r1_zero_reward_fn(twice, "3") == WRONG


@pytest.mark.parametrize("response", [
    "Sum is 7</answer>",            # no opening tag
    "<answer>7",                    # no closing tag
    "Sum is 7</answer> <answer>",   # the tags in the wrong order
    "</answer>7<answer>",
])
def test_a_malformed_answer_tag_pair_is_malformed(response):
    assert answer_tag_reward_fn(response, "7") == MALFORMED


@pytest.mark.parametrize("response", [
    "x </think> <answer>4",
    "x </think> 4</answer>",
    "x </think><answer>4</answer>",
    "x <answer>4</answer>",
])
def test_a_malformed_r1_zero_answer_is_malformed(response):
    assert r1_zero_reward_fn(response, "4") == MALFORMED


# ------------------------------------------------------------------ the placebo (reward=random)

def _toy_graded(n_groups: int = 100) -> tuple[list[str], list[str], list[dict[str, float]]]:
    """A batch of toy responses graded by the real reward function: groups of 8 answers to each
    toy question, 3 right, 4 wrong and 1 malformed in every group (rows in batch order)."""
    from grpo.data.toy_task import toy_pairs
    from grpo.grading.rewards import score_batch

    pairs = toy_pairs()
    responses, truths = [], []
    for g in range(n_groups):
        _, truth = pairs[g % len(pairs)]
        answers = [truth, truth, truth, "0" if truth != "0" else "1", str(int(truth) + 1),
                   str(int(truth) + 2), str(int(truth) + 3)]
        responses += [f" <answer>{a}</answer>" for a in answers] + [f" {truth}"]
        truths += [truth] * 8
    return responses, truths, score_batch(answer_tag_reward_fn, responses, truths)


def test_the_placebo_reward_ignores_the_answer_on_real_graded_responses() -> None:
    """reward=random replaces each row's reward by its draw and keeps the true grading beside
    it: correct, wrong and malformed responses are rewarded at one rate, p."""
    import numpy as np

    from grpo.grading.rewards import placebo_rewards, training_scores

    responses, _, graded = _toy_graded()
    correct = np.array([s["answer_reward"] for s in graded])
    assert correct.sum() == 300 and len(graded) == 800  # the grader read 3 of each 8 as right
    placebo = training_scores({"name": "random", "p": 0.5}, graded, seed=3, step=7)
    rewards = np.array([s["reward"] for s in placebo])
    # the reward is the draw of (seed, step, row) alone; the grading is kept, not trained on
    assert rewards.tolist() == placebo_rewards(0.5, 3, 7, 800)
    assert [(s["format_reward"], s["answer_reward"]) for s in placebo] == [
        (s["format_reward"], s["answer_reward"]) for s in graded]
    # the same rows graded the other way round (every answer right) draw the same rewards
    flipped = [{**s, "answer_reward": 1.0, "reward": 1.0} for s in graded]
    assert [s["reward"] for s in training_scores({"name": "random", "p": 0.5}, flipped, 3, 7)] \
        == rewards.tolist()
    # correct and wrong (or malformed) responses are rewarded at the same rate: 0.503 of 300 and
    # 0.522 of 500 here (0.515 of all 800); a reward that followed the answer would be 1 and 0.
    # Bound: 4 binomial sds of the difference, 4 sqrt(0.25 (1/300 + 1/500)) = 0.146
    right, wrong = rewards[correct == 1].mean(), rewards[correct == 0].mean()
    assert (round(right, 3), round(wrong, 3), rewards.mean()) == (0.503, 0.522, 0.515)
    assert abs(right - wrong) < 4 * np.sqrt(0.25 * (1 / 300 + 1 / 500))
    # reward=graded trains on the grading itself
    assert training_scores({"name": "graded"}, graded, 3, 7) == graded
    with pytest.raises(ValueError, match="reward.name='placebo' is unknown"):
        training_scores({"name": "placebo"}, graded, 3, 7)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_the_placebo_rewards_a_response_with_probability_p(p: float) -> None:
    """Over 4000 rows (50 steps of 80) the rate is p within 4 binomial sds (p = 0: never,
    p = 1: always, exactly); the draws of neighbouring rows are uncorrelated."""
    import numpy as np

    from grpo.grading.rewards import placebo_rewards

    draws = np.array([placebo_rewards(p, 11, step, 80) for step in range(1, 51)]).ravel()
    assert set(draws) <= {0.0, 1.0}
    assert abs(draws.mean() - p) <= 4 * np.sqrt(p * (1 - p) / draws.size)
    if 0 < p < 1:
        lag = np.corrcoef(draws[:-1], draws[1:])[0, 1]
        assert abs(lag) < 4 / np.sqrt(draws.size)


def test_the_placebo_draw_depends_on_seed_step_and_row_only() -> None:
    """Row i of step s in the run of seed k is the same draw however many rows the step has,
    whatever the global random states are (a resume restores none for it), and another seed,
    step or row draws anew; the stream is pinned (a change would change every placebo curve)."""
    import random

    import numpy as np
    import torch

    from grpo.grading.rewards import placebo_rewards

    first = placebo_rewards(0.5, 0, 1, 64)
    assert first[:16] == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    np.random.random(100)
    assert placebo_rewards(0.5, 0, 1, 64) == first
    assert placebo_rewards(0.5, 0, 1, 20) == first[:20]  # row i does not depend on the batch size
    assert placebo_rewards(0.5, 0, 1, 200)[:64] == first
    others = [placebo_rewards(0.5, 1, 1, 64), placebo_rewards(0.5, 0, 2, 64)]
    for other in others:  # another seed, another step: other draws (64 rows agree by chance 1 in 2^64)
        assert other != first
        assert 16 < sum(a == b for a, b in zip(first, other, strict=True)) < 48
    # a lower p rewards a subset of the rows a higher one rewards (one uniform draw a row)
    low, high = placebo_rewards(0.2, 0, 1, 64), placebo_rewards(0.7, 0, 1, 64)
    assert all(h >= lo for lo, h in zip(low, high, strict=True)) and sum(low) < sum(high)
