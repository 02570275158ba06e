"""Verified checkpoints of a GRPO run, resume with fallback, and the run's final model.

Layout under `<run_dir>/checkpoints/`:
  step_000009/model.safetensors          policy weights (shared tensors, e.g. tied embeddings, once)
  step_000009/trainer_state.json         step, optimizer, lr schedule, RNG states (python, numpy,
                                         torch CPU/CUDA), data-sampler position, health streaks,
                                         elapsed-time offsets, optimizer steps, wandb run id
  step_000009/trainer_state.safetensors  the tensors trainer_state.json refers to (grpo.run.state_files)
  step_000009/run_config.json            the resolved config it was trained with (grpo.run.run_config)
  step_000009/manifest.json              size and sha256 of the files above (grpo.run.manifest)
  latest                                 the name of the newest checkpoint, written after it

Nothing here unpickles: a crafted run directory cannot run code.

Writing: a checkpoint is built under a new directory `.tmp_step_N.<random>`, its files are flushed and its manifest written
last, it is renamed into place, and only then is `latest` replaced (atomically). Older
checkpoints are pruned to the newest `keep_last` intact ones; the one just written is always kept.

Resuming: `latest` must hold a bare checkpoint name (`step_N`) of a directory (not a link) in this
`checkpoints/`, else it is refused. The checkpoint it names must pass its manifest (every file
there, same size and sha256) and decode; otherwise the newest intact checkpoint is used and every
skipped one is logged with its reason. If checkpoints exist but none is usable, the run refuses to
start from scratch unless `checkpoint.allow_fresh_start=true` (then they are moved aside to
`checkpoints.unusable-<time>/`).

Final model: `final_model/` (Hugging Face format plus a manifest) is built under a new
directory `.final_model.<random>` and renamed into place; `final_model_problem` says whether it is whole.

Fault-injection hook (tests/test_faults.py): with `GRPO_TEST_KILL_AT=<step_N|final_model>/<point>`
in its environment the process SIGKILLs itself at that point of that write; the points are
`model_written`, `state_written`, `manifest_written`, `renamed`, `latest_written` of a checkpoint
and `written`, `renamed` of the final model. Unset, it does nothing.
"""

from __future__ import annotations

import copy
import logging
import os
import random
import secrets
import shutil
import signal
import tempfile
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from grpo.run.checkpoint_names import (
    CHECKPOINT_NAME,
    CHECKPOINTS,
    FINAL_MODEL,
    checkpoint_dirs,
    checkpoint_step,
)
from grpo.run.files import RunDirError, atomic_write_text, subdir
from grpo.run.manifest import fsync_dir, manifest_problem, write_manifest
from grpo.run.run_config import RUN_CONFIG
from grpo.run.state_files import StateFileError, load_state, save_state

log = logging.getLogger(__name__)

LATEST = "latest"
MODEL_FILE = "model.safetensors"
STATE_JSON = "trainer_state.json"
STATE_TENSORS = "trainer_state.safetensors"
CHECKPOINT_FILES = (MODEL_FILE, STATE_JSON, STATE_TENSORS)
LEGACY_PICKLE = "trainer_state.pt"
KILL_AT_ENV = "GRPO_TEST_KILL_AT"


class CheckpointError(RunDirError):
    """Checkpoints that cannot be written, or none usable to resume from."""


def _kill_point(target: str, point: str) -> None:
    """The fault-injection hook of the module docstring."""
    if os.environ.get(KILL_AT_ENV) == f"{target}/{point}":
        os.kill(os.getpid(), signal.SIGKILL)


def _discard(path: Path) -> None:
    """Remove directory (or link) `path` so that it disappears at once: rename, then delete."""
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        trash = path.with_name(f".del_{path.name}.{secrets.token_hex(4)}")
        path.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)


def _new_directory(parent: Path, prefix: str) -> Path:
    """A new directory `parent/<prefix><random>` (created, never an existing one or a link),
    readable by others as a checkpoint or model directory should be."""
    path = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    path.chmod(0o755)
    return path


