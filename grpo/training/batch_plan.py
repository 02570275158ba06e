"""How one GRPO step's rollout batch is split into questions, optimizer steps and micro-batches.

`BatchPlan.from_config(cfg)` is built once from a run's config; the config validator
(`errors()`), the dry-run listing, the trainer and the analysis (on-policy runs) all read it, so
the arithmetic and its rules live here only. Pure Python: importing it does not import torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

CONFIG_KEYS: dict[str, str] = {
    "rollout_batch_size": "rollout_batch_size",
    "group_size": "group_size",
    "train_batch_size": "train_batch_size",
    "micro_batch_size": "micro_batch_size",
    "epochs": "off_policy.epochs",
    "micro_batch_tokens": "model.micro_batch_tokens",
}
"""BatchPlan field -> the (dotted) config key it is read from."""


def config_value(cfg: Any, dotted: str) -> Any:
    """`cfg[dotted]` for a flat mapping with dotted keys, else the nested lookup; None where a
    level is absent or not a mapping (a crafted config)."""
    if isinstance(cfg, Mapping) and dotted in cfg:
        return cfg[dotted]
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


MAX_INT = 2**31 - 1
"""The largest integer any config key may hold (a C int: thread counts, tensor sizes, loop
bounds); grpo.config.rules bounds every integer key by it."""

@dataclass(frozen=True)
class BatchPlan:
    """The batch sizes of one run (counts of rollouts) and what follows from them.

    rollout_batch_size: rollouts sampled per GRPO step.
    group_size: responses sampled per question.
    train_batch_size: rollouts per optimizer step.
    micro_batch_size: rollouts per forward/backward pass.
    epochs: passes of the optimizer over each rollout batch (`off_policy.epochs`).
    micro_batch_tokens: a budget of padded tokens per forward/backward pass
        (`model.micro_batch_tokens`), or None: micro-batches of micro_batch_size rollouts. With a
        budget `micro_batch_size` is unused (`uses_micro_batch_size`): it must still be a positive
        integer, but need not divide `train_batch_size`; the budget's own range is
        `grpo.config.rules`'s.

    The derived properties assume `errors()` is empty. This plan, and only it, says whether a
    config's batch sizes are valid: the validator and the off-policy loss rule
    (`grpo.sweep.job_loss`) both read `errors()`.
    """

    rollout_batch_size: int
    group_size: int
    train_batch_size: int
    micro_batch_size: int
    epochs: int
    micro_batch_tokens: int | None = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> BatchPlan:
        """The plan of a run config (nested, or flat with dotted keys as in `CONFIG_KEYS`)."""
        return cls(**{name: config_value(cfg, key) for name, key in CONFIG_KEYS.items()})

    @property
    def uses_micro_batch_size(self) -> bool:
        """Whether micro-batches are cut by `micro_batch_size` (no token budget): only then must
        it divide `train_batch_size`."""
        return self.micro_batch_tokens is None

    def errors(self) -> list[str]:
        """What makes the plan impossible, one message per broken rule naming the config keys."""
        checked = [f.name for f in fields(self) if f.name != "micro_batch_tokens"]
        bad = [
            f"{CONFIG_KEYS[name]}={getattr(self, name)} must be a positive integer "
            f"(at most {MAX_INT})"
            for name in checked
            if isinstance(getattr(self, name), bool)
            or not isinstance(getattr(self, name), int)
            or not 1 <= getattr(self, name) <= MAX_INT
        ]
        if bad:
            return bad
        rollout, group = self.rollout_batch_size, self.group_size
        train, micro = self.train_batch_size, self.micro_batch_size
        errors = []
        if rollout % group:
            errors.append(
                f"rollout_batch_size={rollout} must be divisible by group_size={group} "
                f"(each question gets group_size responses); try rollout_batch_size="
                f"{rollout - rollout % group or group}"
            )
        if rollout % train:
            errors.append(
                f"rollout_batch_size={rollout} must be divisible by train_batch_size={train} "
                "(each epoch is a whole number of optimizer steps)"
            )
        if self.uses_micro_batch_size and train % micro:
            errors.append(
                f"train_batch_size={train} must be divisible by micro_batch_size={micro} "
                "(gradient_accumulation_steps = train_batch_size / micro_batch_size)"
            )
        if train < group:
            errors.append(
                f"train_batch_size={train} must be >= group_size={group} "
                "(the assignment's GRPO loop asserts it; rows are shuffled one by one, so an "
                "optimizer step holds parts of several groups either way)"
            )
        if train > rollout:
            errors.append(f"train_batch_size={train} must be <= rollout_batch_size={rollout}")
        return errors

    @property
    def questions_per_step(self) -> int:
        """Training questions sampled per GRPO step: rollout_batch_size / group_size."""
        return self.rollout_batch_size // self.group_size

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step: train_batch_size / micro_batch_size."""
        return self.train_batch_size // self.micro_batch_size

    @property
    def optimizer_steps_per_epoch(self) -> int:
        """Optimizer steps per pass over the rollout batch: rollout / train_batch_size."""
        return self.rollout_batch_size // self.train_batch_size

    @property
    def optimizer_steps_per_grpo_step(self) -> int:
        """Optimizer steps per GRPO step: epochs * optimizer_steps_per_epoch."""
        return self.epochs * self.optimizer_steps_per_epoch

    @property
    def off_policy(self) -> bool:
        """True when the policy takes more than one optimizer step per rollout batch.

        Only the first optimizer step then trains on rollouts of the weights being updated;
        every later one trains on rollouts of older weights, which a loss that ignores the
        probability ratio pi / pi_old (`grpo.core.losses.PolicyLoss.uses_ratio`) treats as on-policy.
        False means exactly one optimizer step per GRPO step (one epoch, train_batch_size =
        rollout_batch_size): the on-policy runs of the analysis.
        """
        return self.optimizer_steps_per_grpo_step > 1

    def optimizer_step_slices(self) -> Iterator[slice]:
        """Positions in the rollout batch's training order of each optimizer step, in order:
        epochs passes, each in slices of train_batch_size."""
        for _epoch in range(self.epochs):
            for start in range(0, self.rollout_batch_size, self.train_batch_size):
                yield slice(start, start + self.train_batch_size)

    def on_policy_settings(self) -> dict[str, int]:
        """The config values (dotted keys) that make this plan on-policy, rollouts unchanged."""
        return {CONFIG_KEYS["epochs"]: 1, CONFIG_KEYS["train_batch_size"]: self.rollout_batch_size}

    def describe(self, micro_batching: MicroBatching | None = None) -> str:
        """One line for the dry-run listing; with a token budget (`micro_batching.tokens`), that
        budget in place of the fixed gradient accumulation."""
        if micro_batching is not None and micro_batching.tokens is not None:
            passes = micro_batching.describe()
        else:
            passes = (f"gradient_accumulation_steps={self.gradient_accumulation_steps} "
                      f"({self.train_batch_size}/{self.micro_batch_size})")
        return (
            f"{passes}, optimizer_steps_per_grpo_step={self.optimizer_steps_per_grpo_step} "
            f"({'off' if self.off_policy else 'on'}-policy)"
        )


