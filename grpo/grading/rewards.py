"""Reward functions: (response, ground_truth) -> {"format_reward", "answer_reward", "reward"}.

CS336 semantics: "reward" is 1.0 only when the format is right and the answer is correct; a
correctly formatted wrong answer gets format_reward 1.0 and reward 0.0; a malformed response gets
0.0 everywhere. A ground truth may be a string, a number, or a list of acceptable answers.

Answers are graded once per process (`GRADE_CACHE_SIZE` most recent answer, truth pairs: a
group's repeated answers, and a collapsed policy's identical ones, cost one grading), and
`score_batch` scores a rollout batch on `POOL_SIZE` threads, each grading on its own math-verify
helper process.

What a GRPO step trains on is `reward.name` (`TRAINING_REWARDS`, one `conf/reward/<name>.yaml`
each): `graded`, the prompt's reward function, or `random`, a placebo that rewards each response
1 with probability `reward.p` whatever its answer (`placebo_rewards`). Evaluation always grades
with the prompt's reward function.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from grpo.grading.answers import MAX_ANSWER_CHARS, grade_answer
from grpo.grading.math_verify_process import POOL_SIZE

GroundTruth = str | int | float | Sequence[str]
RewardFn = Callable[[str, GroundTruth], dict[str, float]]

MAX_BOX_NESTING = 8
"""Deepest brace nesting inside a `\\boxed{...}` that counts as a complete box (final answers
nest a few levels: `\\frac{\\sqrt{\\frac{1}{2}}}{3}` is 3). The bound lets one linear regular
expression match a box (nested braces cannot be matched by a regular expression in general,
and a hand-written scan runs at Python speed: over a second on a megabyte of braces)."""

MAX_FINAL_ANSWERS = 64
"""Most boxes, and most R1-Zero answer sections, that a response may hold and still be graded:
more is degenerate output (a hedge unless the ground truth lists that many answers) and is wrong
without being read, which bounds the time spent looking for them."""

_BOX_COMMANDS = ("\\boxed{", "\\fbox{")


def _balanced_braces(depth: int) -> str:
    """A regular expression for text whose braces balance, nested at most `depth` deep. It is
    linear: a group can only start at "{", which the text between groups cannot contain."""
    pattern = r"[^{}]*"
    for _ in range(depth):
        pattern = r"[^{}]*(?:\{" + pattern + r"\}[^{}]*)*"
    return pattern


_BOX_COMMAND = re.compile("|".join(map(re.escape, _BOX_COMMANDS)))
_BOX = re.compile(f"(?:{_BOX_COMMAND.pattern})({_balanced_braces(MAX_BOX_NESTING)})\\}}")
_BOX_SPAN = len("\\boxed{}") + MAX_ANSWER_CHARS
"""A box is read only this far from its command: a longer content is no final answer."""


def _box_at(text: str, start: int) -> re.Match | None:
    """The complete box whose command starts at text[start], or None (unclosed, nested deeper
    than MAX_BOX_NESTING, or holding more than MAX_ANSWER_CHARS characters)."""
    return _BOX.match(text, start, start + _BOX_SPAN)


def extract_boxed_answer(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, nested braces included.

    Args:
        text: a solution or response, e.g. "so $x = \\boxed{\\frac{1}{2}}$."

    Returns:
        The content between the braces ("\\frac{1}{2}"), or None when there is no box or the last
        one is not complete (`_box_at`).
    """
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    box = _box_at(text, start) if start >= 0 else None
    return None if box is None else box.group(1)


def _count_boxes(text: str) -> int:
    return sum(text.count(command) for command in _BOX_COMMANDS)


def _boxed_answers(text: str) -> list[str] | None:
    """Contents of the complete outermost boxes of `text`, in order: None if the last box is not
    complete (no answer), [] if there are more than MAX_FINAL_ANSWERS boxes (a wrong answer)."""
    if extract_boxed_answer(text) is None:
        return None
    if _count_boxes(text) > MAX_FINAL_ANSWERS:
        return []
    contents, end = [], 0
    for command in _BOX_COMMAND.finditer(text):
        box = _box_at(text, command.start()) if command.start() >= end else None
        if box is not None:  # an outermost box: the boxes inside it are part of its answer
            contents.append(box.group(1))
            end = box.end()
    return contents


def joined_answer(candidates: Sequence[str]) -> str:
    """A response's final answer as it is graded: its distinct non-blank candidates, in order,
    joined by ", " (one candidate is itself; "" where there is none)."""
    return ", ".join(dict.fromkeys(c.strip() for c in candidates if c.strip()))


def _is_correct(candidates: list[str], ground_truth: GroundTruth) -> bool:
    """Whether the response's final answer matches the ground truth (or any of a list of them).

    Several distinct candidates (boxes, answer sections) are graded as one list of answers, which
    only a list ground truth can match: a hedge is wrong even when one candidate is right.
    """
    answer = joined_answer(candidates)
    truths = [ground_truth] if isinstance(ground_truth, (str, int, float)) else ground_truth
    for truth in truths:
        truth = str(truth)
        if "\\boxed" in truth:  # a full solution as the ground truth: grade against its box
            truth = extract_boxed_answer(truth) or truth
        if _graded(answer, truth):
            return True
    return False


