"""Training precision: one config key, `model.precision`, with Lightning's names.

- `bf16-mixed` (the GPU presets): fp32 parameters (the master weights) and so fp32 gradients and
  AdamW state; forward and backward run under bf16 autocast; the rollout engine samples with bf16
  weights (vLLM casts them at each sync, the hf engine samples under the same autocast); the
  final model is saved in bf16, as Qwen2.5-Math-1.5B is published.
- `bf16-true`: bf16 parameters, gradients and AdamW state: about half the memory of weights and
  optimizer state, but an update smaller than half a bf16 step of a weight rounds back to it. A
  weight of magnitude 0.02 has bf16 steps of 2**-13 = 1.2e-4, so the ~1e-5 a first AdamW step
  moves it at learning rate 1e-5 is lost: most elements of every weight matrix do not change.
  Validation warns below learning rate 3e-4.
- `32-true` (the CPU presets): fp32 everywhere, no autocast.

`grpo.models.specs.PRECISIONS` is the one list of names and dtypes: the config rule, the validator
and the trainer read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from grpo.models.specs import PRECISIONS


@dataclass(frozen=True)
class Precision:
    """parameter_dtype: dtype of the trained parameters, their gradients and the optimizer state.
    autocast_dtype: dtype of forward and backward matmuls under autocast (None: no autocast)."""

    parameter_dtype: torch.dtype
    autocast_dtype: torch.dtype | None = None

    @property
    def weights_dtype(self) -> torch.dtype:
        """The dtype the policy computes in: the rollout engine's weights and the saved model's."""
        return self.autocast_dtype or self.parameter_dtype

    def autocast(self, device: torch.device) -> AbstractContextManager[Any]:
        """Autocast to `autocast_dtype` on `device`'s type for the block (a no-op without one)."""
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)


def precision_of(model_cfg: Mapping[str, Any]) -> Precision:
    """The `Precision` that `model_cfg.precision` names (default `32-true`)."""
    name = model_cfg.get("precision", "32-true")
    if name not in PRECISIONS:
        raise ValueError(f"unknown model.precision {name!r}; expected one of "
                         f"{', '.join(PRECISIONS)}")
    spec = PRECISIONS[name]
    autocast = spec.autocast_dtype
    return Precision(getattr(torch, spec.parameter_dtype), autocast and getattr(torch, autocast))
