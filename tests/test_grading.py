"""Answer grading: a table of MATH-style answers, normalization, threads, processes, time bound."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from grpo import grade_answer, normalize_answer, r1_zero_reward_fn
from grpo.grading import _HELPER


def r1(answer: str) -> str:
    """A well-formed R1-Zero completion with the given answer."""
    return f"Let me compute. </think> <answer>{answer}</answer>"


# (response, ground truth, expected reward of r1_zero_reward_fn)
GRADING_TABLE = [
    # fractions and decimals
    (r1("0.5"), "\\frac{1}{2}", 1),
    (r1("\\frac12"), "\\frac{1}{2}", 1),
    (r1("1/2"), "\\frac{1}{2}", 1),
    (r1("\\dfrac{3}{4}"), "\\frac34", 1),
    (r1("0.75"), "\\frac{3}{4}", 1),
    # judgment call: an unreduced fraction equals the value (the CS336 grader rejects it)
    (r1("\\frac{2}{4}"), "\\frac{1}{2}", 1),
    (r1("0.33"), "\\frac{1}{3}", 0),
    (r1("\\frac{1}{3}"), "\\frac{1}{2}", 0),
    (r1("3.0"), "3", 1),
    (r1("\\frac{-1}{2}"), "-\\frac{1}{2}", 1),
    # intervals, sets, tuples
    (r1("[1, 2)"), "[1,2)", 1),
    (r1("(1,2]"), "[1,2)", 0),
    (r1("(-\\infty, 3]"), "(-\\infty,3]", 1),
    (r1("\\{2, 1\\}"), "\\{1,2\\}", 1),
    (r1("(2, 1)"), "(1, 2)", 0),
    (r1("(1, 2)"), "(1,2)", 1),
    (r1("x \\in [2, 5)"), "[2,5)", 1),
    (r1("1, 2, 3"), "1,2,3", 1),
    # math-verify compares bare comma lists as sets, so the order of listed solutions is free
    (r1("3, 2, 1"), "1,2,3", 1),
    # equations and assignments
    (r1("x = 5"), "5", 1),
    (r1("x=5"), "5", 1),
    (r1("5"), "x = 5", 1),
    (r1("y = 2x + 3"), "y=2x+3", 1),
    (r1("x = 6"), "5", 0),
    # percentages, units, text
    (r1("50\\%"), "50", 1),
    (r1("50"), "50\\%", 1),
    # judgment call: a percentage is compared by its number, so 0.5 is not 50%
    (r1("0.5"), "50\\%", 0),
    (r1("10\\text{ cm}"), "10", 1),
    (r1("10 cm"), "10", 1),
    (r1("\\$5.00"), "5", 1),
    (r1("\\text{Monday}"), "\\text{Monday}", 1),
    (r1("Monday"), "\\text{Monday}", 1),
    (r1("Tuesday"), "\\text{Monday}", 0),
    (r1("\\text{(B)}"), "\\text{(B)}", 1),
    (r1("(C)"), "\\text{(B)}", 0),
    # degrees
    (r1("30^\\circ"), "30", 1),
    (r1("30"), "30^\\circ", 1),
    (r1("45^{\\circ}"), "30^\\circ", 0),
    # square roots
    (r1("2\\sqrt{2}"), "\\sqrt{8}", 1),
    (r1("\\sqrt2"), "\\sqrt{2}", 1),
    (r1("\\frac{\\sqrt{3}}{2}"), "\\frac{\\sqrt3}{2}", 1),
    (r1("\\sqrt{3}"), "\\sqrt{2}", 0),
    # judgment call: math-verify accepts a decimal that matches an irrational to 6 places
    (r1("1.41421356"), "\\sqrt{2}", 1),
    # negatives
    (r1("-7"), "-7", 1),
    (r1("- 7"), "-7", 1),
    (r1("7"), "-7", 0),
    # matrices and vectors
    (r1("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"), "\\begin{pmatrix}1\\\\2\\end{pmatrix}", 1),
    (
        r1("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"),
        "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}",
        1,
    ),
    (
        r1("\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}"),
        "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}",
        0,
    ),
    # symbolic expressions and constants
    (r1("(x+1)^2"), "x^2+2x+1", 1),
    (r1("x^2-1"), "(x-1)(x+1)", 1),
    (r1("2\\pi"), "2\\pi", 1),
    (r1("6.28"), "2\\pi", 0),
    # large numbers
    (r1("1,000"), "1000", 1),
    (r1("1000"), "1{,}000", 1),
    (r1("10^{3}"), "1000", 1),
    # boxed answers inside the answer tags
    (r1("\\boxed{12}"), "12", 1),
    (r1("The answer is $\\boxed{\\frac{1}{2}}$."), "0.5", 1),
    (r1("\\boxed{12"), "12", 0),
    # wrong or empty answers
    (r1("8"), "7", 0),
    (r1(""), "7", 0),
    (r1("I don't know"), "7", 0),
    # malformed format: the right answer earns nothing
    ("Let me compute. </think><answer>7</answer>", "7", 0),
    ("The answer is 7", "7", 0),
    ("</think> <answer>7", "7", 0),
    ("<answer>7</answer>", "7", 0),
    ("The answer is \\boxed{7}", "7", 0),
    # ground-truth forms: a number, a list of acceptable answers, a full boxed solution
    (r1("7"), 7, 1),
    (r1("0.25"), ["\\frac14", "25\\%"], 1),
    (r1("4"), "The solution gives \\boxed{4}", 1),
]


def test_grading_table():
    mismatches = []
    for response, truth, expected in GRADING_TABLE:
        got = r1_zero_reward_fn(response, truth)["reward"]
        if got != expected:
            mismatches.append(f"{response!r} vs {truth!r}: expected {expected}, got {got}")
    n_ok = len(GRADING_TABLE) - len(mismatches)
    print(f"grading table: {n_ok}/{len(GRADING_TABLE)} graded as expected")
    assert len(GRADING_TABLE) >= 40
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("$\\dfrac{1}{2}$", "\\frac{1}{2}"),
        ("\\frac12", "\\frac{1}{2}"),
        ("10\\text{ cm}", "10"),
        ("\\text{Monday}", "Monday"),
        ("x = 5", "5"),
        ("45^\\circ", "45"),
        ("12{,}345.", "12345"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("3\\sqrt2", "3\\sqrt{2}"),
    ],
)
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized


# pairs that need math-verify (no string or plain-number shortcut)
SYMBOLIC = [
    ("2\\sqrt{2}", "\\sqrt{8}", True),
    ("(x+1)^2", "x^2+2x+1", True),
    ("\\{2,1\\}", "\\{1,2\\}", True),
    ("\\sqrt{3}", "\\sqrt{2}", False),
    ("(2, 1)", "(1, 2)", False),
    ("6.28", "2\\pi", False),
]


def test_grading_from_threads():
    preds, truths, expected = zip(*SYMBOLIC * 2, strict=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(grade_answer, preds, truths)) == list(expected)


def test_grading_in_worker_processes():
    assert grade_answer("2\\sqrt{2}", "\\sqrt{8}")  # the parent's helper is running when we fork
    preds, truths, expected = zip(*SYMBOLIC, strict=True)
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        assert list(pool.map(grade_answer, preds, truths)) == list(expected)
    with context.Pool(1) as daemonic_pool:  # multiprocessing.Pool workers are daemonic
        assert daemonic_pool.starmap(grade_answer, zip(preds, truths, strict=True)) == list(
            expected
        )
    assert grade_answer("(x+1)^2", "x^2+2x+1")  # the parent's helper is unaffected


def test_pathological_input_returns_within_the_bound_off_the_main_thread():
    assert grade_answer("(x+1)^2", "x^2+2x+1")  # helper started, so only the bound is timed
    # sympy would spend minutes (holding the GIL) computing 2^(10^10) when comparing
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool:
        verdict = pool.submit(grade_answer, "1", "2^{10^{10}}", 1.0).result()
    elapsed = time.monotonic() - start
    assert verdict is False
    assert elapsed < 5.0, f"took {elapsed:.1f} s with a 1 s bound"
    assert grade_answer("2\\sqrt{2}", "\\sqrt{8}")  # a fresh helper takes over


def test_the_helper_outlives_the_signals_slurm_sends_every_process_of_a_job():
    """SIGUSR2 (time limit near) and SIGTERM (scancel) reach the helper too, while the trainer
    finishes its step: the same helper keeps grading, right."""
    assert grade_answer("2\\sqrt{2}", "\\sqrt{8}")
    helper = _HELPER._proc
    for sig in (signal.SIGUSR2, signal.SIGTERM):
        os.kill(helper.pid, sig)
    time.sleep(0.5)  # a helper that did not ignore them is dead by now
    assert helper.poll() is None
    assert grade_answer("(x+1)^2", "x^2+2x+1") and not grade_answer("6.28", "2\\pi")
    assert _HELPER._proc is helper
