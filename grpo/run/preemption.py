"""Notice a coming preemption, time limit or cancellation without dying mid-step.

SLURM signals every process of a job: SIGUSR2 `signal_delay_s` before the time limit (submitit's
`--signal`, also sent by `scancel --signal=USR2`), SIGTERM on `scancel`, on a requeue (preemption,
`scontrol requeue`) and at the hard time limit, then SIGKILL `KillWait` seconds later. The handler
only records the signal; the trainer checkpoints at the end of the current GRPO step, asks
`verdict()` what the stop is, writes that status and then hands the signal to whoever handled it
before (submitit's SIGUSR2 handler requeues the job). A terminal's signals are such stops too,
the weakest (:data:`AT_TERMINAL`): SIGINT (Ctrl-C) and SIGHUP (the terminal closed: the shell
hands it to its jobs) both stop the run as `cancelled`, like SIGTERM, and then the process ends
by the signal's default action (no KeyboardInterrupt traceback, no run left `running` without a
checkpoint). :data:`STOPS` is the one table of what each watched signal means.

SLURM sends SIGCONT with every SIGTERM. submitit's handlers for both log a line; a handler runs
between two bytecodes of the main thread, so one that logs while the main thread is inside a log
call to the same file breaks it ("reentrant call", a traceback in the job's log). While the
watcher is installed SIGCONT is therefore ignored (it still resumes a suspended job), and after
the hand-over the watcher's handlers stay: the signals a requeue brings are recorded, not logged.
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from dataclasses import dataclass
from types import FrameType
from typing import Any

from grpo.run.slurm import SchedulerUnavailable, scontrol_show

QUIET = (signal.SIGCONT,)


@dataclass(frozen=True)
class Verdict:
    """How a signalled run stops: `status` (preempted | cancelled), why, and how it resumes."""

    status: str
    cause: str
    resumes: str


AT_TERMINAL = {signal.SIGINT: "Ctrl-C", signal.SIGHUP: "the terminal closed"}
"""The signals a terminal sends its foreground job's processes, and what the user did. A run, a
local sweep's launcher and its jobs take each as they take Ctrl-C."""
RELAUNCH = "launch the same command again to resume from this checkpoint"
STOPS = {
    signal.SIGUSR2: Verdict("preempted", "SIGUSR2, sent before the SLURM time limit or at a "
                            "preemption", "the job is requeued and resumes from this checkpoint"),
    signal.SIGTERM: Verdict("cancelled", "SIGTERM from scancel, the hard time limit or a kill",
                            "launch the same sweep again to resume from this checkpoint"),
    **{sig: Verdict("cancelled", f"{sig.name} ({what})", RELAUNCH)
       for sig, what in AT_TERMINAL.items()},
}
"""What each watched signal means when it decides the stop, the strongest first (a SIGTERM that
came with a requeue is :data:`REQUEUED` instead)."""
REQUEUED = Verdict("preempted", "SIGTERM as SLURM requeued the job, e.g. at a preemption",
                   "the job runs again and resumes from this checkpoint")
WATCHED = tuple(STOPS)


def stopping_line(sig: signal.Signals) -> bytes:
    """What a run says on stderr at the first terminal signal `sig` (from the handler: bytes for
    os.write, no logging)."""
    return (f"\n{STOPS[sig].cause}: the run stops after this GRPO step, with a checkpoint, as "
            f"'cancelled'; launch the same command again to resume it\n").encode()


def requeued_by_scheduler() -> bool | None:
    """Whether SLURM has requeued this job since it started (None: not a SLURM job, or unknown).

    A requeue (preemption, `scontrol requeue`) raises the job's `Restarts` above the
    SLURM_RESTART_COUNT this process started with; a `scancel` or a time limit does not.
    """
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id is None:
        return None
    try:
        records = scontrol_show("job", job_id)
    except SchedulerUnavailable:
        return None
    if not records or "Restarts" not in records[0]:
        return None
    return int(records[0]["Restarts"]) > int(os.environ.get("SLURM_RESTART_COUNT") or 0)


class PreemptionWatcher:
    """Records the signals of :data:`STOPS` while installed; see the module docstring."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}
        self._handed_over = False

    def __enter__(self) -> PreemptionWatcher:
        for sig in WATCHED:
            self._previous[sig] = signal.signal(sig, self._record)
        for sig in QUIET:
            self._previous[sig] = signal.signal(sig, signal.SIG_IGN)
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if signum in AT_TERMINAL and signum not in self.received:
            with suppress(OSError):  # the terminal may be gone (SIGHUP), or the pipe read no more
                os.write(2, stopping_line(signal.Signals(signum)))
        self.received.append(signum)

    def __exit__(self, *exc: object) -> None:
        """Restore the previous handlers, unless the run has handed its signal over (it is
        leaving; see the module docstring)."""
        if not self._handed_over:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    def _deciding_signal(self) -> signal.Signals:
        """The strongest signal received, in :data:`STOPS`'s order."""
        return next(sig for sig in WATCHED if sig in self.received)

    def verdict(self) -> Verdict:
        """What the received signals mean (:data:`STOPS`); asks SLURM whether a deciding SIGTERM
        came with a requeue."""
        sig = self._deciding_signal()
        if sig == signal.SIGTERM and requeued_by_scheduler():
            return REQUEUED
        return STOPS[sig]

    def hand_over(self) -> None:
        """Deliver the deciding signal to the handler from before (this process's default action
        where there was none), keeping the watcher's handlers for the signals that follow.

        submitit's SIGUSR2 handler requeues the job and exits; its SIGTERM handler only logs.
        Python's SIGINT handler (it raises KeyboardInterrupt; a local sweep's job takes SIGHUP
        with it too) counts as none.
        """
        sig = self._deciding_signal()
        self._handed_over = True
        handler = self._previous[sig]
        if handler is signal.default_int_handler:
            handler = signal.SIG_DFL
        if callable(handler):
            handler(sig, None)
        else:
            signal.signal(sig, handler)
            os.kill(os.getpid(), sig)