GRADE_CACHE_SIZE = 1 << 16
"""Answer, truth pairs whose verdict is kept (a few MB at MATH's answer lengths)."""
_graded = functools.lru_cache(maxsize=GRADE_CACHE_SIZE)(grade_answer)


def score_batch(reward_fn: RewardFn, responses: Sequence[str],
                ground_truths: Sequence[GroundTruth]) -> list[dict[str, float]]:
    """`reward_fn(response, truth)` of each pair, in order, on up to POOL_SIZE threads."""
    if POOL_SIZE == 1 or len(responses) < 2:
        return [reward_fn(r, t) for r, t in zip(responses, ground_truths, strict=True)]
    with ThreadPoolExecutor(max_workers=POOL_SIZE) as pool:
        return list(pool.map(reward_fn, responses, ground_truths))


def _scores(formatted: bool, correct: bool) -> dict[str, float]:
    return {
        "format_reward": float(formatted),
        "answer_reward": float(formatted and correct),
        "reward": float(formatted and correct),
    }


def _reward(candidates: list[str] | None, ground_truth: GroundTruth) -> dict[str, float]:
    """The scores of a response whose final-answer candidates are `candidates` (None: not
    formatted; []: formatted, no gradable answer, so wrong)."""
    if candidates is None:
        return _scores(formatted=False, correct=False)
    return _scores(formatted=True, correct=bool(candidates) and _is_correct(candidates, ground_truth))


def _section_answers(section: str) -> list[str] | None:
    """The candidate answers of one R1-Zero answer section: its boxes if it has any (None if the
    last is not complete), else its text."""
    return _boxed_answers(section) if "\\boxed" in section else [section]


def r1_zero_reward_fn(response: str, ground_truth: GroundTruth) -> dict[str, float]:
    """Reward for the R1-Zero prompt (the completion continues after "Assistant: <think>").

    Format: the response contains "</think> <answer>" and "</answer>". The answer is the text
    after the last "<answer>" with "</answer>" removed (as in the CS336 grader); if it contains a
    `\\boxed{}`, the boxed content (an unclosed last box is a wrong answer). Earlier answer
    sections after the last "</think>" and several different boxes are further final answers:
    the response hedges, and only a list ground truth can match them.

    Args:
        response: the completion text.
        ground_truth: the reference answer(s).

    Returns:
        Floats "format_reward", "answer_reward", "reward".
    """
    return _reward(r1_zero_answers(response), ground_truth)


def r1_zero_answers(response: str) -> list[str] | None:
    """The final-answer candidates of an R1-Zero response (:func:`r1_zero_reward_fn` grades
    them): None when it is not formatted, [] when it is but holds no gradable answer."""
    if "</think> <answer>" not in response or "</answer>" not in response:
        return None
    last_open = response.rfind("<answer>")
    final_part = response[min(response.rfind("</think>"), last_open) :]
    if max(final_part.count("<answer>"), _count_boxes(final_part)) > MAX_FINAL_ANSWERS:
        return []
    *earlier, last = final_part.split("<answer>")[1:]
    candidates = _section_answers(last.replace("</answer>", ""))
    if candidates is None:
        return []
    for section in earlier:
        content = section.split("</answer>", 1)[0]
        candidates += _section_answers(content) or [content]
    return candidates


def question_only_reward_fn(response: str, ground_truth: GroundTruth) -> dict[str, float]:
    """Reward for the question-only prompt: the answer is in `\\boxed{...}`.

    Format: the last box of the response is complete (`extract_boxed_answer`). The answer is
    that box; several different boxes are several final answers (a hedge), which only a list
    ground truth can match.

    Args:
        response: the completion text.
        ground_truth: the reference answer(s).

    Returns:
        Floats "format_reward" (1 if the last box is complete), "answer_reward", "reward".
    """
    return _reward(_boxed_answers(response), ground_truth)


def answer_tag_reward_fn(response: str, ground_truth: GroundTruth) -> dict[str, float]:
    """Reward for the toy task: the answer is inside the last `<answer>...</answer>` pair.

    Args:
        response: the completion text, e.g. " <answer>7</answer>".
        ground_truth: the reference answer(s), e.g. "7".

    Returns:
        Floats "format_reward" (1 if an answer tag pair is present), "answer_reward", "reward".
    """
    return _reward(answer_tag_answers(response), ground_truth)


def answer_tag_answers(response: str) -> list[str] | None:
    """The final answer of a toy response, the text of its last `<answer>...</answer>` pair
    (:func:`answer_tag_reward_fn` grades it); None when it has no such pair."""
    close = response.rfind("</answer>")
    open_ = response.rfind("<answer>", 0, max(close, 0))
    if close < 0 or open_ < 0:
        return None
    return [response[open_ + len("<answer>") : close]]


