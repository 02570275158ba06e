"""grpo: GRPO for language models (CS336 assignment 5), with Hydra sweeps over its ablations.

The core functions follow the CS336 adapter API (names without the `run_` prefix). They are
imported on first use (`from grpo import compute_grpo_clip_loss`), so that importing a light
module such as `grpo.training.batch_plan` does not import torch.

Importing the package pins the CPU numerics (`grpo.run.cpu_numerics`) in the environment of this
process and of those it starts: a process imports `grpo` before any module of it loads torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from grpo.run.cpu_numerics import pin_cpu_numerics

pin_cpu_numerics()

_EXPORTS: dict[str, str] = {
    "LENGTH_NORMALIZATIONS": "grpo.core.specs",
    "POLICY_LOSSES": "grpo.core.losses",
    "PROMPT_REWARD_PAIRS": "grpo.data.prompts",
    "REWARD_FNS": "grpo.grading.rewards",
    "answer_tag_reward_fn": "grpo.grading.rewards",
    "compute_entropy": "grpo.core.log_probs",
    "compute_group_normalized_rewards": "grpo.core.advantages",
    "compute_grpo_clip_loss": "grpo.core.losses",
    "compute_grpo_no_clip_loss": "grpo.core.losses",
    "compute_naive_policy_gradient_loss": "grpo.core.losses",
    "compute_policy_gradient_loss": "grpo.core.losses",
    "extract_boxed_answer": "grpo.grading.rewards",
    "format_prompt": "grpo.data.prompts",
    "get_response_log_probs": "grpo.core.log_probs",
    "grade_answer": "grpo.grading.answers",
    "grpo_microbatch_train_step": "grpo.core.train_step",
    "load_prompt_template": "grpo.data.prompts",
    "masked_mean": "grpo.core.masking",
    "masked_normalize": "grpo.core.masking",
    "normalize_answer": "grpo.grading.answers",
    "pack_prompt_and_output_ids": "grpo.core.tokenization",
    "question_only_reward_fn": "grpo.grading.rewards",
    "r1_zero_reward_fn": "grpo.grading.rewards",
    "register_policy_loss": "grpo.core.losses",
    "reward_fn_for": "grpo.data.prompts",
    "tokenize_prompt_and_output": "grpo.core.tokenization",
}
"""Public name -> the module that defines it."""

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the public name `name` from its module on first access."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'grpo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
