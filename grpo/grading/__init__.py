"""Grading answers and the reward functions built on it.

`answers` (`grade_answer`: canonical forms, exact fractions, math-verify for the rest),
`math_verify_process` (the helper process that runs math-verify under a CPU-time bound) and
`rewards` (the CS336 reward functions: format, answer, `REWARD_FNS`).

Imports: `grpo.core` at most (today nothing of the project).
"""
