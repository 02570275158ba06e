"""Runs a sweep's jobs on this machine: submitit's local executor behind a bounded pool.

submitit's LocalExecutor alone starts every job at once and hands each the same GPUs. This
launcher runs at most `max_parallel_jobs` at a time (by default as many as the machine's CPU
cores and GPUs hold), gives each running job its own GPUs through CUDA_VISIBLE_DEVICES, and starts
the next job when one ends (each run sets its torch threads from cluster.cpus_per_job). While the
jobs run it shows the live sweep monitor, and it ends with the sweep's summary
(:mod:`hydra_plugins.grpo_sweeps.reporting`). A relaunch runs only the jobs whose runs are not
finished, and follows (a slot each) those that a job of a killed earlier launcher still trains
(:mod:`hydra_plugins.grpo_sweeps.relaunch`).

Ctrl-C at the terminal signals the launcher and every job's processes. submitit's controller of a
job (the process that starts the job and waits for it) would end with a KeyboardInterrupt
traceback on the terminal and SIGKILL its job a second later, before the run could finish its
step and checkpoint. So each job is submitted with the terminal's signals blocked
(:data:`grpo.run.preemption.AT_TERMINAL`: Ctrl-C's SIGINT, and the SIGHUP of a terminal that
closes), a mask its controller and the job's process inherit: the controller never takes them,
and the job unblocks them first thing (:meth:`PooledLocalLauncher.__call__`), where one that came
while it started is delivered. A job whose process did not exist yet when the terminal sent its
signal (its controller was starting it) never had it: the launcher hands the signal it took itself
to each job's process (`interrupt_job`, once a process) while it waits for them: the same signal,
so that the run's status names what the user did. The run then stops after its GRPO step with a
checkpoint (`grpo.run.preemption`); the launcher says so and waits for it
(`reporting.SweepFollower.interrupted`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn

from analysis.outputs.monitor import INTERRUPTED
from grpo.run.preemption import AT_TERMINAL
from hydra_plugins.grpo_sweeps.relaunch import EarlierJob, Relaunch
from hydra_plugins.grpo_sweeps.reporting import SweepFollower
from hydra_plugins.grpo_sweeps.submitit_compat import BaseSubmititLauncher, submit_sweep_job

log = logging.getLogger(__name__)
POLL_S = 0.5


def visible_gpu_count() -> int:
    """GPUs this process may use (CUDA_VISIBLE_DEVICES, else what torch sees)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    import torch

    return torch.cuda.device_count()


def pool_size(gpus_per_job: int, cpus_per_job: int, max_parallel_jobs: int | None) -> int:
    """Jobs that fit on this machine at once."""
    fits = max(1, (os.cpu_count() or 1) // max(cpus_per_job, 1))
    if gpus_per_job > 0:
        gpus = visible_gpu_count()
        if gpus < gpus_per_job:
            raise RuntimeError(
                f"cluster.gpus_per_job={gpus_per_job} but this machine has {gpus} GPU(s); "
                "lower cluster.gpus_per_job or use cluster=slurm"
            )
        fits = min(fits, gpus // gpus_per_job)
    return fits if max_parallel_jobs is None else max(1, min(fits, max_parallel_jobs))


@contextmanager
def terminal_signals_blocked() -> Iterator[None]:
    """Block the terminal's signals (`AT_TERMINAL`) in this thread (a Ctrl-C or a closing
    terminal waits until the end of the block); a process started here inherits the block."""
    signal.pthread_sigmask(signal.SIG_BLOCK, AT_TERMINAL)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, AT_TERMINAL)


def job_processes(controller: int) -> list[int]:
    """The processes submitit's local controller (pid `controller`, the local job's id) runs its
    job in: its children (Linux's /proc); none where it has none or they cannot be listed."""
    try:
        return [int(pid) for pid in
                Path(f"/proc/{controller}/task/{controller}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def interrupt_job(job: Any, sig: signal.Signals, signalled: set[int]) -> None:
    """Send terminal signal `sig` to the processes of local submitit job `job` not in
    `signalled` (those that had it from here), adding them."""
    for pid in job_processes(int(job.job_id)):
        if pid not in signalled:
            signalled.add(pid)
            with suppress(ProcessLookupError):
                os.kill(pid, sig)


class PooledLocalLauncher(BaseSubmititLauncher):
    """See the module docstring."""

    _EXECUTOR = "local"
    relaunch: Relaunch | None = None
    """The sweep's relaunch, set by the validating sweeper: with it a relaunch submits only what
    is unfinished (None: every job is submitted)."""

    def __init__(
        self,
        gpus_per_job: int = 0,
        cpus_per_job: int = 1,
        max_parallel_jobs: int | None = None,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        self.gpus_per_job = int(gpus_per_job)
        self.cpus_per_job = int(cpus_per_job)
        self.max_parallel_jobs = max_parallel_jobs

    def __call__(self, *args: Any) -> JobReturn:
        """Run one job (in its own process; see `BaseSubmititLauncher.__call__`), with the
        terminal's signals unblocked first, SIGHUP taken as Ctrl-C: one that came while the job
        started, or before its run took them over (`grpo.run.preemption`), ends it with exit
        status `INTERRUPTED` (no run to checkpoint yet)."""
        try:
            signal.signal(signal.SIGHUP, signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, AT_TERMINAL)
            return super().__call__(*args)
        except KeyboardInterrupt:
            sys.exit(INTERRUPTED)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        import submitit

        assert self.config is not None
        slots = pool_size(self.gpus_per_job, self.cpus_per_job, self.max_parallel_jobs)
        gpu_sets = [
            tuple(range(i * self.gpus_per_job, (i + 1) * self.gpus_per_job)) for i in range(slots)
        ]
        executor = submitit.LocalExecutor(folder=self.params["submitit_folder"])
        numbered = dict(enumerate(job_overrides, start=initial_job_idx))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        earlier = self.relaunch.earlier(sweep_dir, numbered, "local") if self.relaunch else {}
        pending = [(num, overrides) for num, overrides in numbered.items() if num not in earlier]
        if pending:
            log.info(f"Local sweep of {len(pending)} jobs, {slots} at a time")
        signalled: set[int] = set()
        follower = SweepFollower(
            sweep_dir, "local", numbered, earlier=earlier,
            interrupt=lambda job, sig: job.interrupt(sig) if isinstance(job, EarlierJob)
            else interrupt_job(job, sig, signalled))
        running: dict[int, tuple[Any, tuple[int, ...]]] = {}
        with follower:
            while pending or running:
                # a followed job of an earlier launch holds a slot until it ends
                while pending and len(running) + sum(not j.done() for j in earlier.values()) < slots:
                    idx, overrides = pending.pop(0)
                    used = {g for _, held in running.values() for g in held}
                    gpus = next(s for s in gpu_sets if not used & set(s))
                    # its controller never takes a Ctrl-C or SIGHUP; one that comes meanwhile
                    # is delivered once the job is recorded (and the follower waits for it)
                    with terminal_signals_blocked():
                        job = submit_sweep_job(
                            executor, self, overrides, idx, gpus,
                            self.params.get("timeout_min", 10080))
                        running[idx] = (job, gpus)
                        follower.submitted(idx, job)
                time.sleep(POLL_S)
                follower.update()
                for idx in [i for i, (job, _) in running.items() if job.done()]:
                    running.pop(idx)
            follower.wait()  # the followed jobs of an earlier launch that still run
        return follower.finish()
