"""Optional wandb logging of a run: offline by default, online when the user asks for it.

Runs are grouped by sweep (`<experiment_name>/<sweep timestamp>`), named after their job, and
tagged with their overrides. Config keys that look like secrets never reach wandb.

wandb writes through its service process (wandb-core), which SLURM signals with the rest of the
job: a SIGTERM (scancel, requeue) kills it, and it dies holding the steps it had not yet written
(up to a 32 KiB block). A wandb call that fails therefore never reaches the trainer: the tracker
starts a new service, resumes the same wandb run id and sends it again every step of this run
segment (the process's lifetime); `finish` also stops the service, so that no later signal finds
it alive and no exit hook tries to talk to a dead one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from grpo.run.files import RunFileError, read_bytes, subdir

log = logging.getLogger(__name__)
SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password)", re.IGNORECASE)
MAX_TAG_CHARS = 64
MAX_OVERRIDES_BYTES = 1 << 20  # Hydra's overrides.yaml is a few hundred bytes


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
    if not path.exists():
        return []
    try:
        overrides = yaml.safe_load(read_bytes(path, MAX_OVERRIDES_BYTES))
    except (RunFileError, yaml.YAMLError, RecursionError) as err:
        log.warning(f"{path} is unreadable ({str(err).splitlines()[0][:200]}); its overrides are unknown")
        return []
    return [o for o in overrides if isinstance(o, str)] if isinstance(overrides, list) else []


class Tracker:
    """Logs step metrics to wandb when `logging.wandb_mode` is not `disabled`; see the module docstring."""

    def __init__(self, cfg: DictConfig, run_dir: Path, run_id: str | None) -> None:
        self.run: Any = None
        self.run_id = run_id
        self._segment: list[tuple[int, dict[str, float]]] = []  # (step, metrics) logged by this process
        mode = cfg.logging.wandb_mode
        if mode == "disabled":
            return
        import wandb

        subdir(run_dir, "wandb")  # never a link planted to write elsewhere
        config = scrub_secrets(OmegaConf.to_container(cfg, resolve=True))
        self._init_args = dict(
            project=cfg.logging.wandb_project, entity=cfg.logging.wandb_entity, mode=mode,
            dir=str(run_dir), id=run_id, resume="allow",
            group=f"{cfg.experiment_name}/{run_dir.parent.name}",
            name=f"{cfg.experiment_name}-{run_dir.parent.name}-{run_dir.name}",
            tags=[o[:MAX_TAG_CHARS] for o in run_overrides(run_dir)], config=config,
        )
        logging.getLogger("asyncio").addFilter(_quiet_lost_socket)
        self.run = wandb.init(**self._init_args)
        self.run_id = self._init_args["id"] = self.run.id

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Log one GRPO step's metrics."""
        if self.run is None:
            return
        self._segment.append((step, metrics))
        try:
            self.run.log(metrics, step=step)
        except Exception as err:
            self._restart(err)  # the replay includes this step

    def finish(self) -> None:
        """Close the wandb run and stop its service (idempotent)."""
        if self.run is None:
            return
        try:
            self.run.finish()
        except Exception as err:
            self._restart(err)
            if self.run is not None:
                self._give_up_on_error(lambda: self.run.finish())
        self.run = None
        _stop_service()
        logging.getLogger("asyncio").removeFilter(_quiet_lost_socket)

    def _restart(self, err: Exception) -> None:
        """A new service and the same run id, then every step of this segment again."""
        import wandb

        log.warning(f"wandb's service process is gone ({type(err).__name__}: {err}); restarting it and "
                    f"sending the {len(self._segment)} steps of this segment to wandb run {self.run_id} again")
        _stop_service()
        self.run = None

        def replay() -> None:
            self.run = wandb.init(**self._init_args)
            for step, metrics in self._segment:
                if step >= self.run.starting_step:  # an online run resumed by the server has the earlier ones
                    self.run.log(metrics, step=step)

        self._give_up_on_error(replay)

    def _give_up_on_error(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as err:
            log.warning(f"wandb failed again ({type(err).__name__}: {err}); the rest of this run "
                        "segment is only in metrics.jsonl")
            self.run = None
            _stop_service()


def _stop_service() -> None:
    """Stop this process's wandb service; a dead one (killed by a signal) is only forgotten."""
    import wandb

    try:
        wandb.teardown()
    except Exception:  # the connection to a killed service: nothing left to stop
        pass


def _quiet_lost_socket(record: logging.LogRecord) -> bool:
    """asyncio's repeated warning about writes to the socket of a killed wandb service."""
    return record.getMessage() != "socket.send() raised exception."
