"""hydra-submitit-launcher's SLURM launcher that shows the sweep while it runs and reports its end.

The sweep is still one job array submitted by submitit with the `submitit_slurm` launcher keys,
of the jobs a relaunch finds unfinished and not still queued or running (the others are followed,
:mod:`hydra_plugins.grpo_sweeps.relaunch`; none left: no array is submitted).
Instead of blocking on the first job's result (where a cancelled job surfaces as submitit's
`UncompletedJobError` traceback), it shows the live sweep monitor until every job is done and
ends with the sweep's summary (:mod:`hydra_plugins.grpo_sweeps.reporting`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf

from hydra_plugins.grpo_sweeps.relaunch import SLURM, Relaunch
from hydra_plugins.grpo_sweeps.reporting import SweepFollower
from hydra_plugins.grpo_sweeps.submitit_compat import launcher_call_args

log = logging.getLogger(__name__)
# launcher keys that configure the executor itself rather than each job
EXECUTOR_KEYS = ("submitit_folder", "max_num_timeout")


class ReportingSlurmLauncher(SlurmLauncher):
    """See the module docstring."""

    relaunch: Relaunch | None = None
    """The sweep's relaunch, set by the validating sweeper: with it a relaunch submits only what
    is unfinished (None: every job is submitted)."""

    def executor(self) -> Any:
        """submitit's SLURM executor with the launcher keys, as hydra-submitit-launcher sets it."""
        import submitit

        executor = submitit.AutoExecutor(
            cluster="slurm", folder=self.params["submitit_folder"],
            **{f"slurm_{k}": v for k, v in self.params.items() if k == "max_num_timeout"},
        )
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{
            key if key in shared else f"slurm_{key}": value
            for key, value in self.params.items() if key not in EXECUTOR_KEYS
        })
        return executor

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        """Submit the batch's jobs that a relaunch does not find finished or still queued or
        running (:mod:`hydra_plugins.grpo_sweeps.relaunch`) as one job array (none: no array),
        follow them and the earlier ones to their end, and return every job's result."""
        assert self.config is not None
        numbered = dict(enumerate(job_overrides, start=initial_job_idx))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        earlier = self.relaunch.earlier(sweep_dir, numbered, SLURM) if self.relaunch else {}
        submit = {num: overrides for num, overrides in numbered.items() if num not in earlier}
        follower = SweepFollower(sweep_dir, SLURM, numbered, earlier=earlier)
        if submit:
            log.info(f"SLURM sweep of {len(submit)} jobs (one job array)")
        with follower:
            if submit:
                jobs = self.executor().map_array(self, *zip(*[
                    launcher_call_args(overrides, num) for num, overrides in submit.items()
                ], strict=True))
                for num, job in zip(submit, jobs, strict=True):
                    follower.submitted(num, job)
            follower.wait()
        return follower.finish()
