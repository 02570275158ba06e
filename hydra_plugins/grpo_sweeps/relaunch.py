"""What a launch finds of earlier launches in its sweep directory, decided once per launch.

Launching a sweep again (the same command, the same `hydra.sweep.dir`) submits only what is
unfinished. Before submitting, each job's run directory (`<sweep>/<job num>`) is read
(:func:`plan_relaunch`):

- a run that is over for the config the job launches (`grpo.run.finished.run_over`: completed
  to its `n_grpo_steps`, pruned while the sweep prunes, collapsed, diverged) is **finished**: not
  submitted, in the summary as it is;
- a job of an earlier launch that is still pending or running is **followed**, not submitted
  again: on SLURM the job id `<sweep>/jobs.json` records for it, while the scheduler
  (`grpo.run.slurm.slurm_states`) says it is queued or running; on either launcher a run whose
  lock (`grpo.run.lock.holder`) another process holds (a job of a launcher that was killed; the
  lock, not a recorded pid, says the run is being trained); the sweeper refuses a relaunch whose
  config differs from what a followed run trains (`ValidatingSweeper._followed_refusal`). Where
  SLURM cannot be asked about the recorded jobs, nothing is submitted (`RunDirError`: one would be
  a second job for a queued run);
- every other job is **submitted**.

One :class:`RelaunchPlan`, made by the validating sweeper when the sweep starts, gives the dry
run's line and the launch's ("N to submit, M still queued or running (followed), K finished (not
submitted)") and what the launcher does (:class:`Relaunch`; a race's later waves, planned after
the start, are planned as they are launched). The launcher follows each
finished or followed job as it follows the jobs it submits, through :class:`EarlierJob` (submitit's
`done()`, `state`, `exception()`, `results()`, `paths.stderr`, `job_id`), until it ends; its
Hydra job return is built from its `status.json` (nothing of the run directory or submitit's
folder is unpickled).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from hydra.core.utils import JobReturn, JobStatus

from analysis.readers.jobs import Job, read_jobs
from grpo.run.files import RunDirError
from grpo.run.finished import Launch, read_run_status, run_over
from grpo.run.lock import holder
from grpo.run.slurm import slurm_states, state_word, still_held

SLURM = "slurm"
"""The launcher kind whose jobs are SLURM's (`SweepFollower`'s `launcher`); any other is local."""
SLURM_POLL_S = 2.0
"""Seconds for which the scheduler's word on the followed SLURM jobs is reused (one query for all)."""


def launcher_kind(launcher: object) -> str:
    """`SLURM` for a launcher of SLURM jobs (hydra-submitit-launcher's `_EXECUTOR`), else
    ``local``."""
    return SLURM if getattr(launcher, "_EXECUTOR", None) == SLURM else "local"


@dataclass(frozen=True)
class RelaunchPlan:
    """What a launch does with each job of a batch: `submit` (job numbers), `follow` (job number
    -> the earlier job followed: its SLURM id, or the holder of the run's lock), `finished` (job
    number -> the status of a run that is over); `earlier`: the sweep directory holds runs or
    jobs of an earlier launch (the plan is said only then)."""

    submit: tuple[int, ...]
    follow: dict[int, str]
    finished: dict[int, str]
    earlier: bool

    def line(self) -> str:
        """``relaunch: 1 to submit, 2 still queued or running (followed), 3 finished (not
        submitted)``."""
        return (f"relaunch: {len(self.submit)} to submit, {len(self.follow)} still queued or "
                f"running (followed), {len(self.finished)} finished (not submitted)")


def plan_relaunch(sweep_dir: Path, launches: Mapping[int, Launch], launcher: str) -> RelaunchPlan:
    """The plan of the jobs `launches` (job number -> the launch of its config) into `sweep_dir`
    by a `launcher` (`SLURM`, else local): see the module docstring. Reads only; SLURM is asked
    once for every recorded job that is not finished."""
    finished: dict[int, str] = {}
    for num, launch in launches.items():
        over = run_over(sweep_dir / str(num), launch)
        if over is not None:
            finished[num] = over.name
    open_jobs = [num for num in launches if num not in finished]
    follow: dict[int, str] = {}
    recorded = read_jobs(sweep_dir)
    if launcher == SLURM:
        ids = {num: job.job_id for num in open_jobs
               if recorded is not None and recorded.launcher == SLURM
               and (job := recorded.jobs.get(num)) is not None and job.job_id}
        states = slurm_states(ids) if ids else {}
        if ids and not states:
            raise RunDirError(
                f"SLURM cannot be asked (sacct, squeue) about the jobs {', '.join(sorted(ids.values()))} "
                f"that an earlier launch of {sweep_dir} submitted: a job submitted now could be a "
                "second one for a run still queued; nothing was submitted; launch again once "
                "squeue answers")
        follow = {num: ids[num] for num, state in states.items() if still_held(state)}
    # a run whose lock another process holds is being trained (a job of another launch, SLURM's
    # or this machine's, whatever jobs.json recorded)
    follow |= {num: found.text for num in open_jobs
               if num not in follow and (found := holder(sweep_dir / str(num))) is not None}
    earlier = recorded is not None or any((sweep_dir / str(num)).exists() for num in launches)
    return RelaunchPlan(tuple(num for num in open_jobs if num not in follow), follow, finished,
                        earlier)


