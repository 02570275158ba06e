"""grpo: GRPO for language models (CS336 assignment 5), with Hydra sweeps over its ablations.

The core functions follow the CS336 adapter API (names without the `run_` prefix).
"""

from grpo.advantages import compute_group_normalized_rewards
from grpo.grading import grade_answer, normalize_answer
from grpo.log_probs import compute_entropy, get_response_log_probs
from grpo.losses import (
    LOSS_TYPES,
    compute_grpo_clip_loss,
    compute_grpo_no_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
)
from grpo.masking import masked_mean, masked_normalize
from grpo.prompts import (
    PROMPT_REWARD_PAIRS,
    check_prompt_reward_pair,
    format_prompt,
    load_prompt_template,
)
from grpo.rewards import (
    REWARD_FNS,
    answer_tag_reward_fn,
    extract_boxed_answer,
    question_only_reward_fn,
    r1_zero_reward_fn,
)
from grpo.tokenization import pack_prompt_and_output_ids, tokenize_prompt_and_output
from grpo.train_step import LENGTH_NORMALIZATIONS, grpo_microbatch_train_step

__all__ = [
    "LENGTH_NORMALIZATIONS",
    "LOSS_TYPES",
    "PROMPT_REWARD_PAIRS",
    "REWARD_FNS",
    "answer_tag_reward_fn",
    "check_prompt_reward_pair",
    "compute_entropy",
    "compute_group_normalized_rewards",
    "compute_grpo_clip_loss",
    "compute_grpo_no_clip_loss",
    "compute_naive_policy_gradient_loss",
    "compute_policy_gradient_loss",
    "extract_boxed_answer",
    "format_prompt",
    "get_response_log_probs",
    "grade_answer",
    "grpo_microbatch_train_step",
    "load_prompt_template",
    "masked_mean",
    "masked_normalize",
    "normalize_answer",
    "pack_prompt_and_output_ids",
    "question_only_reward_fn",
    "r1_zero_reward_fn",
    "tokenize_prompt_and_output",
]
