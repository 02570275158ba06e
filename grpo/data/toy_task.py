"""The toy addition task, as plain strings: questions `a+b` and their answers.

The data layer (`grpo.data.datasets`) turns these into training and validation examples; the tiny model's
builder (`grpo.models.tiny`) warms up on them. Neither depends on the other.
"""

from __future__ import annotations


def toy_question(a: int, b: int) -> str:
    """The toy question for operands a, b: `a+b`."""
    return f"{a}+{b}"


def toy_pairs(max_operand: int = 4) -> list[tuple[str, str]]:
    """All (max_operand + 1)^2 toy (question, answer) pairs `a+b` -> `a + b`, a, b in
    0..max_operand, in (a, b) order."""
    return [
        (toy_question(a, b), str(a + b))
        for a in range(max_operand + 1)
        for b in range(max_operand + 1)
    ]
