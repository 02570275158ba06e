"""What both launchers do around their submitit jobs: record, follow and report them.

:class:`SweepFollower` writes ``<sweep>/jobs.json`` (every job's overrides, then its scheduler id
and log once submitted), shows the live monitor (:mod:`analysis.monitor`) while the jobs run,
and at the end prints the summary: one line per job with its final status, folding in what
submitit knows (a job cancelled by the scheduler is ``cancelled``, a failed job's error is its
reason) instead of raising submitit's exceptions. A sweep with a cancelled or failed job ends
with one line and exit status 1 (:class:`SweepIncomplete`); collapsed, diverged and pruned runs
are results, not errors.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from hydra.core.utils import JobReturn

from analysis.monitor import SweepMonitor, counts_text, shown_path
from analysis.progress import (
    FINISHED_STATUSES,
    GONE,
    Job,
    SweepProgress,
    slurm_states,
    write_jobs,
)

# seconds between two looks at the jobs while waiting for them
POLL_S = 2.0


class SweepIncomplete(SystemExit):
    """Ends the sweep with exit status 1 and one line, after the summary was printed."""


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

    ``jobs`` maps job numbers to their overrides. Use as a context manager around the
    submission loop: call :meth:`submitted` for each job, :meth:`update` while waiting (or
    :meth:`wait`), then :meth:`finish` for Hydra's job returns.
    """

    def __init__(self, sweep_dir: Path, launcher: str, jobs: Mapping[int, Sequence[str]]) -> None:
        self.sweep_dir = Path(sweep_dir)
        self.launcher = launcher
        self.overrides = {num: tuple(o) for num, o in jobs.items()}
        self.jobs: dict[int, Any] = {}
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        write_jobs(self.sweep_dir, launcher, [Job(n, o) for n, o in self.overrides.items()])
        self.progress = SweepProgress(self.sweep_dir)
        self.monitor = SweepMonitor(self.progress)

    def __enter__(self) -> SweepFollower:
        self.monitor.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.monitor.__exit__(kind, error, trace)
        if kind is KeyboardInterrupt and self.launcher == "slurm":
            self.monitor.say("Interrupted: the SLURM jobs keep running; follow them with "
                             f"`python -m analysis watch {shown_path(self.sweep_dir)}`")

    def submitted(self, num: int, job: Any) -> None:
        """Record the scheduler id and log file of job ``num``."""
        self.jobs[num] = job
        write_jobs(self.sweep_dir, self.launcher,
                   [Job(num, self.overrides[num], str(job.job_id), str(job.paths.stderr))])

    def states(self) -> dict[int, str]:
        """Each submitted job's state: SLURM's (:func:`analysis.progress.slurm_states`, which
        also knows jobs submitit would wait for for ever) or submitit's local one."""
        if self.launcher == "slurm":
            return slurm_states({num: str(job.job_id) for num, job in self.jobs.items()})
        return {num: str(job.state) for num, job in self.jobs.items()}

    def update(self) -> None:
        """Refresh the monitor (rate-limited by the monitor itself)."""
        self.monitor.update(self.states())

    def over(self, states: Mapping[int, str]) -> set[int]:
        """The jobs that are done, or that no scheduler will ever run."""
        return {num for num, job in self.jobs.items() if states.get(num) in GONE or job.done()}

    def wait(self) -> None:
        """Follow the submitted jobs until every one is over (the scheduler is asked once per
        :data:`POLL_S`)."""
        while True:
            states = self.states()
            self.monitor.update(states)
            if len(self.over(states)) == len(self.jobs):
                return
            time.sleep(POLL_S)

    def finish(self) -> list[JobReturn]:
        """Print the summary; return the jobs' results, or raise :class:`SweepIncomplete`."""
        states = self.states()
        gone = {num for num in self.jobs if states.get(num) in GONE}
        errors = {num: job_error(error) for num, job in self.jobs.items()
                  if num not in gone and (error := job.exception()) is not None}
        rows = [run for run in self.progress.read(states, errors) if run.num in self.overrides]
        self.monitor.summary(rows)
        bad = [run for run in rows if run.status not in FINISHED_STATUSES]
        if bad:
            raise SweepIncomplete(
                f"error: {len(bad)} of {len(rows)} runs did not finish ({counts_text(bad)}); "
                "see the summary above")
        return [self.jobs[num].results()[0] for num in sorted(self.overrides)]
