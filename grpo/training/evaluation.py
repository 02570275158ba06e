"""Validation: sample `samples_per_problem` responses per validation problem and score them; the
per-problem outcomes of every evaluation (mean reward, responses right, majority answer's reward)
are kept (`eval_outcomes/step_XXXXXX.json`, read by `grpo.run.outcomes`) so that the analysis can
compare two configs on the same problems, by any metric of `grpo.run.outcomes.OUTCOME_METRICS`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from grpo.data.datasets import Example
from grpo.grading.majority import majority_reward
from grpo.grading.rewards import AnswerFn, final_answer, score_batch
from grpo.rollout.base import RolloutEngine, SamplingSettings
from grpo.run.files import atomic_write_text
from grpo.run.outcomes import EvalOutcomes, problem_fingerprints, problems_digest

RewardFn = Callable[[str, str], dict[str, float]]
EVALUATION_STREAM = 0x6576616C
"""Tags the evaluation seeds' hash (``"eval"``), apart from every other seeded draw of a run."""
CONFIRM_STREAM = 0x636F6E66
"""Tags the confirmation's seeds (``"conf"``: the final policy on held-out problems), apart from
the evaluations'."""


def evaluation_seed(seed: int, step: int, stream: int = EVALUATION_STREAM) -> int:
    """The sampling seed of the evaluation after GRPO step `step` of a run with seed `seed`: a
    62-bit hash of (seed, step). Each evaluation draws afresh (the late evaluations a run's value
    averages are independent draws, not one draw repeated by a converged policy); the same config
    and seed give the same curve; and runs with the same seed share each step's evaluation random
    numbers, which helps a comparison of configs (common random numbers). `stream`
    `CONFIRM_STREAM`: the seed of the run's confirmation at that step."""
    state = np.random.SeedSequence((stream, seed, step)).generate_state(2, np.uint32)
    return (int(state[0]) << 30) ^ int(state[1])


def evaluate(
    engine: RolloutEngine,
    examples: Sequence[Example],
    prompts: Sequence[str],
    reward_fn: RewardFn,
    answer_fn: AnswerFn,
    sampling: SamplingSettings,
    samples_per_problem: int = 1,
    step: int = 0,
) -> tuple[dict[str, float], list[dict[str, object]], EvalOutcomes]:
    """Score `samples_per_problem` sampled responses per example (problem `i` is `examples[i]`).

    Returns (metrics, samples, outcomes): metrics `eval/reward`, `eval/format_reward`,
    `eval/answer_reward` (means over every response, in [0, 1]), `eval/mean_response_length`
    (tokens), `eval/n_examples` (problems evaluated) and `eval/n_responses` (responses sampled:
    the dry run's cost model prices evaluations per response), and with `samples_per_problem`
    k > 1 `eval/mean@k`, `eval/pass@1`, `eval/pass@k`, `eval/maj@k` (means over problems,
    `grpo.run.outcomes.OUTCOME_METRICS`; `answer_fn` reads each response's final answer for the
    majority vote); samples one dict per response (problem by problem) with problem index,
    prompt, response, ground truth and rewards; outcomes each problem's mean reward, responses
    right and majority answer's reward (and each problem's fingerprint), the record of this
    evaluation at GRPO step `step`.
    """
    groups = engine.generate(list(prompts), samples_per_problem, sampling)
    pairs = [(i, rollout) for i, group in enumerate(groups) for rollout in group]
    all_scores = score_batch(reward_fn, [r.text for _, r in pairs],
                             [examples[i].answer for i, _ in pairs])
    samples = [
        {"problem": i, "prompt": prompts[i], "response": rollout.text,
         "ground_truth": examples[i].answer, "response_tokens": len(rollout.token_ids), **scores}
        for (i, rollout), scores in zip(pairs, all_scores, strict=True)
    ]
    n = max(len(samples), 1)
    metrics = {
        f"eval/{key}": sum(float(s[key]) for s in samples) / n
        for key in ("reward", "format_reward", "answer_reward")
    }
    metrics["eval/mean_response_length"] = sum(s["response_tokens"] for s in samples) / n
    metrics["eval/n_examples"] = float(len(examples))
    metrics["eval/n_responses"] = float(len(samples))
    by_problem: list[list[dict[str, object]]] = [[] for _ in examples]
    for sample in samples:
        by_problem[int(sample["problem"])].append(sample)
    outcomes = EvalOutcomes(
        step, samples_per_problem, problems_digest(examples),
        tuple(sum(float(s["reward"]) for s in group) / samples_per_problem for group in by_problem),
        tuple(sum(float(s["reward"]) == 1.0 for s in group) for group in by_problem),
        tuple(majority_reward([final_answer(answer_fn, str(s["response"])) for s in group],
                              [float(s["reward"]) for s in group]) for group in by_problem),
        problem_fingerprints(examples))
    if samples_per_problem > 1:
        metrics.update({f"eval/{name}": value for name, value in outcomes.means().items()
                        if name != "reward"})
    return metrics, samples, outcomes


def save_samples(path: Path, samples: Sequence[dict[str, object]]) -> None:
    """Write evaluation samples as jsonl, one response per line (replacing the file atomically,
    never through a symbolic link); `path.parent` must exist."""
    atomic_write_text(path, "".join(json.dumps(s) + "\n" for s in samples))
