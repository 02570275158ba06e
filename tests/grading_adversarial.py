"""Adversarial inputs for the reward functions: megabyte responses built from the patterns that
make a super-linear regular expression or a quadratic scan blow up (before the fix, 100k spaces
between two numbers took 27 s, 200k digits followed by a letter did not finish in 30 s, 10k
repeated `<answer>` tags took 8 s).

Used by tests/test_grading.py (each call must return within a generous bound, in a child
process) and bench/grading_time.py (the time of each call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

SIZE = 1_000_000
"""Characters of each adversarial pattern: the largest input the time bound is promised for."""


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda size: unit * (size // len(unit))


PATTERNS: dict[str, Callable[[int], str]] = {
    "spaces between two numbers": lambda size: "1" + " " * size + "2",
    "digits then a letter": lambda size: "1" * size + "x",
    "repeated <answer> tags": _repeat("<answer>"),
    "repeated answer sections": _repeat("<answer>1</answer>"),
    "open braces": _repeat("{"),
    "close braces": _repeat("}"),
    "unclosed boxes": _repeat("\\boxed{"),
    "many closed boxes": _repeat("\\boxed{1}"),
    "a box then open braces": lambda size: "\\boxed{" + "{" * size,
    "a box then brace pairs": lambda size: "\\boxed{" + "{}" * (size // 2),
    "eight nested boxes then braced groups": lambda size: "\\boxed{" * 8 + "{x}" * (size // 3),
    "unclosed text commands": _repeat("\\text{"),
    "digits and commas": _repeat("1,"),
    "thousands groups": _repeat("1,000"),
    "number words": _repeat("one "),
    "inequality signs": _repeat("x <"),
    "a long repeating decimal": lambda size: "0." + "3" * size + "...",
    "unicode math": _repeat("½√(²"),
    "'or' between numbers": _repeat("1 or "),
    "backslashes": _repeat("\\"),
    "\\left( commands": _repeat("\\left("),
    "dollar signs": _repeat("$"),
}
"""Adversarial patterns by name, as functions of their size in characters."""

TOO_MANY_BOXES = {"unclosed boxes", "many closed boxes"}
"""Patterns holding more boxes than `grpo.grading.rewards.MAX_FINAL_ANSWERS`: the question-only
response that ends with the right box is degenerate and graded wrong."""


class Case(NamedTuple):
    name: str
    reward_fn: str  # a key of grpo.grading.rewards.REWARD_FNS
    response: str
    ground_truth: str
    expected_reward: float


def cases() -> Iterator[Case]:
    """Every pattern where each reward function reads it (in the answer, where a long answer is
    wrong, and before the right final answer, which still counts), and two huge ground truths."""
    for name, make_pattern in PATTERNS.items():
        pattern = make_pattern(SIZE)
        yield Case(
            f"{name}, as the answer",
            "r1_zero_reward_fn",
            f"</think> <answer> {pattern} </answer>",
            "2",
            0.0,
        )
        yield Case(
            f"{name}, in the reasoning",
            "r1_zero_reward_fn",
            f"{pattern} </think> <answer> 2 </answer>",
            "2",
            1.0,
        )
        yield Case(
            f"{name}, before the box",
            "question_only_reward_fn",
            f"{pattern} \\boxed{{2}}",
            "2",
            0.0 if name in TOO_MANY_BOXES else 1.0,
        )
        yield Case(
            f"{name}, as the tagged answer",
            "answer_tag_reward_fn",
            f"<answer>{pattern}</answer>",
            "2",
            0.0,
        )
        yield Case(
            f"{name}, before the tagged answer",
            "answer_tag_reward_fn",
            f"{pattern} <answer>2</answer>",
            "2",
            1.0,
        )
    for name in ("spaces between two numbers", "unclosed boxes"):
        yield Case(
            f"{name}, as the ground truth",
            "r1_zero_reward_fn",
            "</think> <answer> 2 </answer>",
            PATTERNS[name](SIZE),
            0.0,
        )


NORMALIZATION_SIZE = 100_000
"""Characters of each pattern given to `answer_parts` directly, past the reward functions'
length cap (100 times `MAX_ANSWER_CHARS`): its regular expressions must be linear on their own,
not only fast because answers are short."""


def run_case(case: Case) -> float:
    """The reward of one case."""
    from grpo.grading.rewards import REWARD_FNS

    return REWARD_FNS[case.reward_fn](case.response, case.ground_truth)["reward"]
