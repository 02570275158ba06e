"""What the core's registries hold, without the tensor code: importable without torch.

The config validator and the dry run's cost model read these (names, the inputs a loss reads,
whether a correction weighs tokens); `grpo.core.losses`, `grpo.core.train_step` and
`grpo.core.importance` implement them and refuse, when imported, a spec without an
implementation. Adding a loss: its `LossSpec` here, its function registered in `losses` with
`@register_policy_loss(<name>)`, and `conf/loss/<name>.yaml` with `name` and its hyperparameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

BATCH_INPUTS = ("raw_rewards", "advantages", "old_log_probs", "response_mask")
"""Inputs taken from the rollout batch; every other input of a loss is a hyperparameter.
`response_mask` is read by a loss that reduces over a response itself (GSPO's per-sequence ratio);
the caller still applies the length normalization to the per-token loss."""


@dataclass(frozen=True)
class LossSpec:
    """One policy-gradient loss, as the config and the trainer see it.

    name: the loss_type, `loss.name` and `conf/loss/<name>.yaml`.
    inputs: input name (a `BATCH_INPUTS` entry or a hyperparameter key of the loss's yaml) ->
        the name of the function's parameter that receives it.
    summary: one line for the docs.
    zero_at_zero_advantage: the per-token loss is a multiple of the advantage, so a sequence with
        advantage exactly 0 has loss 0 and gradient 0, and the trainer may leave it out of the
        backward pass (it still counts in the normalization); tests/test_losses.py checks it.
    sequence_ratio: the probability ratio, and its clip, is one per sequence (GSPO's
        length-normalized sequence ratio), not one per token: the loss reports "clipped" per
        sequence and `train/clip_fraction` counts sequences, not tokens.
    """

    name: str
    inputs: Mapping[str, str] = field(hash=False)
    summary: str
    zero_at_zero_advantage: bool = False
    sequence_ratio: bool = False

    @property
    def uses_ratio(self) -> bool:
        """Whether the loss reads the probability ratio pi / pi_old (i.e. needs old_log_probs)."""
        return "old_log_probs" in self.inputs

    @property
    def hyperparameters(self) -> tuple[str, ...]:
        """The `loss.*` config keys the loss reads besides `loss.name`."""
        return tuple(k for k in self.inputs if k not in BATCH_INPUTS)


def _loss(name: str, inputs: tuple[str, ...] | dict[str, str], summary: str, *,
          zero_at_zero_advantage: bool = False, sequence_ratio: bool = False) -> LossSpec:
    renamed = dict(inputs) if isinstance(inputs, dict) else {k: k for k in inputs}
    return LossSpec(name, MappingProxyType(renamed), summary, zero_at_zero_advantage,
                    sequence_ratio)


LOSS_SPECS: dict[str, LossSpec] = {spec.name: spec for spec in (
    _loss("no_baseline", {"raw_rewards": "raw_rewards_or_advantages"},
          "REINFORCE on raw rewards: -r * log pi (no baseline)."),
    _loss("reinforce_with_baseline", {"advantages": "raw_rewards_or_advantages"},
          "REINFORCE with the group-normalized advantage: -A * log pi.",
          zero_at_zero_advantage=True),
    _loss("grpo_clip", ("advantages", "old_log_probs", "cliprange"),
          "Per-token GRPO-Clip loss -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A).",
          zero_at_zero_advantage=True),
    _loss("grpo_clip_higher", ("advantages", "old_log_probs", "cliprange_low", "cliprange_high"),
          "Per-token GRPO-Clip with DAPO's clip-higher: ratio clipped to [1 - eps_low, 1 + eps_high].",
          zero_at_zero_advantage=True),
    _loss("grpo_no_clip", ("advantages", "old_log_probs"),
          "Per-token unclipped importance-weighted loss -ratio * A (GRPO without the PPO clip).",
          zero_at_zero_advantage=True),
    _loss("gspo", ("advantages", "old_log_probs", "response_mask", "cliprange_low",
                   "cliprange_high"),
          "GSPO (Zheng et al. 2025): -min(s * A, clip(s, 1 - eps_low, 1 + eps_high) * A) with s the "
          "sequence ratio exp(mean over the response of log pi - log pi_old), the same at every "
          "token of the sequence.",
          zero_at_zero_advantage=True, sequence_ratio=True),
    _loss("cispo", ("advantages", "old_log_probs", "ratio_cap", "ratio_floor"),
          "CISPO (MiniMax-M1 2025, ScaleRL's loss): REINFORCE weighted by the detached, truncated "
          "ratio, -sg(clip(ratio, ratio_floor, ratio_cap)) * A * log pi; no token's gradient is "
          "cut off.",
          zero_at_zero_advantage=True),
)}
"""The losses by name, in the order of the docs; `grpo.core.losses.POLICY_LOSSES` implements each."""

LengthNormalization = Literal["mean", "constant", "microbatch", "token", "prompt"]
"""`normalization.name`: how a sequence's per-token losses become the optimized scalar
(`grpo.core.train_step`'s docstring)."""
LENGTH_NORMALIZATIONS: tuple[str, ...] = get_args(LengthNormalization)

StdScope = Literal["group", "batch"]
"""`std_norm.scope`: over which rewards the standard deviation that divides the group-centred
rewards is taken, when `std_norm.enabled` (`grpo.core.advantages`' docstring): each response's
group (GRPO) or the whole rollout batch (TRL's `scale_rewards="batch"`)."""
STD_SCOPES: tuple[str, ...] = get_args(StdScope)

CORRECTION_WEIGHS: dict[str, bool] = {"tis": True, "none": False}
"""`off_policy.correction` name -> whether it weighs the stale tokens (False: w = 1, nothing is
computed for it); `grpo.core.importance.CORRECTIONS` holds the functions."""