REWARD_FNS: dict[str, RewardFn] = {
    "r1_zero_reward_fn": r1_zero_reward_fn,
    "question_only_reward_fn": question_only_reward_fn,
    "answer_tag_reward_fn": answer_tag_reward_fn,
}
"""Reward functions by the name `grpo.data.prompts.PROMPT_REWARD_PAIRS` pairs with each prompt."""

AnswerFn = Callable[[str], list[str] | None]
ANSWER_FNS: dict[str, AnswerFn] = {
    "r1_zero_reward_fn": r1_zero_answers,
    "question_only_reward_fn": _boxed_answers,
    "answer_tag_reward_fn": answer_tag_answers,
}
"""Each reward function's reader of a response's final-answer candidates (what it grades), by the
reward function's name: a majority vote over responses (`grpo.grading.majority`) reads them."""


def final_answer(answer_fn: AnswerFn, response: str) -> str:
    """The final answer of `response` as `answer_fn`'s reward function grades it ("" where it has
    none: not formatted, or no gradable answer)."""
    candidates = answer_fn(response)
    return joined_answer(candidates) if candidates else ""


def same_answer(answer: str, other: str) -> bool:
    """Whether the grader takes `answer` for a correct answer to the truth `other` (its own
    equivalence, math-verify included; cached as every grading is)."""
    return _graded(answer, other)


GRADED = "graded"
"""`reward.name` of `conf/reward/graded.yaml`: a step trains on the prompt's reward function."""
PLACEBO = "random"
"""`reward.name` of `conf/reward/random.yaml`: a step trains on the placebo's draws."""
PLACEBO_STREAM = 0x504C4143
"""The first word of every placebo draw's seed (b"PLAC"): a stream of its own, seeded with entropy
no other draw of the run (sampling, data order, the training order) is seeded with."""


def placebo_rewards(p: float, seed: int, step: int, n_rows: int) -> list[float]:
    """The placebo's rewards of GRPO step `step`'s `n_rows` responses (rows in the order of the
    flattened batch, group by group) in the run of seed `seed`: row i is 1.0 where a uniform
    draw in [0, 1) of the generator seeded by (`PLACEBO_STREAM`, seed, step, i) is below `p`,
    else 0.0. So each row is rewarded 1 with probability p (exactly: p = 0 never, p = 1 always),
    the rows independently, and the draw depends on (seed, step, row) only: never on the
    response, its answer or any state a resume would have to restore.

    Args:
        p: the probability of a reward of 1, in [0, 1] (`reward.p`).
        seed: the run's seed (`seed`), >= 0.
        step: the GRPO step, 1..n_grpo_steps.
        n_rows: the responses of the step (rollout_batch_size).

    Returns:
        (n_rows,) rewards, each 0.0 or 1.0.
    """
    return [float(np.random.default_rng([PLACEBO_STREAM, seed, step, row]).random() < p)
            for row in range(n_rows)]


@dataclass(frozen=True)
class TrainingReward:
    """One choice of what a GRPO step trains on (`reward.name`): `keys` are the keys its
    `conf/reward/<name>.yaml` holds besides `name`; `summary` says what it rewards."""

    keys: tuple[str, ...]
    summary: str


TRAINING_REWARDS: dict[str, TrainingReward] = {
    GRADED: TrainingReward((), "the prompt's reward function (`PROMPT_REWARD_PAIRS`): 1 for a "
                               "formatted, correct answer"),
    PLACEBO: TrainingReward(("p",), "a placebo: each response rewarded 1 with probability "
                                    "`reward.p`, independent of its answer (`placebo_rewards`); "
                                    "`format_reward` and `answer_reward` stay the prompt's grading, "
                                    "logged, not trained on"),
}
"""`reward.name` -> its entry; the validator and the registries page read it, `training_scores`
applies it."""


def training_scores(reward: Mapping[str, Any], graded: Sequence[dict[str, float]], seed: int,
                    step: int) -> list[dict[str, float]]:
    """The scores GRPO step `step` trains on, from its responses' `graded` scores (the prompt's
    reward function's, one per row of the flattened batch), by `reward` (the run's `cfg.reward`):
    `graded` as they are, or with reward=random each "reward" replaced by its
    :func:`placebo_rewards` draw (`format_reward` and `answer_reward` kept: the true grading,
    logged as `train/format_reward_mean` and `train/answer_reward_mean`, read by no loss)."""
    name = str(reward["name"])
    if name == GRADED:
        return list(graded)
    if name != PLACEBO:
        raise ValueError(f"reward.name={name!r} is unknown; use one of "
                         + ", ".join(f"reward={known}" for known in TRAINING_REWARDS))
    draws = placebo_rewards(float(reward["p"]), seed, step, len(graded))
    return [{**scores, "reward": draw} for scores, draw in zip(graded, draws, strict=True)]
