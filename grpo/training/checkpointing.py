"""The trainer's side of a run's checkpoints (grpo.run.checkpoint writes and reads the files):
whether a run may resume from its newest checkpoint (`check_resume_point`), what a resume
loads into the learner, the prompt sampler and the health monitor (`restore`), and the
`TrainerState` a checkpoint saves of them (`trainer_state`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from grpo.data.datasets import PromptSampler
from grpo.run.checkpoint import CheckpointManager, TrainerState, rng_state, set_rng_state
from grpo.run.files import MetricsLog, RunDirError
from grpo.run.health import HealthMonitor
from grpo.run.run_config import check_resume
from grpo.training.learner import Learner

log = logging.getLogger(__name__)


def check_resume_point(cfg: DictConfig, run_dir: Path, checkpoint: Path, state: TrainerState) -> None:
    """Refuse a resume whose config changes the trained curve (grpo.run.run_config), or
    whose metrics.jsonl lost steps the checkpoint trained (unless
    checkpoint.allow_metrics_gap); both before anything is changed."""
    changed = check_resume(cfg, run_dir, checkpoint, state.step)
    if changed:
        log.warning(f"resuming {run_dir} with changed keys (recorded in config_changes.jsonl): "
                    + ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changed.items()))
    missing = MetricsLog(run_dir).steps_missing(state.step)
    if missing and not cfg.checkpoint.allow_metrics_gap:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise RunDirError(
            f"{run_dir}/metrics.jsonl has no record of {len(missing)} of the steps 0-"
            f"{state.step} that checkpoint {checkpoint.name} trained (steps {shown}): the "
            "curve would have a gap. Restore metrics.jsonl (e.g. from a backup), or set "
            "checkpoint.allow_metrics_gap=true to resume with the gap")
    if missing:
        log.warning(f"checkpoint.allow_metrics_gap=true: resuming with {len(missing)} steps "
                    "missing from metrics.jsonl")


def restore(checkpoints: CheckpointManager, checkpoint: Path, state: TrainerState, learner: Learner,
            sampler: PromptSampler, health: HealthMonitor) -> None:
    """Load `checkpoint`'s weights and `state` (optimizer, schedule, data order and retired
    prompts, health streaks, RNG states) into the run's parts; the learner starts after
    `state.step`."""
    checkpoints.load_weights(checkpoint, learner.policy)
    learner.optimizer.load_state_dict(state.optimizer)
    learner.scheduler.load_state_dict(state.scheduler)
    sampler.load_state_dict(state.sampler)
    health.load_state_dict(state.health)
    set_rng_state(state.rng)
    learner.start_step = state.step
    learner.optimizer_steps = state.optimizer_steps


def trainer_state(step: int, learner: Learner, sampler_state: dict[str, Any], health: HealthMonitor,
                  elapsed_s: float, elapsed_no_eval_s: float, wandb_run_id: str | None) -> TrainerState:
    """What the checkpoint of GRPO step `step` saves beside the weights: `restore`'s state,
    with the prompt sampler's `sampler_state` (its retired prompts included) and the run's
    wall-clock so far (seconds)."""
    return TrainerState(
        step=step, optimizer=learner.optimizer.state_dict(), scheduler=learner.scheduler.state_dict(),
        sampler=sampler_state, rng=rng_state(), elapsed_s=elapsed_s, elapsed_no_eval_s=elapsed_no_eval_s,
        optimizer_steps=learner.optimizer_steps, health=health.state_dict(), wandb_run_id=wandb_run_id,
    )
