"""What the pooled local launcher relies on in submitit and hydra-submitit-launcher beyond their
documented use, in one place:

- hydra-submitit-launcher's `BaseSubmititLauncher` (hydra-submitit-launcher 1.2) is itself the
  function a job runs, called as `launcher(sweep_overrides, job_dir_key, job_num, job_id,
  singleton_state)`;
- submitit's `LocalExecutor.update_parameters` takes `visible_gpus`, the GPU indices a job sees
  (submitit >= 1.5). It ignores keys it does not know, so a rename would silently hand every job
  the same GPUs: tests/test_dependency_adapters.py runs a real local job and checks what it sees;
- a submitit job's `_results_timeout_s` (submitit 1.5: 15 s): how long `job.exception()` and
  `job.result()` wait for a result file that is not there yet, for a shared filesystem's lag. A
  local job writes its result before its process ends, and one that ends without it (a run
  cancelled by Ctrl-C or a closed terminal exits, a SIGKILLed one) never writes one: each such job
  held the summary 15 s after it ended. `submit_sweep_job` sets it to 0 on the local jobs.

A change in any of them raises `SubmititInternalsMoved`, naming the package and its version.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Sequence
from typing import Any

from hydra.core.singleton import Singleton

# the parameters of BaseSubmititLauncher.__call__, which `submit_sweep_job` passes in this order
LAUNCHER_CALL = ("self", "sweep_overrides", "job_dir_key", "job_num", "job_id", "singleton_state")


class SubmititInternalsMoved(RuntimeError):
    """A submitit or hydra-submitit-launcher internal this module adapts is gone or changed."""

    def __init__(self, package: str, what: str, error: Exception | str) -> None:
        super().__init__(
            f"{package} {importlib.metadata.version(package)}: {what} moved or changed ({error}); "
            "hydra_plugins/grpo_sweeps/submitit_compat.py is written for submitit 1.5 and "
            "hydra-submitit-launcher 1.2 and needs updating"
        )


try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
except ImportError as err:
    raise SubmititInternalsMoved(
        "hydra-submitit-launcher", "hydra_plugins.hydra_submitit_launcher.submitit_launcher", err
    ) from err

__all__ = [
    "RESULTS_TIMEOUT", "BaseSubmititLauncher", "SubmititInternalsMoved", "check_launcher_call",
    "launcher_call_args", "submit_sweep_job",
]

# submitit.Job's wait for a missing result file (see the module docstring)
RESULTS_TIMEOUT = "_results_timeout_s"


def check_launcher_call() -> None:
    """Raise SubmititInternalsMoved unless `BaseSubmititLauncher.__call__` takes the parameters
    `submit_sweep_job` passes (LAUNCHER_CALL)."""
    names = tuple(inspect.signature(BaseSubmititLauncher.__call__).parameters)
    if names != LAUNCHER_CALL:
        raise SubmititInternalsMoved(
            "hydra-submitit-launcher", "BaseSubmititLauncher.__call__",
            f"parameters {names}, expected {LAUNCHER_CALL}",
        )


def submit_sweep_job(
    executor: Any,
    launcher: BaseSubmititLauncher,
    overrides: Sequence[str],
    job_num: int,
    gpus: tuple[int, ...],
    timeout_min: float,
) -> Any:
    """Submit Hydra job `job_num` of a sweep (its `overrides`) to a `submitit.LocalExecutor`; it
    sees exactly the GPUs `gpus` (CUDA_VISIBLE_DEVICES) and is killed after `timeout_min` minutes.
    Returns the submitit job, which, once ended, reports a missing result at once (no wait for
    the file: see the module docstring)."""
    import submitit

    if not isinstance(getattr(submitit.Job, RESULTS_TIMEOUT, None), int | float):
        raise SubmititInternalsMoved("submitit", f"Job.{RESULTS_TIMEOUT}", "no such number")
    executor.update_parameters(timeout_min=timeout_min, gpus_per_node=len(gpus), visible_gpus=gpus)
    job = executor.submit(launcher, *launcher_call_args(overrides, job_num))
    setattr(job, RESULTS_TIMEOUT, 0)
    return job


def launcher_call_args(overrides: Sequence[str], job_num: int) -> tuple[Any, ...]:
    """The arguments after `self` of `BaseSubmititLauncher.__call__` for Hydra job `job_num` of a
    sweep (its `overrides`), as hydra-submitit-launcher passes them; checks the signature first."""
    check_launcher_call()
    return (list(overrides), "hydra.sweep.dir", job_num, f"job_id_for_{job_num}",
            Singleton.get_state())
