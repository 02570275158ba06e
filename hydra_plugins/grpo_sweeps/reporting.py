"""What both launchers do around their submitit jobs: record, follow and report them.

:class:`SweepFollower` writes ``<sweep>/jobs.json`` (every job's overrides, then its scheduler id
and log once submitted), shows the live monitor (:mod:`analysis.outputs.monitor`) while the jobs run,
and at the end prints the summary: one line per job with its final status, folding in what
submitit knows (a job cancelled by the scheduler is ``cancelled``, a failed job's error is its
reason) instead of raising submitit's exceptions. A sweep with a cancelled or failed job ends
with one line and exit status 1 (:class:`SweepIncomplete`); collapsed, diverged and pruned runs
are results, not errors.

Ctrl-C ends the launcher with one line and exit status 130 (:class:`SweepInterrupted`), never
KeyboardInterrupt's traceback. SLURM jobs keep running (the line says how to follow them). Local
jobs get the Ctrl-C as well (the terminal signals its whole process group, the launcher the
processes that were not there yet; their submitit controllers do not take it, see
:mod:`hydra_plugins.grpo_sweeps.pooled_local_launcher`): each running
run stops after its current GRPO step with a checkpoint, as ``cancelled``; the launcher waits for
them (a second Ctrl-C leaves at once), starts no other job and prints the summary, where a job
that ended without writing a status (never started, or stopped while starting) is ``cancelled``.

Closing the terminal (SIGHUP, :data:`grpo.run.preemption.AT_TERMINAL`) is taken as Ctrl-C is,
with exit status 129 (128 + the signal, as a shell reports it) and the same signal handed to the
jobs, so that their runs' status names it; a second SIGHUP (the shell's, then the kernel's) does
not cut the wait short. The monitor's lines then go nowhere without stopping the launcher
(:class:`analysis.outputs.monitor.SweepMonitor`).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from hydra.core.utils import JobReturn

from analysis.outputs.monitor import SweepMonitor, counts_text, make_command, stopped_by
from analysis.outputs.progress import FINISHED_STATUSES, GONE, RunProgress, SweepProgress
from analysis.readers.jobs import Job, write_jobs
from grpo.run.preemption import STOPS
from grpo.run.slurm import slurm_states, still_held

# seconds between two looks at the jobs while waiting for them (the scheduler is asked)
POLL_S = 2.0
# seconds between two looks at local jobs ending after Ctrl-C
LOCAL_POLL_S = 0.2


class SweepIncomplete(SystemExit):
    """Ends the sweep with exit status 1 and one line, after the summary was printed."""


class SweepInterrupted(SystemExit):
    """Ends the sweep after Ctrl-C or SIGHUP (`sig`) with exit status 128 + `sig`
    (:func:`analysis.outputs.monitor.stopped_by`), once a line said what the jobs do now (see the module
    docstring)."""

    def __init__(self, sig: int) -> None:
        super().__init__(stopped_by(sig))


class Hangup(KeyboardInterrupt):
    """SIGHUP (the terminal closed), raised in the launcher where Ctrl-C raises KeyboardInterrupt."""


def hang_up(signum: int, frame: object) -> NoReturn:
    """The launcher's SIGHUP handler: ignore the SIGHUPs that follow (the shell's and the
    kernel's come together), raise :class:`Hangup`."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    raise Hangup


def terminal_signal(stop: KeyboardInterrupt) -> signal.Signals:
    """The terminal signal that raised `stop`: SIGHUP for a :class:`Hangup`, else SIGINT."""
    return signal.SIGHUP if isinstance(stop, Hangup) else signal.SIGINT


def job_error(error: BaseException) -> str:
    """The line that says what went wrong in a submitit job's exception.

    A failed job's message holds its traceback between two dashed lines: its last line (the
    exception) is kept. An uncompleted job's message is one line, kept as is.
    """
    lines = [line.strip() for line in str(error).splitlines()]
    dashes = [i for i, line in enumerate(lines) if line and set(line) == {"-"}]
    body = lines[dashes[0] + 1: dashes[1]] if len(dashes) >= 2 else lines
    return next((line for line in reversed(body) if line), type(error).__name__)


