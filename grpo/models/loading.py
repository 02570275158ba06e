"""Loading the policy (model + tokenizer) from a local directory: one code path for
Qwen2.5-Math-1.5B and for the locally built models (`model.build`: the tiny toy model and the
Qwen-shaped rehearsal model, built first by `grpo.models.build` when their directory is missing).

Nothing is ever downloaded: everything is read with `local_files_only=True`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from grpo.models.build import ensure_built
from grpo.models.precision import precision_of

# `tokenizer_class` values (tokenizer_config.json) of a plain `tokenizers` tokenizer: transformers
# 4.x writes the first, 5.x the second. AutoTokenizer would instead pick the tokenizer class of the
# model type in config.json (Qwen2Tokenizer for the tiny Qwen2), which mangles a char tokenizer.
GENERIC_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_policy(
    model_cfg: Mapping[str, Any], device: str | torch.device, dtype: torch.dtype | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load the policy model and its tokenizer from `model_cfg.path` onto `device`.

    model_cfg keys (an OmegaConf DictConfig or any mapping):
      name: label of the model (only used in messages).
      path: local directory with config.json, weights and tokenizer files.
      build: null (load `path` as is) or a `grpo.models.build.BUILDERS` name (`tiny`,
        `qwen_rehearsal`: first build that model into `path` unless an identical build is there;
        one with other settings is replaced).
      precision: `bf16-mixed` | `bf16-true` | `32-true` (`grpo.models.precision`); the
        parameters are loaded in its parameter dtype (fp32 but for `bf16-true`).
      attn_implementation: null (transformers' default, sdpa) | `sdpa` | `flash_attention_2` |
        `eager`.
      gradient_checkpointing: recompute activations in backward (non-reentrant).
      max_seq_len: longest prompt + response in tokens; must not exceed the model's
        `max_position_embeddings`.

    `dtype`: the parameters' dtype, where not the precision's parameter dtype (the KL term's
    reference, `load_reference`).

    Returns (model, tokenizer). The model is in eval mode (call `.train()` for updates) and its
    `generation_config.pad_token_id` is the tokenizer's pad id. The tokenizer pads on the left
    (`padding_side="left"`), as batched `generate` needs; code that builds prompt + response
    training sequences should lay them out itself (e.g. right-padded) from token ids. It always
    has a pad token: its own, or else EOS reused as pad (see `tokenizer_pad_id`).
    """
    name = model_cfg.get("name", "model")
    path = resolve_model_path(model_cfg)
    kwargs: dict[str, Any] = {"dtype": dtype or precision_of(model_cfg).parameter_dtype,
                              "local_files_only": True}
    if model_cfg.get("attn_implementation") is not None:
        kwargs["attn_implementation"] = model_cfg["attn_implementation"]
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)

    max_positions = model.config.max_position_embeddings
    max_seq_len = model_cfg.get("max_seq_len")
    if max_seq_len is not None and max_seq_len > max_positions:
        raise ValueError(f"model.max_seq_len={max_seq_len} exceeds the {max_positions} positions "
                         f"of {name!r} (max_position_embeddings); lower model.max_seq_len")
    if model_cfg.get("gradient_checkpointing", False):
        # transformers >= 5.21 renamed it; vllm 0.33 pins transformers < 5.21
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
        else:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )

    tokenizer = load_tokenizer(path)
    model.generation_config.pad_token_id = tokenizer_pad_id(tokenizer)
    return model.to(device).eval(), tokenizer


def load_reference(model_cfg: Mapping[str, Any], device: str | torch.device) -> PreTrainedModel:
    """The reference policy of the KL term (`kl.beta` > 0): the initial weights, loaded again
    from `model_cfg.path` (never from a checkpoint, so a resumed run has the same reference),
    in the dtype the policy computes in (`Precision.weights_dtype`: bf16 under `bf16-mixed`, so
    one more copy of the weights at half their fp32 size), frozen: eval mode, no gradients,
    no optimizer state."""
    reference, _ = load_policy(model_cfg, device, precision_of(model_cfg).weights_dtype)
    return reference.requires_grad_(False)


def resolve_model_path(model_cfg: Mapping[str, Any]) -> Path:
    """The directory of the model `model_cfg` describes, built first (`grpo.models.build`) if
    `build` names a locally built model and no identical build is there yet.

    Keys read: name, path, build, and the build settings its builder reads (`BUILDERS`).

    Raises FileNotFoundError (naming `model.path` and how to set it) when there is no
    config.json in the directory, ValueError for an unset path or an unknown `build`.
    """
    name = model_cfg.get("name", "model")
    if model_cfg.get("path") is None:
        raise ValueError(f"model.path is not set for {name!r}; set model.path=/path/to/model "
                         "on the command line (model=qwen2.5-math-1.5b reads paths.qwen_model: "
                         "set that in conf/local/default.yaml)")
    path = Path(str(model_cfg["path"])).expanduser()
    if model_cfg.get("build") is not None:
        path = ensure_built(model_cfg)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model.path: no model (config.json) at {path} for {name!r}. Point model.path at a "
            "local copy of the model, e.g. model.path=/path/to/Qwen2.5-Math-1.5B on the command "
            "line (model=qwen2.5-math-1.5b reads paths.qwen_model: set that in "
            "conf/local/default.yaml, or GRPO_MODEL_PATH); nothing is downloaded"
        )
    return path


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer saved in `path`, left-padding, with a pad token (EOS if it had none).

    A tokenizer saved as a plain `tokenizers` tokenizer (tokenizer_class `PreTrainedTokenizerFast`
    or `TokenizersBackend` in tokenizer_config.json, as the tiny model's is) is loaded as
    `PreTrainedTokenizerFast`; anything else goes through `AutoTokenizer`.
    """
    path = Path(path)
    config_file = path / "tokenizer_config.json"
    tokenizer_class = None
    if config_file.is_file():
        tokenizer_class = json.loads(config_file.read_text()).get("tokenizer_class")
    loader = (PreTrainedTokenizerFast if tokenizer_class in GENERIC_TOKENIZER_CLASSES
              else AutoTokenizer)
    tokenizer = loader.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def tokenizer_pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id used to pad token-id tensors for this tokenizer.

    It is the tokenizer's pad token, which `load_tokenizer` sets to EOS when the tokenizer has
    none, and which may equal EOS anyway (Qwen2.5-Math pads with `<|endoftext|>`, also its EOS).
    So never tell padding from content by comparing ids with it; use attention or response masks.
    """
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        raise ValueError("tokenizer has no pad token; load it with grpo.models.loading.load_tokenizer")
    return pad_id
