"""Time every reward call on the adversarial megabyte inputs of tests/grading_adversarial.py.

Usage: ``python bench/grading_time.py``. Prints, for each case, the seconds of the reward call,
the part of it spent waiting for math-verify (bounded separately by its timeout) and the reward;
then the seconds of ``answer_parts`` on each pattern cut to 100k characters (past the length
cap); then the slowest case of each. The target is < 1 s per reward call, math-verify aside.
Last, hostile answers that reach math-verify (sympy would compute for minutes): the seconds of
each call, of a 64-response batch repeating one of them (graded once), and of a batch of all of
them scored serially and by `score_batch` (POOL_SIZE helpers).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from grading_adversarial import NORMALIZATION_SIZE, PATTERNS, cases, run_case  # noqa: E402

import grpo.grading.answers as grading  # noqa: E402
from grpo.grading import math_verify_process  # noqa: E402
from grpo.grading.rewards import r1_zero_reward_fn, score_batch  # noqa: E402

HOSTILE = ["2^{10^{10}}", "7^{7^{9}}", "10^{10^{10}}!", "2^{2^{27}}", "\\sum_{n=1}^{10^{9}} n^{n}",
           "(10^{100000}+1)^{50}"]


def hostile_answers() -> None:
    """Per-answer, cached and parallel figures of hostile answers (see the module docstring)."""
    print(f"\nhostile answers (bound {math_verify_process.DEFAULT_TIMEOUT_S} CPU s an attempt, "
          f"{math_verify_process.ATTEMPTS} attempts, "
          f"{math_verify_process.POOL_SIZE} helpers)")
    for answer in HOSTILE:
        start = time.perf_counter()
        grading.grade_answer(answer, "1")
        print(f"  {answer:<40} {time.perf_counter() - start:6.3f} s")
    responses = [f"<think>x</think> <answer>{a}</answer>" for a in HOSTILE] * 4
    for name, score in (("serial", lambda: [r1_zero_reward_fn(r, "1") for r in responses]),
                        ("score_batch", lambda: score_batch(r1_zero_reward_fn, responses, ["2"] * len(responses)))):
        start = time.perf_counter()
        score()
        print(f"  {len(responses)} hostile responses, {name}: {time.perf_counter() - start:6.3f} s")
    start = time.perf_counter()
    score_batch(r1_zero_reward_fn, [responses[0]] * 64, ["3"] * 64)
    print(f"  64 copies of one new hostile response (graded once): {time.perf_counter() - start:6.3f} s")


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
    grading.math_verify_equal = math_verify_equal
    hostile_answers()


if __name__ == "__main__":
    main()
