"""Per-problem outcomes of a run's evaluations: `<run>/eval_outcomes/step_XXXXXX.json`, one file per
evaluation, written atomically by the trainer (a replayed step after a resume rewrites its file),
read by the analysis to compare configs on the same problems (`analysis.stats.comparisons`).

A file holds `{"step": s, "samples_per_problem": k, "problems_digest": "<sha256>", "problems":
["<fingerprint>", ...], "reward": [r_0, ..., r_{N-1}], "correct": [c_0, ...], "majority": [m_0,
...]}`: `r_i` is problem `i`'s mean reward over its `k` responses (problem `i` is the `i`-th
example of the validation subset, in [0, 1]), `c_i` how many of them were right (reward 1) and
`m_i` the reward of their majority answer (maj@k, `grpo.grading.majority`); `problems_digest`
fingerprints the questions and answers evaluated, so that only evaluations of the same problems
are paired, and `problems` each problem by itself (`problem_fingerprint`), so that two sets of
problems can be told apart problem by problem (a confirmation's held-out problems share none with
the evaluations that chose its configs: `shared_problems`). Every per-problem metric of
`OUTCOME_METRICS` (mean@k, pass@1, pass@k, maj@k) is recomputed from the file
(`EvalOutcomes.per_problem`); files written before the counts were kept hold only `reward`.
Reading is bounded and strict: a file too large, not JSON, with a field of the wrong type or
range, or counts that contradict its rewards (every reward is 0 or 1, so `r_i = c_i / k`) is no
record (`read_outcomes` returns None; `checked_outcomes` says which field, the analysis prints it),
never a crash of the analysis.

A run's **confirmation** (`confirm.enabled`, `python -m analysis confirm`) is the same record of
the final policy's evaluation on held-out problems, in `<run>/confirm_outcomes/step_XXXXXX.json`
(`CONFIRM_DIR`): no ranking, pruner, race or chain reads that folder.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from grpo.run.files import RunFileError, atomic_write_text, read_json, subdir

LATE_EVALS = 5
"""Evaluations after step 0 that a run's late value averages (the last ones, fewer when it has
fewer): the ranking's criterion (analysis.decisions.ranking) and what a run reports to the sweep's pruner
(grpo.run.pruning). bench/selection_calibration.py measures why not one evaluation or the maximum."""


def is_evaluation_step(step: int, n_grpo_steps: int, eval_every: int) -> bool:
    """Whether the policy is evaluated after GRPO step `step`: before the first step (0), every
    `eval_every` steps, and after the last."""
    return step % eval_every == 0 or step == n_grpo_steps


def late_steps(n_grpo_steps: int, eval_every: int, at_step: int) -> tuple[int, ...]:
    """The evaluation steps a run of `n_grpo_steps` evaluated every `eval_every` averages for its
    late value when compared at GRPO step `at_step`: its last `LATE_EVALS` after step 0 up to it
    (what a launched run will give; a finished run's are read from its log)."""
    steps = [s for s in range(1, min(at_step, n_grpo_steps) + 1)
             if is_evaluation_step(s, n_grpo_steps, eval_every)]
    return tuple(steps[-LATE_EVALS:])


OUTCOMES_DIR = "eval_outcomes"
CONFIRM_DIR = "confirm_outcomes"
"""Where a run keeps the outcomes of its confirmation (the final policy on held-out problems):
read only by the confirmation's report (`analysis.readers.confirmation`)."""
MAX_PROBLEMS = 100_000
"""The most problems an evaluation has (`eval.n_examples`' bound): a larger record is crafted."""
FINGERPRINT_CHARS = 16
"""Hex digits of a problem's fingerprint (64 bits: two of 100,000 problems share one with a
chance of about 3e-10)."""
MAX_OUTCOMES_BYTES = (48 + FINGERPRINT_CHARS + 4) * MAX_PROBLEMS + 4096
"""Largest outcomes file read: each reward is written with at most 6 decimals, each count and
majority in a few characters, each fingerprint in its quoted hex digits."""
DECIMALS = 6


class Problem(Protocol):
    """A validation problem: what `problems_digest` fingerprints."""

    question: str
    answer: str


OUTCOME_METRICS: dict[str, str] = {
    "reward": "each problem's mean reward over its k responses (`eval/reward`, what the analysis "
              "reads by default)",
    "mean@k": "the same as reward, under the name the field reports it by (`eval/mean@k`)",
    "pass@1": "the unbiased pass@1 estimate, c/k for c right of k responses (`eval/pass@1`)",
    "pass@k": "the unbiased pass@k estimate 1 - C(n-c, k)/C(n, k) with n = k responses: 1 where any "
              "of the k was right (`eval/pass@k`)",
    "maj@k": "the reward of the majority answer of the k responses, answers grouped by the "
             "grader's equivalence, ties to the earliest (`eval/maj@k`)",
}
"""The per-problem metrics an outcomes file gives (name -> what it is), the choices of
`analysis.metric`; every evaluation of `eval.samples_per_problem` > 1 logs each as `eval/<name>`."""
DEFAULT_METRIC = "reward"


def logged_key(metric: str, samples_per_problem: int) -> str:
    """The key an evaluation of `samples_per_problem` responses a problem logs `metric` (a key of
    `OUTCOME_METRICS`) under: `eval/<metric>`, or `eval/reward` where the metric is the reward or
    one response a problem makes every metric its reward (none other is logged then)."""
    if metric not in OUTCOME_METRICS:
        raise ValueError(f"unknown outcome metric {metric!r}; choose one of {list(OUTCOME_METRICS)}")
    return f"eval/{DEFAULT_METRIC}" if metric == DEFAULT_METRIC or samples_per_problem == 1 \
        else f"eval/{metric}"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate of a problem with `c` right of `n` sampled responses:
    1 - C(n-c, k)/C(n, k) (Chen et al. 2021), for 1 <= k <= n (1 where n - c < k)."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class EvalOutcomes:
    """One evaluation at GRPO step `step`: `reward[i]` is problem i's mean reward over its
    `samples_per_problem` responses (0-1), `correct[i]` how many of them were right and
    `majority[i]` the reward of their majority answer (None: a file from before they were
    kept); `digest` fingerprints the problems evaluated."""

    step: int
    samples_per_problem: int
    digest: str
    reward: tuple[float, ...]
    correct: tuple[int, ...] | None = None
    majority: tuple[float, ...] | None = None
    problems: tuple[str, ...] | None = None
    """Each problem's fingerprint (`problem_fingerprint`), in order; None: a file from before
    they were kept."""

    def to_json(self) -> str:
        """The file's text (rewards rounded to `DECIMALS`)."""
        record: dict[str, object] = {
            "step": self.step, "samples_per_problem": self.samples_per_problem,
            "problems_digest": self.digest}
        if self.problems is not None:
            record["problems"] = list(self.problems)
        record["reward"] = [round(r, DECIMALS) for r in self.reward]
        if self.correct is not None:
            record["correct"] = list(self.correct)
        if self.majority is not None:
            record["majority"] = [round(m, DECIMALS) for m in self.majority]
        return json.dumps(record)

    def per_problem(self, metric: str) -> tuple[float, ...] | None:
        """Each problem's value of `metric` (a key of `OUTCOME_METRICS`), or None where this
        record lacks what it needs (counts or majorities of an older file; a record of one
        response a problem gives them all: each is its reward)."""
        k = self.samples_per_problem
        if metric in ("reward", "mean@k") or (k == 1 and metric in OUTCOME_METRICS):
            return self.reward
        if metric == "maj@k":
            return self.majority
        if metric not in ("pass@1", "pass@k"):
            raise ValueError(f"unknown outcome metric {metric!r}; choose one of {list(OUTCOME_METRICS)}")
        if self.correct is None:
            return None
        at = 1 if metric == "pass@1" else k
        return tuple(pass_at_k(k, c, at) for c in self.correct)

    def means(self) -> dict[str, float]:
        """The mean over problems of each metric this record gives (`OUTCOME_METRICS` name ->
        value); what an evaluation logs as `eval/<name>`."""
        values = {m: self.per_problem(m) for m in OUTCOME_METRICS}
        return {m: sum(v) / len(v) for m, v in values.items() if v is not None}


def late_mean(rewards: Sequence[float]) -> float:
    """The mean of the last ``LATE_EVALS`` of ``rewards`` (a run's evaluations after step 0, in
    step order); NaN when there are none."""
    last = list(rewards)[-LATE_EVALS:]
    return sum(last) / len(last) if last else math.nan


def _update(digest: hashlib._Hash, problem: Problem) -> None:
    for text in (problem.question, problem.answer):
        data = text.encode(errors="replace")
        digest.update(len(data).to_bytes(8, "little") + data)


def problems_digest(problems: Sequence[Problem]) -> str:
    """sha256 over the questions and answers of `problems`, in order."""
    digest = hashlib.sha256()
    for problem in problems:
        _update(digest, problem)
    return digest.hexdigest()


def problem_fingerprint(problem: Problem) -> str:
    """One problem's fingerprint: the first `FINGERPRINT_CHARS` hex digits of sha256 over its
    question and answer (the same problem, question and answer, anywhere has the same one)."""
    digest = hashlib.sha256()
    _update(digest, problem)
    return digest.hexdigest()[:FINGERPRINT_CHARS]


def problem_fingerprints(problems: Sequence[Problem]) -> tuple[str, ...]:
    """Each of `problems`' fingerprint (`problem_fingerprint`), in order."""
    return tuple(map(problem_fingerprint, problems))


def shared_problems(these: Iterable[str], those: Iterable[str]) -> list[str]:
    """The fingerprints in both `these` and `those`, sorted: the problems two sets share."""
    return sorted(set(these) & set(those))


def outcomes_path(run_dir: Path, step: int, folder: str = OUTCOMES_DIR) -> Path:
    """Where the outcomes of the evaluation after GRPO step `step` are kept (`folder`:
    `CONFIRM_DIR` for the run's confirmation)."""
    return run_dir / folder / f"step_{step:06d}.json"


def write_outcomes(run_dir: Path, outcomes: EvalOutcomes, folder: str = OUTCOMES_DIR) -> None:
    """Write `outcomes` into the run directory (atomically, never through a planted link)."""
    subdir(run_dir, folder)
    atomic_write_text(outcomes_path(run_dir, outcomes.step, folder), outcomes.to_json())


def read_outcomes(run_dir: Path, step: int, folder: str = OUTCOMES_DIR) -> EvalOutcomes | None:
    """The outcomes of the evaluation after `step`, or None when the file is missing or
    :func:`checked_outcomes` finds it unusable."""
    found = checked_outcomes(run_dir, step, folder)
    return found if isinstance(found, EvalOutcomes) else None


COUNT_TOLERANCE = 1e-6
"""How far a problem's `reward` may be from its `correct / k` (rewards are written rounded to
`DECIMALS`)."""


def checked_outcomes(run_dir: Path, step: int, folder: str = OUTCOMES_DIR
                     ) -> EvalOutcomes | str | None:
    """The outcomes of the evaluation after `step`; None when the file is missing; else what makes
    it unusable, in words naming the field (too large, not JSON, for another step, a field of the
    wrong type or out of range, or counts that contradict the rewards). Every reward function
    (`grpo.grading.rewards.REWARD_FNS`) rewards a response 0 or 1, so a problem's mean reward is
    its count of right responses over k: `correct[i] / k` must be `reward[i]`."""
    path = outcomes_path(run_dir, step, folder)
    if not path.is_file():
        return None
    try:
        data = read_json(path, MAX_OUTCOMES_BYTES)
    except RunFileError as error:
        return f"the file {str(error).removeprefix(path.name + ' ')}"
    if not isinstance(data, dict):
        return "the file is not a JSON object"
    k, digest, reward = data.get("samples_per_problem"), data.get("problems_digest"), data.get("reward")
    if data.get("step") != step or type(data.get("step")) is not int:
        return f"step is {data.get('step')!r}, not {step}"
    if type(k) is not int or not 1 <= k <= MAX_PROBLEMS:
        return f"samples_per_problem is {k!r}, not a count of responses 1..{MAX_PROBLEMS}"
    if not isinstance(digest, str) or len(digest) != 64:
        return "problems_digest is not a sha256 (64 hex digits)"
    if not isinstance(reward, list) or not 1 <= len(reward) <= MAX_PROBLEMS:
        return f"reward is not a list of 1..{MAX_PROBLEMS} per-problem rewards"
    if (bad := _first_bad(reward, is_reward)) is not None:
        return f"reward[{bad}]={reward[bad]!r} is not a number in [0, 1]"
    correct, majority, problems = data.get("correct"), data.get("majority"), data.get("problems")
    if problems is not None:
        if not isinstance(problems, list) or len(problems) != len(reward):
            return f"problems is not a list of {len(reward)} fingerprints (one per reward)"
        if (bad := _first_bad(problems, is_fingerprint)) is not None:
            return (f"problems[{bad}]={problems[bad]!r} is not a problem's fingerprint "
                    f"({FINGERPRINT_CHARS} hex digits)")
    if correct is not None:
        if not isinstance(correct, list) or len(correct) != len(reward):
            return f"correct is not a list of {len(reward)} counts (one per reward)"
        if (bad := _first_bad(correct, lambda c: type(c) is int and 0 <= c <= k)) is not None:
            return f"correct[{bad}]={correct[bad]!r} is not a count of right responses 0..{k}"
        if (bad := _first_bad(range(len(reward)), lambda i: abs(correct[i] / k - reward[i])
                              <= COUNT_TOLERANCE)) is not None:
            return (f"correct[{bad}]={correct[bad]} contradicts reward[{bad}]={reward[bad]!r}: "
                    f"rewards are 0 or 1, so {correct[bad]} right of {k} is a mean reward of "
                    f"{correct[bad] / k:.6g}")
    if majority is not None:
        if not isinstance(majority, list) or len(majority) != len(reward):
            return f"majority is not a list of {len(reward)} rewards (one per problem)"
        if (bad := _first_bad(majority, is_reward)) is not None:
            return f"majority[{bad}]={majority[bad]!r} is not a reward in [0, 1]"
    return EvalOutcomes(step, k, digest, tuple(float(r) for r in reward),
                        None if correct is None else tuple(correct),
                        None if majority is None else tuple(float(m) for m in majority),
                        None if problems is None else tuple(problems))


def _first_bad(values: Iterable[object], good: Callable[[object], bool]) -> int | None:
    """The index of the first of `values` that is not `good`, None where all are."""
    return next((i for i, value in enumerate(values) if not good(value)), None)


def read_many(run_dir: Path, steps: Iterable[int]) -> dict[int, EvalOutcomes]:
    """The readable outcomes of `steps` (step -> outcomes); unreadable ones are left out."""
    found = {step: read_outcomes(run_dir, step) for step in steps}
    return {step: outcomes for step, outcomes in found.items() if outcomes is not None}


FINGERPRINT = re.compile(f"[0-9a-f]{{{FINGERPRINT_CHARS}}}")


def is_fingerprint(value: object) -> bool:
    """Whether `value` is a problem's fingerprint as written (`FINGERPRINT_CHARS` lower-case hex
    digits)."""
    return isinstance(value, str) and FINGERPRINT.fullmatch(value) is not None


def is_reward(value: object) -> bool:
    """Whether `value` is a finite number in [0, 1] (a JSON number, not a bool)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and 0.0 <= value <= 1.0)
