"""Validation: sample one response per validation question and score it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from grpo.data.datasets import Example
from grpo.grading.rewards import score_batch
from grpo.rollout.base import RolloutEngine, SamplingSettings
from grpo.run.files import atomic_write_text

RewardFn = Callable[[str, str], dict[str, float]]


def is_evaluation_step(step: int, n_grpo_steps: int, eval_every: int) -> bool:
    """Whether the policy is evaluated after GRPO step `step`: before the first step (0), every
    `eval_every` steps, and after the last."""
    return step % eval_every == 0 or step == n_grpo_steps


def evaluate(
    engine: RolloutEngine,
    examples: Sequence[Example],
    prompts: Sequence[str],
    reward_fn: RewardFn,
    sampling: SamplingSettings,
) -> tuple[dict[str, float], list[dict[str, object]]]:
    """Score one sampled response per example.

    Returns (metrics, samples): metrics `eval/reward`, `eval/format_reward`, `eval/answer_reward`
    (means in [0, 1]), `eval/mean_response_length` (tokens) and `eval/n_examples` (how many were
    evaluated: the dry run's cost model prices evaluations per example); samples one dict per
    example with prompt, response, ground truth and rewards.
    """
    rollouts = [group[0] for group in engine.generate(list(prompts), 1, sampling)]
    all_scores = score_batch(reward_fn, [r.text for r in rollouts], [e.answer for e in examples])
    samples = []
    for example, prompt, rollout, scores in zip(examples, prompts, rollouts, all_scores, strict=True):
        samples.append(
            {"prompt": prompt, "response": rollout.text, "ground_truth": example.answer,
             "response_tokens": len(rollout.token_ids), **scores}
        )
    n = max(len(samples), 1)
    metrics = {
        f"eval/{key}": sum(float(s[key]) for s in samples) / n
        for key in ("reward", "format_reward", "answer_reward")
    }
    metrics["eval/mean_response_length"] = sum(s["response_tokens"] for s in samples) / n
    metrics["eval/n_examples"] = float(len(samples))
    return metrics, samples


def save_samples(path: Path, samples: Sequence[dict[str, object]]) -> None:
    """Write evaluation samples as jsonl, one response per line (replacing the file atomically,
    never through a symbolic link); `path.parent` must exist."""
    atomic_write_text(path, "".join(json.dumps(s) + "\n" for s in samples))