def _discard_leftover(path: Path) -> None:
    """Remove a leftover temporary directory (a link planted in its place: the link only)."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


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

    step: int  # GRPO steps done (the number of the last completed step; steps count from 1)
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
    """Saves, verifies, finds and prunes the checkpoints of one run directory."""

    def __init__(self, run_dir: Path, keep_last: int, allow_fresh_start: bool = False) -> None:
        self.run_dir = run_dir
        self.dir = run_dir / CHECKPOINTS
        self.keep_last = max(int(keep_last), 1)
        self.allow_fresh_start = bool(allow_fresh_start)

    # ----------------------------------------------------------------------------- writing
    def save(self, model: torch.nn.Module, run_config: str, state: TrainerState) -> Path:
        """Write a checkpoint of `model`, the run's config (`run_config`, the text of
        grpo.run.run_config's RUN_CONFIG file) and `state` (see the module docstring); prune old
        ones."""
        name = f"step_{state.step:06d}"
        final = self.dir / name
        try:
            previous = self._pointer_text()
        except OSError:
            previous = None
        try:
            tmp = _new_directory(subdir(self.run_dir, "checkpoints"), f".tmp_{name}.")
            save_model(model, str(tmp / MODEL_FILE))
            _kill_point(name, "model_written")
            save_state({f.name: getattr(state, f.name) for f in fields(state)},
                       tmp / STATE_JSON, tmp / STATE_TENSORS)
            (tmp / RUN_CONFIG).write_text(run_config)
            _kill_point(name, "state_written")
            write_manifest(tmp)
            _kill_point(name, "manifest_written")
            _discard(final)
            tmp.rename(final)
            fsync_dir(self.dir)
            _kill_point(name, "renamed")
            atomic_write_text(self.dir / LATEST, name + "\n")
            _kill_point(name, "latest_written")
        except (OSError, SafetensorError) as err:  # SafetensorError: e.g. the disk is full
            kept = f"checkpoint {previous} is untouched" if previous else "no earlier checkpoint exists"
            raise CheckpointError(
                f"cannot write checkpoint {name} in {self.dir}: {err}. The run stopped after "
                f"logging step {state.step}; {kept}. Make the directory writable (or free space) "
                "and start the run again to resume."
            ) from err
        self._prune(keep=final)
        return final

    def _prune(self, keep: Path) -> None:
        """Keep the newest `keep_last` intact checkpoints up to `keep` (always kept itself);
        remove older and damaged ones; later ones (of a run segment abandoned by a fallback) stay."""
        kept = 0
        for path in checkpoint_dirs(self.run_dir):
            if checkpoint_step(path) > checkpoint_step(keep):
                continue
            intact = path == keep or manifest_problem(path, CHECKPOINT_FILES, hashes=False) is None
            if intact and kept < self.keep_last:
                kept += 1
            else:
                _discard(path)
        for leftover in [*self.dir.glob(".del_*"), *self.dir.glob(".tmp_*")]:
            _discard_leftover(leftover)

    # ----------------------------------------------------------------------------- resuming
    def _pointer_text(self) -> str | None:
        """The content of `latest` (stripped, at most 200 characters), or None without one."""
        try:
            with (self.dir / LATEST).open("rb") as f:
                return f.read(200).decode("utf-8", errors="replace").strip()
        except FileNotFoundError:
            return None

    def _pointed(self) -> tuple[Path | None, str | None]:
        """The checkpoint `latest` names, or None and why `latest` is refused (None: absent)."""
        pointer = self.dir / LATEST
        if pointer.is_symlink():
            return None, f"{LATEST} is a symbolic link (to {os.readlink(pointer)}); refused"
        try:
            text = self._pointer_text()
        except OSError as err:
            return None, f"{LATEST} is unreadable ({err})"
        if text is None:
            return None, None if not checkpoint_dirs(self.run_dir) else f"{LATEST} is missing"
        if not CHECKPOINT_NAME.fullmatch(text):
            return None, (f"{LATEST} holds {text!r}, not the name of a checkpoint in "
                          f"{self.dir} (step_NNNNNN); refused")
        path = self.dir / text
        if path.is_symlink() or not path.is_dir():
            what = "a symbolic link" if path.is_symlink() else "missing"
            return None, f"{LATEST} names {text}, which is {what}; refused"
        return path, None

    def _read_state(self, path: Path) -> TrainerState | str:
        """The verified trainer state of checkpoint `path`, or why it cannot be used."""
        problem = manifest_problem(path, CHECKPOINT_FILES)
        if problem is not None:
            if (path / LEGACY_PICKLE).exists() and not (path / "manifest.json").exists():
                problem = (f"it is in the pickle format of earlier versions ({LEGACY_PICKLE}), "
                           "which is never loaded (it could run code)")
            return problem
        try:
            state = TrainerState(**load_state(path / STATE_JSON, path / STATE_TENSORS))
        except (StateFileError, TypeError) as err:
            return f"{STATE_JSON} does not decode into a trainer state ({err})"
        if state.step != checkpoint_step(path):
            return f"{STATE_JSON} holds step {state.step!r}, not {checkpoint_step(path)}"
        return state

    def find(self) -> tuple[Path, TrainerState] | None:
        """The checkpoint to resume from (verified) and its trainer state; None when the run
        starts from step 0. Needs no model, so a refusal comes before the model loads. See the
        module docstring for the rules."""
        pointed, refused = self._pointed()
        skipped = [refused] if refused else []
        candidates = ([pointed] if pointed else []) + [p for p in checkpoint_dirs(self.run_dir) if p != pointed]
        for path in candidates:
            state = self._read_state(path)
            if isinstance(state, str):
                skipped.append(f"{path.name}: {state}")
                continue
            if skipped:
                log.warning(f"resuming from {path} (the newest intact checkpoint); skipped:\n"
                            + "\n".join(f"  - {s}" for s in skipped))
            return path, state
        if skipped:
            self._fresh_start(skipped)
        return None

    @staticmethod
    def load_weights(path: Path, model: torch.nn.Module) -> None:
        """Load the weights of checkpoint `path` (found by `find`) into `model`."""
        try:
            load_model(model, str(path / MODEL_FILE), device=str(next(model.parameters()).device))
        except (RuntimeError, SafetensorError) as err:
            raise CheckpointError(
                f"checkpoint {path} is intact but does not fit the configured model ({err}); "
                "resume it with the model config it was trained with"
            ) from err

    def _fresh_start(self, skipped: list[str]) -> None:
        """No checkpoint is usable: refuse, or with allow_fresh_start move them aside."""
        reasons = "\n".join(f"  - {s}" for s in skipped)
        if not self.allow_fresh_start:
            raise CheckpointError(
                f"refusing to start {self.run_dir} from scratch: it has checkpoints, but none is "
                f"usable:\n{reasons}\nRestore one of them to resume, or set "
                "checkpoint.allow_fresh_start=true to start over from step 0 (the checkpoints are "
                "then moved to checkpoints.unusable-<time>/)."
            )
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        aside = self.run_dir / f"checkpoints.unusable-{stamp}"
        self.dir.rename(aside)
        log.warning(f"no usable checkpoint in {self.run_dir}:\n{reasons}\n"
                    f"checkpoint.allow_fresh_start=true: moved them to {aside}, starting from step 0")
        return None


def write_final_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, run_dir: Path,
                      dtype: torch.dtype) -> Path:
    """Write `run_dir/final_model/` (Hugging Face format and a manifest) atomically, its floating
    point weights in `dtype` (the dtype a user loads; the model itself is left as it is)."""
    final = run_dir / FINAL_MODEL
    for leftover in run_dir.glob(f".{FINAL_MODEL}.*"):
        _discard_leftover(leftover)
    tmp = _new_directory(run_dir, f".{FINAL_MODEL}.")
    state = {name: tensor.to(dtype) if tensor.is_floating_point() else tensor
             for name, tensor in model.state_dict().items()}
    model.save_pretrained(tmp, state_dict=state)
    config = copy.deepcopy(model.config)  # its dtype as saved, not the parameters' own
    config.dtype = dtype
    config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_manifest(tmp)
    _kill_point(FINAL_MODEL, "written")
    _discard(final)
    tmp.rename(final)
    fsync_dir(run_dir)
    _kill_point(FINAL_MODEL, "renamed")
    return final


def final_model_problem(run_dir: Path) -> str | None:
    """None when `run_dir/final_model/` is whole (its manifest checks out), else what is wrong."""
    problem = manifest_problem(run_dir / FINAL_MODEL, ("config.json",))
    return None if problem is None else f"{FINAL_MODEL}/: {problem}"
