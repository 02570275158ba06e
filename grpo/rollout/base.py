"""The rollout-engine interface: sample `n` responses per prompt from the current policy.

Two engines implement it: `hf` (transformers `generate`, CPU or GPU) and `vllm` (a vLLM engine on
its own GPU, colocated with the trainer on its GPU, or on the CPU). The trainer only talks to this interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from grpo.rollout.specs import EngineSpec

if TYPE_CHECKING:  # annotations only: the interface imports without torch
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class NonFiniteLogitsError(RuntimeError):
    """The policy produced NaN/inf logits while sampling: its weights have diverged."""


@dataclass(frozen=True)
class SamplingSettings:
    """How responses are sampled.

    temperature: softmax temperature (1.0 = the policy's own distribution).
    top_p: nucleus-sampling mass in (0, 1].
    min_new_tokens / max_new_tokens: bounds on the response length, in tokens.
    stop: stop strings; generation ends after the first one, which is kept in the response text.
    seed: base seed for the sampler (None: not seeded).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    min_new_tokens: int = 0
    max_new_tokens: int = 1024
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass
class Rollout:
    """One sampled response to one prompt.

    text: the response text (stop string included, EOS and padding excluded).
    token_ids: the sampled response token ids, length L.
    log_probs: log-probabilities (natural log) the engine's weights gave to each sampled token
      under the sampling distribution (temperature and top-p applied; temperature 1 when greedy),
      length L: the behaviour policy's, which the stale-weight check compares with the trainer's
      and the importance correction of stale rollouts divides by. None if unavailable.
    finish_reason: "stop" (stop string or EOS) or "length" (hit max_new_tokens).
    """

    text: str
    token_ids: list[int]
    log_probs: list[float] | None = None
    finish_reason: str = "stop"


class RolloutEngine(ABC):
    """Samples responses from the policy; holds its own copy of the weights where it needs one.

    What an engine provides and needs is its `spec` (`grpo.rollout.specs.ENGINE_SPECS`, read by the
    config validator and the trainer without importing the engine).
    """

    spec: ClassVar[type[EngineSpec]]
    """What the engine provides and needs (`grpo.rollout.specs`)."""

    @classmethod
    @abstractmethod
    def from_config(
        cls,
        rollout_cfg: Mapping[str, Any],
        *,
        policy: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        model_path: str,
        seed: int,
        max_model_len: int,
    ) -> RolloutEngine:
        """The engine for the `rollout` config group; see `grpo.rollout.engines.build_engine`."""

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingSettings
    ) -> list[list[Rollout]]:
        """Sample `n` responses for each prompt.

        Returns a list of len(prompts) groups, each a list of `n` Rollouts, in prompt order.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not prompts:
            return []
        return self._generate(list(prompts), n, sampling)

    @abstractmethod
    def _generate(self, prompts: list[str], n: int, sampling: SamplingSettings) -> list[list[Rollout]]:
        """`generate` for a non-empty prompt list and n >= 1."""

    def min_length_end_ids(self, stop: Sequence[str]) -> tuple[int, ...]:
        """The token ids this engine keeps from being sampled before sampling.min_new_tokens
        (given the prompt's `stop` strings): the minimum-length mask its log-probs include."""
        return ()

    @abstractmethod
    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Make the engine sample from `policy`'s current weights (a no-op where they are shared)."""

    def close(self) -> None:  # noqa: B027 - optional hook, most engines hold nothing to free
        """Free the engine's resources (GPU memory, worker processes)."""
