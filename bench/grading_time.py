"""Time every reward call on the adversarial megabyte inputs of tests/grading_adversarial.py.

Usage: ``python bench/grading_time.py``. Prints, for each case, the seconds of the reward call,
the part of it spent waiting for math-verify (bounded separately by its timeout) and the reward;
then the seconds of ``answer_parts`` on each pattern cut to 100k characters (past the length
cap); then the slowest case of each. The target is < 1 s per reward call, math-verify aside.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from grading_adversarial import NORMALIZATION_SIZE, PATTERNS, cases, run_case  # noqa: E402

import grpo.grading.answers as grading  # noqa: E402


def main() -> None:
    math_verify_s = [0.0]
    math_verify_equal = grading.math_verify_equal

    def timed_math_verify(*args: object) -> bool:
        start = time.perf_counter()
        try:
            return math_verify_equal(*args)
        finally:
            math_verify_s[0] += time.perf_counter() - start

    grading.math_verify_equal = timed_math_verify  # measure the bounded stage apart
    grading.grade_answer("x+1", "1+x")  # start the math-verify helper before timing

    print(f"{'case':<58} {'reward function':<24} {'total s':>8} {'math-verify s':>14} reward")
    slowest = (0.0, "")
    for case in cases():
        math_verify_s[0] = 0.0
        start = time.perf_counter()
        reward = run_case(case)
        total = time.perf_counter() - start
        print(
            f"{case.name:<58} {case.reward_fn:<24} {total:8.3f} {math_verify_s[0]:14.3f} {reward}",
            flush=True,
        )
        slowest = max(slowest, (total - math_verify_s[0], f"{case.name} ({case.reward_fn})"))

    print(f"\n{'answer_parts on ' + str(NORMALIZATION_SIZE) + ' characters of':<58} {'s':>8}")
    slowest_parts = (0.0, "")
    for name, make_pattern in PATTERNS.items():
        pattern = make_pattern(NORMALIZATION_SIZE)
        start = time.perf_counter()
        grading.answer_parts(pattern)
        elapsed = time.perf_counter() - start
        print(f"{name:<58} {elapsed:8.3f}", flush=True)
        slowest_parts = max(slowest_parts, (elapsed, name))

    print(f"\nslowest reward call (math-verify aside): {slowest[0]:.3f} s, {slowest[1]}")
    print(f"slowest answer_parts: {slowest_parts[0]:.3f} s, {slowest_parts[1]}")


if __name__ == "__main__":
    main()
