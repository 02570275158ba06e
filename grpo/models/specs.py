"""What the models' registries hold, without torch or transformers: the config validator reads it.

`BUILDERS` (how each `model.build` name is made; the builder module is imported only when a model
or its tokenizer is made), `PRECISIONS` (the `model.precision` names and their dtypes, by torch's
names; `grpo.models.precision` turns them into torch dtypes), `SMALLEST_SAFE_BF16_TRUE_LR` and
`CHARACTERS` (the tiny model's alphabet, `grpo.models.tiny_tokenizer`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Builder:
    """How `model.build: <name>` is made: `module.function(out_dir, **args)`, with `args` taken
    from the model config by `config_keys` (model config key -> function argument)."""

    module: str
    function: str
    config_keys: Mapping[str, str]
    # `<module>.<function>` of the model's tokenizer alone, made without building the model
    tokenizer_function: str

    def __call__(self, out_dir: Path, model_cfg: Mapping[str, Any]) -> Path:
        args = {arg: model_cfg[key] for key, arg in self.config_keys.items() if key in model_cfg}
        return getattr(importlib.import_module(self.module), self.function)(out_dir, **args)

    def tokenizer(self) -> Any:
        """The built model's tokenizer, made in memory (for checks that must not build models)."""
        module, _, function = self.tokenizer_function.rpartition(".")
        return getattr(importlib.import_module(module), function)()


# model.build value -> its builder
BUILDERS = {
    "tiny": Builder("grpo.models.tiny", "build_tiny_model", {
        "build_seed": "seed", "warmup_steps": "warmup_steps",
        "warmup_target_accuracy": "warmup_target_accuracy",
    }, "grpo.models.tiny_tokenizer.build_tokenizer"),
    "qwen_rehearsal": Builder("grpo.models.rehearsal", "build_rehearsal_model", {"build_seed": "seed"},
                              "grpo.models.rehearsal.build_rehearsal_tokenizer"),
}


@dataclass(frozen=True)
class PrecisionSpec:
    """parameter_dtype: torch's name of the dtype of the trained parameters, their gradients and
    the optimizer state. autocast_dtype: that of forward and backward matmuls under autocast (None:
    no autocast)."""

    parameter_dtype: str
    autocast_dtype: str | None = None


PRECISIONS: dict[str, PrecisionSpec] = {
    "bf16-mixed": PrecisionSpec("float32", "bfloat16"),
    "bf16-true": PrecisionSpec("bfloat16"),
    "32-true": PrecisionSpec("float32"),
}
"""`model.precision` name -> its dtypes (`grpo.models.precision`'s docstring says what each means)."""

SMALLEST_SAFE_BF16_TRUE_LR = 3e-4
"""Below this learning rate `bf16-true` loses most of each update (validation warns)."""

CHARACTERS = "0123456789+ QA:"
"""Every character a toy prompt or response contains outside the answer tags: the tiny model's
character tokenizer knows these (and its special and answer-tag tokens) only."""
