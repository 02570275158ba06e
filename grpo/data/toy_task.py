"""The toy addition task, as plain strings: questions `a+b` and their answers.

The data layer (`grpo.data.datasets`) turns these into training and validation examples; the tiny model's
builder (`grpo.models.tiny`) warms up on them. Neither depends on the other.

The held-out pool (`data.holdout_size`, `toy_holdout`): a fixed choice of pairs that a sweep
neither trains nor evaluates on, kept for a confirmation of its pick (`python -m analysis
confirm`). The tiny model's supervised warm-up, part of its build before any sweep, sees every pair.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
HOLDOUT_SEED = "toy-holdout"
"""Seeds the fixed choice of held-out pairs: the same for every run, seed and config."""


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


def toy_holdout(pairs: Sequence[T], holdout_size: int) -> tuple[list[T], list[T]]:
    """`pairs` split into (kept, held out): `holdout_size` of them chosen once and for all (a
    shuffle seeded by `HOLDOUT_SEED`, so every run holds out the same ones), each part in the
    order of `pairs`. Raises ValueError where `holdout_size` is not in 0..len(pairs) - 1 (a
    run needs a pair to train on)."""
    if not 0 <= holdout_size < len(pairs):
        raise ValueError(f"data.holdout_size={holdout_size}: hold out 0 to {len(pairs) - 1} of the "
                         f"{len(pairs)} toy pairs (at least one must be left to train on)")
    order = list(range(len(pairs)))
    random.Random(HOLDOUT_SEED).shuffle(order)
    held = set(order[:holdout_size])
    return ([p for i, p in enumerate(pairs) if i not in held],
            [p for i, p in enumerate(pairs) if i in held])