class SweepFollower:
    """Records, follows and reports the jobs of one launch; see the module docstring.

    ``jobs`` maps job numbers to their overrides; ``interrupt(job, sig)`` hands a submitted job
    the terminal's signal (local jobs: see the module docstring); ``earlier``: the jobs of an
    earlier launch that this one does not submit (finished, or followed until they end:
    :class:`hydra_plugins.grpo_sweeps.relaunch.EarlierJob`), by number. Use as a context manager
    around the submission loop: call :meth:`submitted` for each job, :meth:`update` while waiting (or
    :meth:`wait`), then :meth:`finish` for Hydra's job returns.
    """

    def __init__(self, sweep_dir: Path, launcher: str, jobs: Mapping[int, Sequence[str]],
                 interrupt: Callable[[Any, signal.Signals], None] | None = None,
                 earlier: Mapping[int, Any] | None = None) -> None:
        self.sweep_dir = Path(sweep_dir)
        self.launcher = launcher
        self.interrupt = interrupt
        self.overrides = {num: tuple(o) for num, o in jobs.items()}
        self.jobs: dict[int, Any] = dict(earlier or {})  # a relaunch's finished and followed jobs
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        write_jobs(self.sweep_dir, launcher, [
            Job(n, o, *((job.job_id, job.paths.stderr) if (job := self.jobs.get(n)) else ()))
            for n, o in self.overrides.items()])
        self.progress = SweepProgress(self.sweep_dir)
        self.monitor = SweepMonitor(self.progress)

    def __enter__(self) -> SweepFollower:
        self._sighup = signal.signal(signal.SIGHUP, hang_up)
        self.monitor.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        try:
            self.monitor.__exit__(kind, error, trace)
            if isinstance(error, KeyboardInterrupt):
                self.interrupted(terminal_signal(error))
        finally:
            signal.signal(signal.SIGHUP, self._sighup)

    def interrupted(self, sig: signal.Signals) -> None:
        """After Ctrl-C or SIGHUP (`sig`): say what the jobs do now, for local jobs wait for them
        and print the summary; raise :class:`SweepInterrupted` (see the module docstring)."""
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a terminal closing now ends no wait
        if self.launcher == "slurm":
            self.monitor.say("Interrupted: the SLURM jobs keep running; follow them with "
                             f"`{make_command('watch', self.sweep_dir)}`")
            raise SweepInterrupted(sig) from None
        again = " (Ctrl-C again to leave now)" if sig == signal.SIGINT else ""
        self.monitor.say(f"{STOPS[sig].cause}: each running run stops after its current GRPO "
                         f"step, with a checkpoint, as 'cancelled'; no other job starts. Waiting "
                         f"for them{again}")
        try:
            while running := [job for job in self.jobs.values() if not job.done()]:
                for job in running if self.interrupt is not None else ():
                    self.interrupt(job, sig)  # a job started after the terminal's signal never had it
                time.sleep(LOCAL_POLL_S)
            unstarted = {run.num for run in self.progress.read() if run.status == "pending"}
            self.monitor.summary(self.rows({**self.states(), **dict.fromkeys(unstarted, "CANCELLED")}))
        except KeyboardInterrupt:
            self.monitor.say("Ctrl-C again: not waiting; the running runs still stop after their "
                             "step, with a checkpoint")
        self.monitor.say("Interrupted: launch the same command again to resume the sweep "
                         "(finished runs are kept, the others resume from their checkpoints)")
        raise SweepInterrupted(sig) from None

    def submitted(self, num: int, job: Any) -> None:
        """Record the scheduler id and log file of job ``num``."""
        self.jobs[num] = job
        write_jobs(self.sweep_dir, self.launcher,
                   [Job(num, self.overrides[num], str(job.job_id), str(job.paths.stderr))])

    def states(self) -> dict[int, str]:
        """Each submitted job's state: SLURM's (:func:`grpo.run.slurm.slurm_states`, which
        also knows jobs submitit would wait for for ever) or submitit's local one."""
        if self.launcher == "slurm":
            return slurm_states({num: str(job.job_id) for num, job in self.jobs.items()
                                 if job.job_id is not None})  # a finished run may have none
        return {num: str(job.state) for num, job in self.jobs.items()}

    def update(self) -> None:
        """Refresh the monitor (rate-limited by the monitor itself)."""
        self.monitor.update(self.states())

    def over(self, states: Mapping[int, str]) -> set[int]:
        """The jobs that are done, or that no scheduler will ever run. A SLURM job the scheduler
        still holds (:data:`grpo.run.slurm.SCHEDULER_ACTIVE`) is not over whatever submitit
        says: submitit 1.5's `done()` counts SUSPENDED (an admin's `scontrol suspend`, a
        partition preempting by suspension), REQUEUE_HOLD and CONFIGURING as ended, and the
        sweep would end with the job "did not finish" while it waits to go on."""
        slurm = self.launcher == "slurm"
        return {num for num, job in self.jobs.items() if states.get(num) in GONE
                or (job.done() and not (slurm and still_held(states.get(num))))}

    def wait(self) -> None:
        """Follow the submitted jobs until every one is over (the scheduler is asked once per
        :data:`POLL_S`)."""
        while True:
            states = self.states()
            self.monitor.update(states)
            if len(self.over(states)) == len(self.jobs):
                return
            time.sleep(POLL_S)

    def rows(self, states: Mapping[int, str]) -> list[RunProgress]:
        """This launch's runs as the summary shows them, with each job's scheduler state
        (``states``) and, for a finished job, its error folded in (:func:`analysis.outputs.progress.outcome`)."""
        gone = {num for num in self.jobs if states.get(num) in GONE}
        errors = {num: job_error(error) for num, job in self.jobs.items()
                  if num not in gone and (error := job.exception()) is not None}
        return [run for run in self.progress.read(states, errors) if run.num in self.overrides]

    def finish(self) -> list[JobReturn]:
        """Print the summary; return the jobs' results, or raise :class:`SweepIncomplete` (every
        job is over: a Ctrl-C here cuts the summary short, :class:`SweepInterrupted`)."""
        try:
            rows = self.rows(self.states())
            self.monitor.summary(rows)
        except KeyboardInterrupt:
            self.monitor.say(f"Interrupted: the summary was cut short; every job has ended; "
                             f"`{make_command('watch', self.sweep_dir)}` prints it")
            raise SweepInterrupted(signal.SIGINT) from None
        bad = [run for run in rows if run.status not in FINISHED_STATUSES]
        if bad:
            raise SweepIncomplete(
                f"error: {len(bad)} of {len(rows)} runs did not finish ({counts_text(bad)}); "
                "see the summary above")
        return [self.jobs[num].results()[0] for num in sorted(self.overrides)]
