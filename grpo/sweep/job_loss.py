"""The loss a job runs: GRPO-Clip for an off-policy job that names no loss.

CS336 runs the off-policy sweep with GRPO-Clip: a loss that ignores the probability ratio
pi / pi_old trains every optimizer step after the first on stale rollouts as if they were
on-policy. So a job whose batch plan is off-policy (`grpo.training.batch_plan.BatchPlan.off_policy`:
more than one optimizer step per rollout batch) and whose `loss` config group nobody chose (no
`loss=` override or swept value, no preset with `override /loss: ...`) gets
`loss=OFF_POLICY_LOSS` appended to its overrides. A named loss always wins (a ratio-free one
off-policy gets `grpo.config.validation`'s warning); on-policy jobs keep the root default.

:func:`compose_job` is the one place this rule lives: the validating sweeper composes every job
of a sweep through it (validation, dry-run listing and the overrides it launches), once a job:
the default loss's node of the composed config is swapped for `OFF_POLICY_LOSS`'s yaml, with
Hydra's record of the choice, where that is what composing again would give (nothing but the
loss's own yaml wrote into `loss`); and
:func:`single_run_arguments` applies it to a single run's command line (composed once by
:func:`compose_single_run`) before Hydra composes it, so what the dry run shows is what runs and each run's `.hydra/` records the loss it used.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from hydra.core.config_loader import ConfigLoader
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from grpo.sweep.hydra_compat import (
    SweepComposer,
    command_line,
    group_chooser,
    group_option,
    group_overrides,
    overrides_dirname,
)
from grpo.training.batch_plan import BatchPlan

LOSS_GROUP = "loss"
"""The config group of the policy-gradient loss (conf/loss/)."""
OFF_POLICY_LOSS = "grpo_clip"
"""The loss of an off-policy job that names none."""


@dataclass(frozen=True)
class ComposedJob:
    """One job: its overrides (with the off-policy default added where it applies), its composed
    config, and whether the loss is that default."""

    overrides: tuple[str, ...]
    cfg: DictConfig
    loss_defaulted: bool

    def describe_loss(self) -> str:
        """`loss=grpo_clip (off-policy default)` or `loss=<the named or root-default loss>`."""
        return f"loss={self.cfg.loss.name}" + (" (off-policy default)" if self.loss_defaulted else "")

    def choices_and_config(self) -> tuple[dict[str, str], dict[str, Any]]:
        """Its config group choices and its config as plain data (Hydra's node left out), as a
        run's `.hydra/` record holds them: what names a promoted config
        (`analysis.names.config_names.job_labels`)."""
        config = OmegaConf.to_container(self.cfg, resolve=False)
        config.pop("hydra", None)
        choices = OmegaConf.to_container(self.cfg.hydra.runtime.choices)
        return {str(k): str(v) for k, v in choices.items()}, config


def compose_job(
    loader: ConfigLoader, config_name: str, overrides: Sequence[str], base: Sequence[str] = (),
    composer: SweepComposer | None = None,
) -> ComposedJob:
    """Compose `config_name` with `base` (e.g. a sweep's `hydra.*` overrides, not returned) and
    the job's `overrides`, adding `loss=OFF_POLICY_LOSS` when the module's rule applies (an
    impossible batch plan adds nothing: validation reports it). `composer`: the sweep's
    `SweepComposer` of `loader` (the same configs, composed once for the jobs that share their
    config group choices); without it, Hydra composes the job."""

    def load(job: Sequence[str]) -> DictConfig:
        if composer is not None:
            return composer.compose(config_name, [*base, *job])
        return loader.load_configuration(config_name, [*base, *job], RunMode.RUN)

    option = composer.group_option if composer is not None else partial(group_option, loader)

    cfg = load(overrides)
    plan = BatchPlan.from_config(cfg)
    if plan.errors() or not plan.off_policy:
        return ComposedJob(tuple(overrides), cfg, False)
    if _loss_chooser(loader, config_name, group_overrides(loader, [*base, *overrides])) is not None:
        return ComposedJob(tuple(overrides), cfg, False)
    job = (*overrides, f"{LOSS_GROUP}={OFF_POLICY_LOSS}")
    if not _swap_default_loss(option, cfg, job):
        cfg = load(job)
    return ComposedJob(job, cfg, True)


@lru_cache(maxsize=64)
def _loss_chooser(loader: ConfigLoader, config_name: str, groups: tuple[str, ...]) -> str | None:
    """`group_chooser` of the loss group, once for each set of group overrides `groups` (the jobs
    of a sweep that differ only in values share one defaults list)."""
    return group_chooser(loader, config_name, list(groups), LOSS_GROUP)


def _swap_default_loss(option: Callable[[str, str], DictConfig | None], cfg: DictConfig,
                       job: Sequence[str]) -> bool:
    """Give `cfg` (composed with the root's default loss) `OFF_POLICY_LOSS` in place, as
    composing it with the job's overrides `job` (the choice last) would: its `loss` node and
    Hydra's record of the choice (`hydra.runtime.choices`), of the job's overrides
    (`hydra.overrides.task`) and of their directory name (`hydra.job.override_dirname`). False,
    leaving `cfg` as it was, where the `loss` node is not exactly the default option's yaml
    (something else wrote into it). `option(group, name)`: `hydra_compat.group_option`'s
    config of that option, read only."""
    default = cfg.hydra.runtime.choices.get(LOSS_GROUP)
    was = option(LOSS_GROUP, str(default))
    new = option(LOSS_GROUP, OFF_POLICY_LOSS)
    if was is None or new is None or cfg[LOSS_GROUP] != was:
        return False
    with open_dict(cfg):
        cfg[LOSS_GROUP] = new
        cfg.hydra.runtime.choices[LOSS_GROUP] = OFF_POLICY_LOSS
        cfg.hydra.overrides.task.append(job[-1])
        cfg.hydra.job.override_dirname = overrides_dirname(cfg, job)
    return True


def compose_single_run(argv: Sequence[str], config_dir: Path, config_name: str) -> ComposedJob | None:
    """A single run's command line (not `-m`) composed by `compose_job` (Hydra's config included);
    None for `-m`, help, or arguments Hydra cannot compose (left for Hydra to report)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    args = command_line(argv)
    if args.multirun or args.help or args.hydra_help or args.shell_completion or args.config_dir:
        return None
    with initialize_config_dir(config_dir=str(Path(config_dir).absolute()), version_base="1.3"):
        try:
            return compose_job(GlobalHydra.instance().config_loader(),
                               args.config_name or config_name, args.overrides)
        except (HydraException, OmegaConfBaseException, ValueError):
            return None


def single_run_arguments(argv: Sequence[str], job: ComposedJob | None) -> list[str]:
    """A single run's command line with the off-policy default loss added where the rule
    applies to its composition `job` (`compose_single_run`), saying so on stderr."""
    if job is None or not job.loss_defaulted:
        return list(argv)
    plan = BatchPlan.from_config(job.cfg)
    print(f"{job.describe_loss()}: {plan.optimizer_steps_per_grpo_step} optimizer steps per "
          f"rollout batch and no loss named (name one, e.g. loss=reinforce_with_baseline, to "
          "run another)", file=sys.stderr)
    return [*argv, job.overrides[-1]]
