"""This project's settings beside the names TRL and verl give them, and the paper of each: the one
owner of that table. The docs page `reference/field-axes.md` is generated from it
(`docs/gen_pages.py`), the explanation pages link there, and `tests/test_field_axes.py` composes
every setting (each `key=value` must be a key or a config group option of `conf/`, and valid) and
checks that each variant of the study preset `+experiment=field_axes`
(`conf/variants/field_axes/<axis>.yaml`) sets exactly its row's setting.

TRL's names are those of `trl/trainer/grpo_config.py` (`GRPOConfig`) and
`trl/rewards/other_rewards.py` at huggingface/trl f2cd577 (2026-07-24); verl's those of
`verl/trainer/config/_generated_ppo_trainer.yaml`, `verl/trainer/config/actor/actor.yaml`,
`verl/trainer/config/algorithm.py` (`FilterGroupsConfig`), `verl/trainer/ppo/core_algos.py`
(`register_policy_loss`, `kl_penalty`), `verl/workers/reward_manager/dapo.py` and, for "the DAPO
recipe" (its trainer lives in verl-recipe), `docs/algo/dapo.md`, at volcengine/verl b178a3c
(2026-01-29): read there, not recalled. verl's actor keys are under `actor_rollout_ref.actor.`,
written here without it. An empty `trl` or `verl` is an option neither has (as far as those files
show): the setting is this project's (or its paper's) alone.
"""

from __future__ import annotations

from dataclasses import dataclass

VERL_ACTOR = "actor_rollout_ref.actor."
"""The prefix of verl's actor keys, left out of the table's verl column."""


@dataclass(frozen=True)
class Equivalent:
    """One setting: ``setting``, this project's ``key=value`` overrides (a config group's option
    or a config key, as `python launch.py` takes them); ``what`` it does (one line); ``paper``,
    the method's source; ``trl`` and ``verl``, their options for the same, each name in
    backticks (empty: none);
    ``note``, where they differ from this project's (markdown: names in backticks); ``axis``, the option of
    `conf/variants/field_axes/` that studies it against the base (empty: not in the study)."""

    setting: tuple[str, ...]
    what: str
    paper: str
    trl: str
    verl: str
    note: str = ""
    axis: str = ""


GRPO = "Shao et al. 2024, DeepSeekMath (GRPO)"
DAPO = "Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at Scale"
DR_GRPO = "Liu et al. 2025, Understanding R1-Zero-Like Training (Dr. GRPO)"
SCALERL = "Khatri et al. 2025, The Art of Scaling Reinforcement Learning Compute for LLMs (ScaleRL)"
GSPO = "Zheng et al. 2025, Group Sequence Policy Optimization (GSPO)"
MINIMAX = "MiniMax 2025, MiniMax-M1 (CISPO)"
K3 = "Schulman 2020, Approximating KL Divergence (the k3 estimator), as GRPO uses it"

