"""Where a run's checkpoints are and how they are named: `<run>/checkpoints/step_NNNNNN/`.

Torch-free, so that readers of run directories (analysis) find them as the trainer's checkpoint
manager (grpo.run.checkpoint) does.
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKPOINTS = "checkpoints"
FINAL_MODEL = "final_model"
"""A run's final model (Hugging Face format, with a manifest): `<run>/final_model/`."""
CHECKPOINT_NAME = re.compile(r"step_(\d{6,})")


def checkpoint_step(path: Path) -> int:
    """The GRPO step of checkpoint directory `path` (`step_000009` -> 9)."""
    return int(path.name[len("step_"):])


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Entries of `<run_dir>/checkpoints` named like checkpoints (whatever they are), newest first."""
    directory = run_dir / CHECKPOINTS
    if not directory.is_dir():
        return []
    paths = [p for p in directory.iterdir() if CHECKPOINT_NAME.fullmatch(p.name)]
    return sorted(paths, key=checkpoint_step, reverse=True)
