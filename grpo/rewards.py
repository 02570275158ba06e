"""Reward functions: (response, ground_truth) -> {"format_reward", "answer_reward", "reward"}.

CS336 semantics: "reward" is 1.0 only when the format is right and the answer is correct; a
correctly formatted wrong answer gets format_reward 1.0 and reward 0.0; a malformed response gets
0.0 everywhere. A ground truth may be a string, a number, or a list of acceptable answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from grpo.grading import grade_answer

GroundTruth = str | int | float | Sequence[str]
RewardFn = Callable[[str, GroundTruth], dict[str, float]]

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_boxed_answer(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, nested braces included.

    Args:
        text: a solution or response, e.g. "so $x = \\boxed{\\frac{1}{2}}$."

    Returns:
        The content between the braces ("\\frac{1}{2}"), or None when there is no complete
        `\\boxed{...}`.
    """
    for command in ("\\boxed", "\\fbox"):
        start = text.rfind(command + "{")
        if start >= 0:
            break
    else:
        return None
    open_brace = start + len(command)
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1 : i]
    return None


def _is_correct(answer: str, ground_truth: GroundTruth) -> bool:
    """Whether `answer` matches the ground truth (or any of a list of them)."""
    truths = [ground_truth] if isinstance(ground_truth, (str, int, float)) else ground_truth
    for truth in truths:
        truth = str(truth)
        if "\\boxed" in truth:  # a full solution as the ground truth: grade against its box
            truth = extract_boxed_answer(truth) or truth
        if grade_answer(answer, truth):
            return True
    return False


def _scores(formatted: bool, correct: bool) -> dict[str, float]:
    return {
        "format_reward": float(formatted),
        "answer_reward": float(formatted and correct),
        "reward": float(formatted and correct),
    }


def r1_zero_reward_fn(response: str, ground_truth: GroundTruth) -> dict[str, float]:
    """Reward for the R1-Zero prompt (the completion continues after "Assistant: <think>").

    Format: the response contains "</think> <answer>" and "</answer>". The answer is the text
    after the last "<answer>" with "</answer>" removed (as in the CS336 grader); if it contains a
    `\\boxed{}`, the boxed content (an unclosed box is a wrong answer).

    Args:
        response: the completion text.
        ground_truth: the reference answer(s).

    Returns:
        Floats "format_reward", "answer_reward", "reward".
    """
    if "</think> <answer>" not in response or "</answer>" not in response:
        return _scores(formatted=False, correct=False)
    answer = response.split("<answer>")[-1].replace("</answer>", "")
    if "\\boxed" in answer:
        answer = extract_boxed_answer(answer)
        if answer is None:
            return _scores(formatted=True, correct=False)
    return _scores(formatted=True, correct=_is_correct(answer, ground_truth))


def question_only_reward_fn(response: str, ground_truth: GroundTruth) -> dict[str, float]:
    """Reward for the question-only prompt: the answer is the last `\\boxed{...}`.

    Args:
        response: the completion text.
        ground_truth: the reference answer(s).

    Returns:
        Floats "format_reward" (1 if there is a complete box), "answer_reward", "reward".
    """
    answer = extract_boxed_answer(response)
    if answer is None:
        return _scores(formatted=False, correct=False)
    return _scores(formatted=True, correct=_is_correct(answer, ground_truth))


def answer_tag_reward_fn(response: str, ground_truth: GroundTruth) -> dict[str, float]:
    """Reward for the toy task: the answer is inside the last `<answer>...</answer>` pair.

    Args:
        response: the completion text, e.g. " <answer>7</answer>".
        ground_truth: the reference answer(s), e.g. "7".

    Returns:
        Floats "format_reward" (1 if an answer tag pair is present), "answer_reward", "reward".
    """
    answers = _ANSWER_TAG.findall(response)
    if not answers:
        return _scores(formatted=False, correct=False)
    return _scores(formatted=True, correct=_is_correct(answers[-1].strip(), ground_truth))


REWARD_FNS: dict[str, RewardFn] = {
    "r1_zero_reward_fn": r1_zero_reward_fn,
    "question_only_reward_fn": question_only_reward_fn,
    "answer_tag_reward_fn": answer_tag_reward_fn,
}
"""Reward functions by the name `grpo.prompts.PROMPT_REWARD_PAIRS` pairs with each prompt."""