EQUIVALENTS: tuple[Equivalent, ...] = (
    # losses (conf/loss/)
    Equivalent(("loss=grpo_clip", "loss.cliprange=0.2"),
               "GRPO-Clip: the token ratio clipped to [1 - eps, 1 + eps]", GRPO,
               '`epsilon=0.2` (`loss_type="grpo"` for its normalization)',
               "`policy_loss.loss_mode=vanilla`, `clip_ratio=0.2`"),
    Equivalent(("loss=grpo_clip_higher", "loss.cliprange_low=0.2", "loss.cliprange_high=0.28"),
               "clip-higher: the token ratio clipped to [1 - low, 1 + high]", DAPO,
               "`epsilon=0.2`, `epsilon_high=0.28`", "`clip_ratio_low=0.2`, `clip_ratio_high=0.28`"),
    Equivalent(("loss=gspo", "loss.cliprange_low=3e-4", "loss.cliprange_high=4e-4"),
               "the sequence's ratio exp(mean of log pi - log pi_old), clipped per sequence", GSPO,
               '`importance_sampling_level="sequence"`, `loss_type="grpo"`, `epsilon=3e-4`, '
               '`epsilon_high=4e-4`',
               "`policy_loss.loss_mode=gspo`, `clip_ratio_low=3e-4`, `clip_ratio_high=4e-4`",
               "TRL warns that its other loss types weight each sequence by its length with the "
               "sequence ratio; `loss_type=\"grpo\"` is the paper's objective, `normalization=mean` here",
               axis="gspo"),
    Equivalent(("loss=cispo", "loss.ratio_cap=5.0", "loss.ratio_floor=0.0"),
               "REINFORCE weighted by the detached ratio, truncated at the cap; no token's gradient cut",
               MINIMAX, '`loss_type="cispo"`, `epsilon_high=5.0`',
               "`policy_loss.loss_mode=cispo`, `clip_ratio_high=4.0`, `clip_ratio_low=1.0`",
               "TRL's `epsilon_high` is the cap itself, and TRL has no floor; verl clamps the ratio "
               "to [1 - `clip_ratio_low`, 1 + `clip_ratio_high`]; TRL's cispo and verl's default "
               "reduction are the token mean (`normalization=token`)", axis="cispo"),
    # advantages (conf/std_norm/)
    Equivalent(("std_norm=on",), "group-centred rewards divided by the group's std", GRPO,
               '`scale_rewards="group"`', "`algorithm.norm_adv_by_std_in_grpo=true`"),
    Equivalent(("std_norm=batch",), "group-centred rewards divided by the std of every reward of "
               "the rollout batch", SCALERL, '`scale_rewards="batch"`', "", axis="batch_std"),
    Equivalent(("std_norm=off",), "group-centred rewards, not divided", DR_GRPO,
               '`scale_rewards="none"`', "`algorithm.norm_adv_by_std_in_grpo=false`"),
    # length normalizations (conf/normalization/)
    Equivalent(("normalization=mean",), "each sequence's token mean, then the mean over sequences",
               GRPO, '`loss_type="grpo"`', "`loss_agg_mode=seq-mean-token-mean`"),
    Equivalent(("normalization=token",), "one mean over every response token of the optimizer step",
               DAPO, '`loss_type="dapo"`', "`loss_agg_mode=token-mean`",
               'TRL\'s `loss_type="bnpo"` is the token mean of the local batch, not the step\'s'),
    Equivalent(("normalization=constant",), "each sequence's token sum divided by "
               "sampling.max_new_tokens, then the mean over sequences", DR_GRPO,
               '`loss_type="dr_grpo"`', "`loss_agg_mode=seq-mean-token-sum-norm`",
               "verl divides the sum over sequences by the padded response length: a constant factor "
               "apart; its `seq-mean-token-sum` is this times `sampling.max_new_tokens`"),
    Equivalent(("normalization=prompt",), "each prompt's responses averaged over all their tokens, "
               "then the mean over prompts", SCALERL, "", "", axis="prompt_level"),
    # zero-variance groups (conf/zero_variance/)
    Equivalent(("zero_variance=keep",), "groups whose rewards are all equal stay in the loss's "
               "denominators (advantage 0: the gradient unchanged)", GRPO,
               "the default (it logs the share as `frac_reward_zero_std`)", "the default"),
    Equivalent(("zero_variance=filter",), "groups whose rewards are all equal left out of the loss "
               "and of its denominators", SCALERL, "", "",
               "verl's `algorithm.filter_groups` drops them and always draws more (dynamic sampling)",
               axis="zero_variance_filter"),
    Equivalent(("zero_variance=dynamic_sampling", "zero_variance.max_rounds=4"),
               "more prompts drawn until the step holds groups with non-zero variance only, at most "
               "max_rounds extra rounds", DAPO, "",
               "`algorithm.filter_groups.enable=true`, `algorithm.filter_groups.max_num_gen_batches=5`, "
               "`data.gen_batch_size` = a round's prompts (the DAPO recipe)",
               "verl's `max_num_gen_batches` counts the first round (`max_rounds` + 1) and stops the run "
               "at its bound; here the step trains what it found", axis="dynamic_sampling"),
    # prompts (retire)
    Equivalent(("retire.pass_rate=0.9",), "a prompt whose group passes at this rate or more in a "
               "step is never drawn again (no-positive-resampling)", SCALERL, "", "",
               axis="retire"),
    # responses at the length limit (overlong)
    Equivalent(("overlong.filter=true",), "responses cut at sampling.max_new_tokens left out of "
               "the loss (overlong filtering)", DAPO, "`mask_truncated_completions=True`", "",
               axis="overlong_filter"),
    Equivalent(("overlong.buffer=256", "overlong.penalty_factor=1.0"),
               "a penalty growing linearly to -penalty_factor over the last buffer tokens before "
               "sampling.max_new_tokens, added to the reward (soft overlong punishment)", DAPO,
               "the reward function `trl.rewards.get_soft_overlong_punishment(max_completion_len=1024, "
               "soft_punish_cache=256)`",
               "`reward_model.overlong_buffer.enable=true`, `.len=256`, `.penalty_factor=1.0` (the "
               "DAPO recipe)",
               "verl's examples/ scripts give the same as "
               "`+reward_model.reward_kwargs.overlong_buffer_cfg.*` with `reward_manager.name=dapo`", axis="overlong_punishment"),
    # a KL term (kl)
    Equivalent(("kl.beta=0.001",), "beta times the k3 KL to the initial policy added to each "
               "token's loss", K3, "`beta=0.001`",
               "`use_kl_loss=true`, `kl_loss_coef=0.001`, `kl_loss_type=low_var_kl`",
               "verl's `low_var_kl` is k3 clamped to [-10, 10]", axis="kl"),
)
"""Every setting with a TRL or verl equivalent or a place in the field-axes study, losses first."""


def field_axes() -> dict[str, Equivalent]:
    """The study's axes: each variant option of `conf/variants/field_axes/` -> its row, in the
    table's order."""
    return {row.axis: row for row in EQUIVALENTS if row.axis}