@dataclass(frozen=True)
class MicroBatching:
    """How an optimizer step's sequences are split into forward/backward passes.

    size: `micro_batch_size`, sequences per micro-batch when `tokens` is None.
    tokens: `micro_batch_tokens`, a budget of padded tokens per micro-batch (rows x the longest
        row, each row trimmed after its last response token): sequences are sorted by length,
        longest first, and each micro-batch takes as many as fit, so short sequences share a
        micro-batch and pay little padding. None: fixed `size`.
    skip_zero_advantage: sequences with advantage exactly 0 are left out of the backward pass and
        of the old-log-prob pass (still counted in the normalization): `skip_zero_advantage` is
        on, the loss is 0 at zero advantage and no KL term to the reference is added to it
        (`kl.beta` = 0: the KL term is not 0 at zero advantage).

    The trainer weights each micro-batch by its share of the optimizer step
    (`grpo.core.train_step.grpo_share_train_step`), so the gradient is the same either way.
    """

    size: int
    tokens: int | None = None
    skip_zero_advantage: bool = False

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], zero_at_zero_advantage: bool) -> MicroBatching:
        """The micro-batching of a run config (`micro_batch_size`, `model.micro_batch_tokens`,
        `skip_zero_advantage`, `kl.beta`) whose loss is, or is not, 0 at zero advantage (the loss
        registry's `zero_at_zero_advantage`); a KL term (`kl.beta` > 0) makes it not 0 there."""
        kl_term = bool(config_value(cfg, "kl.beta"))
        return cls(config_value(cfg, "micro_batch_size"), config_value(cfg, "model.micro_batch_tokens"),
                   bool(config_value(cfg, "skip_zero_advantage")) and zero_at_zero_advantage
                   and not kl_term)

    def split(self, lengths: list[int]) -> list[list[int]]:
        """Positions 0..len(lengths)-1 grouped into micro-batches, given each sequence's length
        in tokens; every position appears once. With a budget, a sequence longer than it gets a
        micro-batch of its own (the validator keeps the budget >= model.max_seq_len)."""
        if self.tokens is None:
            positions = list(range(len(lengths)))
            return [positions[i : i + self.size] for i in range(0, len(positions), self.size)]
        groups: list[list[int]] = []
        for position in sorted(range(len(lengths)), key=lambda p: -lengths[p]):
            # the group's first sequence is its longest, so its padded size is rows x that length
            if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= self.tokens:
                groups[-1].append(position)
            else:
                groups.append([position])
        return groups

    def describe(self) -> str:
        """The micro-batching in words, for the dry run."""
        if self.tokens is None:
            return f"micro-batches of {self.size} sequences"
        return f"micro-batches of <= {self.tokens} tokens, sequences grouped by length"

    def describe_skip(self) -> str:
        """Whether zero-advantage sequences are left out, for the dry run."""
        return ("zero-advantage sequences left out of the backward" if self.skip_zero_advantage
                else "every sequence trained")
