"""Atomic checkpoints of a GRPO run, and auto-resume from the latest one.

Layout under `<run_dir>/checkpoints/`:
  step_000009/model.safetensors   policy weights (shared tensors, e.g. tied embeddings, once)
  step_000009/trainer_state.pt    optimizer, lr schedule, RNG states, data-sampler position,
                                  step, elapsed-time offsets, wandb run id
  latest                          the name of the newest complete checkpoint, written last

A checkpoint is built under a temporary name and renamed into place, then `latest` is replaced
atomically, so a crash at any moment leaves the previous checkpoint usable.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model

from grpo.run_files import atomic_write_text

LATEST = "latest"


def rng_state() -> dict[str, Any]:
    """The RNG states of python, numpy, torch and CUDA."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class TrainerState:
    """Everything besides the weights that a resumed run needs."""

    step: int  # last completed GRPO step (0-based)
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    sampler: dict[str, Any]
    rng: dict[str, Any]
    elapsed_s: float  # wall-clock seconds of the run so far
    elapsed_no_eval_s: float  # the same without evaluation
    optimizer_steps: int
    health: dict[str, int]  # HealthMonitor streaks
    wandb_run_id: str | None


class CheckpointManager:
    """Saves, finds and prunes the checkpoints of one run directory."""

    def __init__(self, run_dir: Path, keep_last: int) -> None:
        self.dir = run_dir / "checkpoints"
        self.keep_last = max(int(keep_last), 1)

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        pointer = self.dir / LATEST
        if not pointer.exists():
            return None
        path = self.dir / pointer.read_text().strip()
        return path if (path / "trainer_state.pt").exists() else None

    def save(self, model: torch.nn.Module, state: TrainerState) -> Path:
        """Write a checkpoint of `model` and `state` atomically; prune old ones."""
        name = f"step_{state.step:06d}"
        final = self.dir / name
        tmp = self.dir / f".tmp_{name}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(state.__dict__, tmp / "trainer_state.pt")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        atomic_write_text(self.dir / LATEST, name + "\n")
        self._prune(keep=final)
        return final

    def load(self, path: Path, model: torch.nn.Module) -> TrainerState:
        """Load the weights of checkpoint `path` into `model`; return its trainer state."""
        load_model(model, str(path / "model.safetensors"), device=str(next(model.parameters()).device))
        payload = torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False)
        return TrainerState(**payload)

    def _prune(self, keep: Path) -> None:
        checkpoints = sorted(p for p in self.dir.glob("step_*") if p.is_dir())
        for old in checkpoints[: -self.keep_last]:
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)
