"""Optional wandb logging of a run: offline by default, online when the user asks for it.

Runs are grouped by sweep (`<experiment_name>/<sweep timestamp>`), named after their job, and
tagged with their overrides. Config keys that look like secrets never reach wandb.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password)", re.IGNORECASE)
MAX_TAG_CHARS = 64


def scrub_secrets(value: Any) -> Any:
    """A copy of a nested dict/list with the values of secret-looking keys replaced."""
    if isinstance(value, dict):
        return {k: "<redacted>" if SECRET_KEY.search(str(k)) else scrub_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_secrets(v) for v in value]
    return value


def run_overrides(run_dir: Path) -> list[str]:
    """The Hydra overrides of the run in `run_dir` (empty when it was not started by Hydra)."""
    path = run_dir / ".hydra" / "overrides.yaml"
    return list(yaml.safe_load(path.read_text()) or []) if path.exists() else []


class Tracker:
    """Logs step metrics to wandb when `logging.wandb_mode` is not `disabled`."""

    def __init__(self, cfg: DictConfig, run_dir: Path, run_id: str | None) -> None:
        self.run: Any = None
        self.run_id = run_id
        mode = cfg.logging.wandb_mode
        if mode == "disabled":
            return
        import wandb

        config = scrub_secrets(OmegaConf.to_container(cfg, resolve=True))
        self.run = wandb.init(
            project=cfg.logging.wandb_project, entity=cfg.logging.wandb_entity, mode=mode,
            dir=str(run_dir), id=run_id or wandb.sdk.lib.runid.generate_id(), resume="allow",
            group=f"{cfg.experiment_name}/{run_dir.parent.name}",
            name=f"{cfg.experiment_name}-{run_dir.parent.name}-{run_dir.name}",
            tags=[o[:MAX_TAG_CHARS] for o in run_overrides(run_dir)], config=config,
        )
        self.run_id = self.run.id

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Log one GRPO step's metrics."""
        if self.run is not None:
            self.run.log(metrics, step=step)

    def finish(self) -> None:
        """Close the wandb run (idempotent)."""
        if self.run is not None:
            self.run.finish()
            self.run = None