class EarlierJob:
    """A job of an earlier launch (finished, or followed until it ends), with what the sweep's
    follower reads of submitit's jobs: `job_id` and `paths.stderr` (as `jobs.json` recorded
    them), `done()`, `state`, `exception()` (None: the run's status says how it ended) and
    `results()` (its Hydra job return, from `status.json`). `running()` says whether the job
    still runs (None: it is finished)."""

    def __init__(self, run_dir: Path, overrides: Sequence[str], recorded: Job | None,
                 running: Callable[[], bool] | None = None) -> None:
        self.run_dir = run_dir
        self.overrides = list(overrides)
        self.job_id = recorded.job_id if recorded is not None else None
        self.paths = SimpleNamespace(stderr=recorded.log if recorded is not None else None)
        self._running = running
        self._interrupted = False

    def done(self) -> bool:
        """Whether the job has ended."""
        return self._running is None or not self._running()

    @property
    def state(self) -> str:
        """``RUNNING`` while it runs, else ``FINISHED`` (a local job's states, as submitit's)."""
        return "FINISHED" if self.done() else "RUNNING"

    def exception(self) -> None:
        """None: how the run ended is its status's to say (`analysis.outputs.progress.outcome`)."""
        return None

    def results(self) -> list[JobReturn]:
        """The job's Hydra return: its run's `status.json` (what a job returns, `run_job`)."""
        return [JobReturn(overrides=self.overrides, working_dir=str(self.run_dir),
                          status=JobStatus.COMPLETED, _return_value=read_run_status(self.run_dir))]

    def interrupt(self, sig: signal.Signals) -> None:
        """Hand the run the terminal's signal `sig` (Ctrl-C's SIGINT, a closed terminal's SIGHUP)
        once (a local run: to its lock's holder on this host, which checkpoints after its step);
        nothing for a finished or a SLURM job."""
        found = holder(self.run_dir) if self._running is not None and not self._interrupted else None
        pid = found.local_pid if found is not None else None
        if pid is not None:
            self._interrupted = True
            with suppress(ProcessLookupError):
                os.kill(pid, sig)


class _SlurmView:
    """The scheduler's state of the followed SLURM jobs (job number -> id), asked at most once
    every `SLURM_POLL_S` for all of them."""

    def __init__(self, ids: Mapping[int, str]) -> None:
        self.ids = dict(ids)
        self.states: dict[int, str] = {}
        self.asked = -float("inf")

    def running(self, num: int) -> bool:
        """Whether job `num` is queued or running (an unknown state, SLURM not answering, counts
        as running: it is asked again)."""
        if time.monotonic() - self.asked >= SLURM_POLL_S:
            self.states, self.asked = slurm_states(self.ids), time.monotonic()
        state = self.states.get(num)
        return not state_word(state) or still_held(state)


def earlier_jobs(sweep_dir: Path, plan: RelaunchPlan, overrides: Mapping[int, Sequence[str]],
                 launcher: str) -> dict[int, EarlierJob]:
    """The plan's finished and followed jobs among `overrides` (job number -> its overrides) as
    :class:`EarlierJob` objects, with what `jobs.json` recorded of each."""
    recorded = read_jobs(sweep_dir)
    known = recorded.jobs if recorded is not None else {}
    follow = {num: job_id for num, job_id in plan.follow.items() if num in overrides}
    # followed by SLURM's word: a job id jobs.json records; the others by their run's lock
    by_id = {num: job_id for num, job_id in follow.items() if launcher == SLURM
             and (job := known.get(num)) is not None and job.job_id == job_id}
    view = _SlurmView(by_id)
    jobs = {num: EarlierJob(sweep_dir / str(num), overrides[num], known.get(num))
            for num in plan.finished if num in overrides}
    for num in follow:
        run_dir = sweep_dir / str(num)
        running = ((lambda n=num: view.running(n)) if num in by_id
                   else (lambda d=run_dir: holder(d) is not None))
        jobs[num] = EarlierJob(run_dir, overrides[num], known.get(num), running)
    return dict(sorted(jobs.items()))


LaunchOf = Callable[[Sequence[str]], Launch]
"""The launch of a job's config from its overrides (the sweeper's composition)."""


@dataclass
class Relaunch:
    """A sweep's relaunch as its launcher acts on it: the validating sweeper's `plan`, made once
    for the jobs it knew of when the sweep started (the one its dry run prints), and `launch_of`,
    each job's launch, for the jobs planned later (a race's next waves)."""

    plan: RelaunchPlan
    launch_of: LaunchOf

    def earlier(self, sweep_dir: Path, numbered: Mapping[int, Sequence[str]],
                launcher: str) -> dict[int, EarlierJob]:
        """The jobs of the batch `numbered` (job number -> overrides) that the launch does not
        submit, finished or followed (:func:`earlier_jobs`)."""
        known = {*self.plan.submit, *self.plan.follow, *self.plan.finished}
        later = {num: self.launch_of(o) for num, o in numbered.items() if num not in known}
        if later:
            found = plan_relaunch(sweep_dir, later, launcher)
            self.plan = RelaunchPlan((*self.plan.submit, *found.submit),
                                     {**self.plan.follow, **found.follow},
                                     {**self.plan.finished, **found.finished}, self.plan.earlier)
        return earlier_jobs(sweep_dir, self.plan, numbered, launcher)
